"""Event clips' cost (issue 36): memory per stream for the pre-roll ring, the cost of writing a
clip, and memory over minutes of a run with an event every few seconds.

1. ring    ``ClipsOutput`` (the library, in this process) fed 720p frames of a moving scene at
           25 fps scene time, 1 stream then ``--streams`` streams, each encoded to H.264 into its
           ring of the last ``--pre`` seconds: the ring's bytes per stream, and the process's RSS
           growth per stream (encoder and ring), against the goal of 20 MB per stream.
2. write   an event on a stream with a full ring: the time the output thread spends on it (the
           pre-roll muxed into the clip's fragmented MP4), then on each post-roll frame, and
           the encode time per frame (the output thread's cost of keeping the ring).
3. minutes ``edgert camera`` (its own process) on a looped scene where an object crosses a line
           every few seconds of scene time, ``--clips`` on: its RSS every second for
           ``--minutes``; the slope over the last two thirds (flat: no growth per clip).

    python benchmarks/clips.py [--json reports/clips.json] [--streams 4] [--minutes 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.json_report import write_json  # noqa: E402
from edgert.apps.camera.sinks.base import SinkContext  # noqa: E402
from edgert.apps.camera.sinks.clips import ClipsOutput  # noqa: E402
from tests.procs import SCENE, edgert, rss_mb  # noqa: E402

FPS = 25


class _Frame:
    def __init__(self, stream: int, t: float) -> None:
        self.stream, self.t_scene = stream, t


def scene(width: int, height: int):
    """Frames of a textured background with two moving squares (an encoder's real work)."""
    rng = np.random.default_rng(0)
    base = np.clip(
        rng.normal(110, 25, (height // 8, width // 8, 3)).repeat(8, 0).repeat(8, 1), 0, 255
    ).astype(np.uint8)
    side = height // 5

    def frame(i: int) -> np.ndarray:
        img = base.copy()
        for k, speed in enumerate((7, 11)):
            x = (i * speed + k * width // 2) % (width - side)
            y = height // 4 + k * height // 3
            img[y : y + side, x : x + side] = (40 + 160 * k, 220 - 150 * k, 250)
        return img

    return frame


def ring_and_write(streams: int, pre: float, width: int, height: int, folder: Path) -> dict:
    frame = scene(width, height)
    before = rss_mb()
    out = ClipsOutput(
        f"{folder}/s{streams}?pre={pre}&post=2",
        SinkContext(fps=FPS, streams=[{"stream": i} for i in range(streams)]),
    )
    n = int((pre + 3) * FPS)  # the ring full, and then some
    encode_s = []
    for i in range(n):
        img = frame(i)
        for s in range(streams):
            t0 = time.perf_counter()
            out.write(_Frame(s, i / FPS), img, {})
            encode_s.append(time.perf_counter() - t0)
    ring = [sum(len(d) for _, _, d, _ in st.ring) for st in out.streams]
    ring_s = [(st.ring[-1][0] - st.ring[0][0]) / 1e9 for st in out.streams]
    grown = rss_mb() - before
    # an event on stream 0: the pre-roll muxed at once, then each post-roll frame
    t0 = time.perf_counter()
    out.events([{"event": "track_start", "stream": 0}])
    event_ms = (time.perf_counter() - t0) * 1e3
    post_ms = []
    for i in range(n, n + 3 * FPS):
        t0 = time.perf_counter()
        out.write(_Frame(0, i / FPS), frame(i), {})
        post_ms.append((time.perf_counter() - t0) * 1e3)
    out.close()
    clips = sorted((folder / f"s{streams}").glob("*.mp4"))
    return {
        "streams": streams,
        "ring_mb_per_stream": round(statistics.mean(ring) / 1e6, 2),
        "ring_seconds": round(statistics.mean(ring_s), 2),
        "rss_growth_mb": round(grown, 1),
        "encode_ms_per_frame_p50": round(statistics.median(encode_s) * 1e3, 2),
        "event_ms": round(event_ms, 2),
        "post_roll_frame_ms_p50": round(statistics.median(post_ms), 2),
        "clip_mb": round(clips[0].stat().st_size / 1e6, 2) if clips else None,
    }


def minutes_run(minutes: float, folder: Path) -> dict:
    from tests.apps.test_gate import quiet_scene
    from tests.tiny import blob_detector_bundle

    bundle = blob_detector_bundle(folder / "det")
    video = quiet_scene(folder / "scene.mp4")
    clips = folder / "clips"
    proc = subprocess.Popen(
        edgert(
            *("camera", bundle, "--source", video, "--loop", "--headless", *SCENE),
            *("--clips", clips, "--pre-roll", "2", "--post-roll", "2"),
            *("--duration", minutes * 60),
        ),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=str(ROOT.parent)),
    )
    t0 = time.monotonic()
    series = []
    while proc.poll() is None:
        try:
            series.append((time.monotonic() - t0, rss_mb(proc.pid)))
        except (OSError, StopIteration):
            break
        time.sleep(1.0)
    proc.wait()
    tail = [(t, m) for t, m in series if t >= series[-1][0] / 3]
    slope = float(np.polyfit([t for t, _ in tail], [m for _, m in tail], 1)[0]) * 60
    return {
        "minutes": minutes,
        "clips_written": len(list(clips.glob("*.mp4"))),
        "rss_mb_at_1_min": round(next(m for t, m in series if t >= min(60, series[-1][0])), 1),
        "rss_mb_end": round(series[-1][1], 1),
        "rss_mb_max": round(max(m for _, m in series), 1),
        "slope_mb_per_min_last_two_thirds": round(slope, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default="reports/clips.json")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--pre", type=float, default=5.0)
    ap.add_argument("--size", default="1280x720")
    ap.add_argument("--minutes", type=float, default=3.0)
    a = ap.parse_args()
    width, height = (int(v) for v in a.size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        rows = [ring_and_write(n, a.pre, width, height, Path(tmp)) for n in (1, a.streams)]
        per_stream = (rows[1]["rss_growth_mb"] - rows[0]["rss_growth_mb"]) / (a.streams - 1)
        run = minutes_run(a.minutes, Path(tmp)) if a.minutes > 0 else None
    print(f"\n{width}x{height} at {FPS} fps, {a.pre:g} s pre-roll, x264 at 4 Mbit/s")
    head = ("streams", "ring MB/str", "ring s", "RSS +MB", "enc ms", "event ms", "post ms")
    print("".join(f"{h:>12}" for h in head))
    for r in rows:
        print(
            f"{r['streams']:>12}{r['ring_mb_per_stream']:>12}{r['ring_seconds']:>12}"
            f"{r['rss_growth_mb']:>12}{r['encode_ms_per_frame_p50']:>12}{r['event_ms']:>12}"
            f"{r['post_roll_frame_ms_p50']:>12}"
        )
    print(f"memory per added stream (RSS): {per_stream:.1f} MB (goal: under 20 MB)")
    if run:
        print(
            f"{run['minutes']:g} min with clips: {run['clips_written']} clips, RSS "
            f"{run['rss_mb_at_1_min']} MB at 1 min, {run['rss_mb_end']} MB at the end, slope "
            f"{run['slope_mb_per_min_last_two_thirds']} MB/min over the last two thirds"
        )
    write_json(
        a.json,
        {
            "size": a.size,
            "fps": FPS,
            "pre_roll_s": a.pre,
            "rows": rows,
            "rss_mb_per_added_stream": round(per_stream, 1),
            "minutes_run": run,
        },
    )


if __name__ == "__main__":
    main()
