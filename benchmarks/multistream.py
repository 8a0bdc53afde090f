"""Many streams, one engine: aggregate and per-stream throughput of `edgert camera`'s pipeline with
the frames of all streams batched into one inference, against the same streams at --batch 1.

MobileNetV2 exported with a dynamic batch (max 8); 1, 2, 4, 8 streams of pre-rendered synthetic
frames (each stream its own photos and phase, rendering costs nothing): lossless like files by
default (every stream as fast as the pipeline takes it: throughput), or paced like cameras with
--live FPS (frames dropped oldest-first when the model falls behind: fairness under overload).

The bare inference call is timed too (ms per image at batch 1, 2, 4, 8): batching cannot win
more than the engine gains per image.

Each configuration runs --repeats times, batched and unbatched interleaved, and the median run is
reported (this machine's speed drifts by a third over minutes).

Goal on this CPU: 4 streams batched >= 1.2x the --batch 1 throughput, no stream below 0.9x the
mean per-stream FPS.

    python benchmarks/multistream.py [--seconds 6] [--streams 1 2 4 8] [--repeats 3] [--live 30]
                                     [--json reports/multistream.json]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from json_report import write_json

from edgert.apps.camera.app import run_streams
from edgert.apps.camera.sources import SyntheticSource
from edgert.export import export_model
from edgert.runtime.sample_data import ALL_PHOTOS
from edgert.runtime.tasks import load_task_model


class Prerendered(SyntheticSource):
    """Stream k: the synthetic scene over its own photos, frames rendered up front."""

    def __init__(self, k: int, fps: float | None, n: int = 48) -> None:
        photos = tuple(ALL_PHOTOS[(k + j) % len(ALL_PHOTOS)] for j in range(2))
        super().__init__(320, 240, fps or 30.0, photos=photos, realtime=fps is not None)
        self.cache = [SyntheticSource.frame(self, i * 7 + k) for i in range(n)]
        self.description = f"stream {k} ({', '.join(photos)})"

    def frame(self, i: int):  # SyntheticSource.read paces (when live) and calls this
        return self.cache[i % len(self.cache)]


def measure(model, streams: int, batch: int | None, seconds: float, live: float | None) -> dict:
    sources = [Prerendered(k, live) for k in range(streams)]
    s = run_streams(model, sources, batch=batch, duration=seconds)
    per = [st["fps"] for st in s["streams"]]
    mean = float(np.mean(per))
    return {
        "streams": streams,
        "batch": s["batch"]["max"],
        "fps": s["fps"],
        "per_stream_fps": per,
        "min_over_mean": min(per) / mean if mean else 0.0,
        "e2e_p99_ms": max(st["latency_ms"]["end_to_end"]["p99"] for st in s["streams"]),
        "infer_p50_ms": s["latency_ms"]["infer"]["p50"],
        "mean_batch": s["batch"]["mean"],
        "dropped": s["frames_dropped"],
    }


def engine_alone(model, batches=(1, 2, 4, 8), seconds: float = 2.0) -> dict[int, float]:
    """ms per image of the bare inference call at each batch: the most batching can win here."""
    tensor, _ = model.preprocess(Prerendered(0, None).cache[0])
    out = {}
    for b in batches:
        if model.max_batch is not None and b > model.max_batch:
            continue
        x = model.collate([tensor] * b)
        model.infer(x)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            model.infer(x)
            n += 1
        out[b] = (time.perf_counter() - t0) / n / b * 1e3
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs per configuration, interleaved; the median is kept",
    )
    ap.add_argument("--live", type=float, metavar="FPS", help="pace every stream like a camera")
    ap.add_argument("--model", help="a dynamic-batch bundle (default: export zoo:mobilenet_v2)")
    ap.add_argument("--json", default="reports/multistream.json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bundle = (
            args.model
            or export_model(
                "zoo:mobilenet_v2", Path(tmp) / "m.edgert", dynamic_batch=True, max_batch=8
            ).bundle
        )
        with load_task_model(bundle) as model:
            run_streams(model, [Prerendered(0, None)], duration=1.0)  # warm up
            for n in args.streams:
                # batched and --batch 1 runs interleaved: this machine's speed drifts over minutes
                runs: dict = {}
                for _ in range(args.repeats):
                    for batch in (None, 1) if n > 1 else (None,):
                        r = measure(model, n, batch, args.seconds, args.live)
                        runs.setdefault(batch, []).append(r)
                        print(f"  {n} streams, batch {r['batch']}: {r['fps']:.1f} fps", flush=True)
                for got in runs.values():
                    median = sorted(got, key=lambda r: r["fps"])[len(got) // 2]
                    rows.append({**median, "runs_fps": [r["fps"] for r in got]})
            alone = engine_alone(model)
            backend = model.backend_reason
    print(
        f"\nbackend: {backend}; {os.cpu_count()} CPUs; "
        f"{'live sources at ' + format(args.live, 'g') + ' fps' if args.live else 'lossless sources'}"
    )
    head = f"{'streams':>7} {'batch':>5} {'fps':>8} {'vs b1':>6} {'per-stream fps (min..max)':>26} {'min/mean':>8} {'e2e p99 ms':>10} {'infer p50':>9} {'mean batch':>10} {'dropped':>7}"
    print(head)
    print("-" * len(head))
    base = {r["streams"]: r["fps"] for r in rows if r["batch"] == 1}
    for r in rows:
        per = r["per_stream_fps"]
        vs = r["fps"] / base[r["streams"]] if r["streams"] in base else 1.0
        r["vs_batch1"] = vs
        print(
            f"{r['streams']:>7} {r['batch']:>5} {r['fps']:>8.1f} {vs:>5.2f}x {min(per):>12.1f} .. {max(per):<11.1f} "
            f"{r['min_over_mean']:>8.2f} {r['e2e_p99_ms']:>10.1f} {r['infer_p50_ms']:>9.1f} {r['mean_batch']:>10.2f} {r['dropped']:>7}"
        )
    print(
        "engine alone, ms per image: "
        + ", ".join(f"batch {b} {ms:.2f}" for b, ms in alone.items())
        + (f" (batch 4 is {alone[1] / alone[4]:.2f}x batch 1 per image)" if 4 in alone else "")
    )
    four = next((r for r in rows if r["streams"] == 4 and r["batch"] == 4), None)
    if four and not args.live:
        print(
            f"\n4 streams batched: {four['vs_batch1']:.2f}x the --batch 1 throughput (goal >= 1.2x), "
            f"slowest stream {four['min_over_mean']:.2f}x the mean (goal >= 0.9x)"
        )
    write_json(
        args.json,
        {
            "backend": backend,
            "live_fps": args.live,
            "rows": rows,
            "engine_alone_ms_per_image": alone,
        },
    )


if __name__ == "__main__":
    main()
