"""What a model swap costs a running camera (issue 39): frames dropped and the latency added
around a swap, the time from the request to the new model serving, and peak memory.

``edgert camera`` (its own process) reads ``--streams`` synthetic:// streams at 30 fps and swaps,
through ``POST /model``, between two bundles of the same network (MobileNetV2 by default, exported
twice: two bundles, two ONNX Runtime sessions, as a retrained model would be) ``--swaps`` times,
each request sent when the one before is serving. The same run without swaps is the reference.
From the frames' JSON lines: frames dropped (per stream, indices missing), the end-to-end latency
p50/p99 of all frames and of the frames captured within 0.5 s of a swap (where the model label
changes); from the requests: request -> new model serving (GET /model says it), p50/max; from
/proc: RSS before the swaps, its peak during them, after them. Prints a table and writes JSON.

    python benchmarks/hot_swap.py [--json reports/hot_swap.json] [--swaps 100] [--streams 2]
                                  [--model zoo:mobilenet_v2 | tiny]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.json_report import write_json  # noqa: E402
from tests.apps.test_hot_swap import Camera  # noqa: E402

FPS = 30


def bundles(kind: str, folder: Path) -> tuple[Path, Path]:
    if kind == "tiny":
        from tests.tiny import classifier_bundle

        return classifier_bundle(folder / "a", "a"), classifier_bundle(folder / "b", "b")
    from edgert.export import export_model

    return tuple(
        export_model(kind, folder / f"{name}.edgert", name=name).bundle for name in ("a", "b")
    )


def run(
    a: Path, b: Path, streams: int, swaps: int, seconds: float, folder: Path, every: float
) -> dict:
    frames = folder / f"frames_{swaps}.jsonl"
    cam = Camera(
        a,
        *("--allow-models", folder, "--rollback-window", "0", "--jsonl", frames),
        source=("synthetic://",) * streams,
    )
    time.sleep(3.0)  # warm: the first frames, the threads' first batches
    rss = {"before": cam.rss_mb(), "peak": 0.0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            try:
                rss["peak"] = max(rss["peak"], cam.rss_mb())
            except (OSError, StopIteration):
                return

    threading.Thread(target=sample, daemon=True).start()
    served_s = []
    t0 = time.monotonic()
    for i in range(swaps):
        target = b if i % 2 == 0 else a
        sent = time.monotonic()
        code, said = cam.swap(target)
        assert code == 202, said
        m = cam.settled(i + 1)
        assert m["model"]["path"] == str(target), m
        served_s.append(time.monotonic() - sent)
        time.sleep(max(1.0 / FPS, every - (time.monotonic() - sent)))  # a frame on each, at least
    left = seconds - (time.monotonic() - t0)
    if left > 0:
        time.sleep(left)
    stop.set()
    rss["after"] = cam.rss_mb()
    summary = cam.stop()
    records = [json.loads(x) for x in frames.read_text().splitlines()]
    records = [r for r in records if "frame" in r and "results" in r]
    by_stream = collections.defaultdict(list)
    for r in records:
        by_stream[r["stream"]].append(r)
    missing = sum(rs[-1]["frame"] + 1 - len(rs) for rs in by_stream.values())
    changes = [
        y["t"]
        for rs in by_stream.values()
        for x, y in zip(rs, rs[1:], strict=False)
        if x.get("model") != y.get("model")
    ]
    near = [
        r["latency_ms"]["end_to_end"]
        for r in records
        if changes and min(abs(r["t"] - c) for c in changes) <= 0.5
    ]
    allv = [r["latency_ms"]["end_to_end"] for r in records]
    return {
        "swaps": swaps,
        "frames": len(records),
        "frames_dropped": summary["frames_dropped"],
        "frames_missing_in_order": missing,
        "e2e_p50_ms": round(float(np.percentile(allv, 50)), 1),
        "e2e_p99_ms": round(float(np.percentile(allv, 99)), 1),
        "near_swap_frames": len(near),
        "near_swap_p50_ms": round(float(np.percentile(near, 50)), 1) if near else None,
        "near_swap_p99_ms": round(float(np.percentile(near, 99)), 1) if near else None,
        "request_to_serving_p50_s": round(statistics.median(served_s), 3) if served_s else None,
        "request_to_serving_max_s": round(max(served_s), 3) if served_s else None,
        "rss_mb_before": round(rss["before"], 1),
        "rss_mb_peak": round(rss["peak"], 1),
        "rss_mb_after": round(rss["after"], 1),
        "swaps_counted": summary["model"]["swaps"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default="reports/hot_swap.json")
    ap.add_argument("--swaps", type=int, default=100)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--model", default="zoo:mobilenet_v2", help="a zoo model, or tiny")
    ap.add_argument(
        "--every",
        type=float,
        default=1.0,
        help="seconds from one swap request to the next (0: each as soon as the last serves)",
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        first, second = bundles(a.model, folder)
        swapped = run(first, second, a.streams, a.swaps, 0, folder, a.every)
        seconds = swapped["frames"] / (FPS * a.streams)  # the reference runs as long
        reference = run(first, second, a.streams, 0, seconds, folder, a.every)
    interval = 1e3 / FPS
    added = (swapped["near_swap_p99_ms"] or 0) - reference["e2e_p99_ms"]
    print(
        f"\n{a.model}, {a.streams} streams at {FPS} fps, {a.swaps} swaps (POST /model, one "
        f"every {a.every:g} s at most)"
    )
    head = ("run", "frames", "dropped", "p50 ms", "p99 ms", "near p50", "near p99", "RSS MB")
    print("".join(f"{h:>10}" for h in head))
    for name, r in (("no swaps", reference), ("swaps", swapped)):
        print(
            f"{name:>10}{r['frames']:>10}{r['frames_dropped'] + r['frames_missing_in_order']:>10}"
            f"{r['e2e_p50_ms']:>10}{r['e2e_p99_ms']:>10}{str(r['near_swap_p50_ms']):>10}"
            f"{str(r['near_swap_p99_ms']):>10}"
            f"{r['rss_mb_before']:>6}/{r['rss_mb_peak'] or r['rss_mb_after']}"
        )
    print(
        f"request -> new model serving: p50 {swapped['request_to_serving_p50_s']} s, max "
        f"{swapped['request_to_serving_max_s']} s"
    )
    print(
        f"p99 added around a swap: {added:.1f} ms (goal: under one frame interval, "
        f"{interval:.1f} ms); frames dropped over {a.swaps} swaps: "
        f"{swapped['frames_dropped'] + swapped['frames_missing_in_order']} (goal: 0)"
    )
    write_json(
        a.json,
        {
            "model": a.model,
            "streams": a.streams,
            "swap_every_s": a.every,
            "fps": FPS,
            "reference": reference,
            "swapped": swapped,
            "p99_added_near_swap_ms": round(added, 1),
            "frame_interval_ms": round(interval, 1),
            "cpu_count": os.cpu_count(),
        },
    )


if __name__ == "__main__":
    main()
