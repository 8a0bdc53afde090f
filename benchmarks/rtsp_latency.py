"""Glass-to-result latency of RTSP cameras: GStreamer (edgert's default) vs OpenCV's FFmpeg.

A real RTSP server (tests/rtsp_server.py: gst-rtsp-server, x264) serves a scene with each frame's
index burned into its pixels and logs when it pushed each frame (CLOCK_MONOTONIC, the same clock
in every process here). Each decoder path reads the stream through edgert's real camera pipeline
(``run_streams`` with a small classifier), and every result is matched to its send time by the
index read back from the frame's pixels: latency = result time - send time, so encode, network,
jitter buffer, decode, colour conversion, queueing, inference and postprocess are all in it.
The run is split into windows to show whether latency grows. CPU: this process's user+system
time over the run (decode and inference; the server is another process), in % of one core.

    .venv/bin/python benchmarks/rtsp_latency.py --seconds 120 --json reports/rtsp_latency.json
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from json_report import write_json  # noqa: E402

from tests.ports import free_ports  # noqa: E402
from tests.rtsp_server import frame_index  # noqa: E402
from tests.tiny import classifier_bundle  # noqa: E402

PATHS = {
    # name: (SourceOptions fields, what it is)
    "gstreamer": ({"decoder": "gstreamer"}, "edgert default: rtspsrc latency=100, avdec"),
    "ffmpeg": ({"decoder": "ffmpeg"}, "OpenCV's FFmpeg, its defaults"),
}


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def measure(
    name: str,
    opts: dict,
    bundle: Path,
    seconds: float,
    width: int,
    height: int,
    fps: int,
    windows: int,
) -> dict:
    from edgert.apps.camera.app import run_streams
    from edgert.apps.camera.sources import SourceOptions, open_source
    from edgert.runtime.tasks import load_task_model

    port = free_ports(1)[0]
    sends_path = Path(tempfile.mkstemp(suffix=".sends")[1])
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.rtsp_server",
            "--port",
            str(port),
            "--fps",
            str(fps),
            "--width",
            str(width),
            "--height",
            str(height),
            "--sends",
            str(sends_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert server.stdout.readline().startswith("ready")
    results: list[tuple[float, int]] = []
    try:
        source = open_source(f"rtsp://127.0.0.1:{port}/cam", SourceOptions(**opts))
        with load_task_model(str(bundle)) as model:
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
            summary = run_streams(
                model,
                [source],
                duration=seconds,
                on_result=lambda f: results.append((time.monotonic(), frame_index(f.image))),
            )
            r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    finally:
        server.terminate()
        server.wait(10)
    sends = {}
    for line in sends_path.read_text().splitlines():
        i, t = line.split()
        sends[int(i)] = float(t)
    sends_path.unlink()
    lat = [(t, (t - sends[k]) * 1e3) for t, k in results if k in sends]
    unmatched = len(results) - len(lat)  # a damaged frame's index is not one that was sent
    start = lat[0][0] if lat else t0
    span = (lat[-1][0] - start) / windows if lat else 1.0
    per_window = []
    for w in range(windows):
        ms = [v for t, v in lat if start + w * span <= t < start + (w + 1) * span + 1e-9]
        if ms:
            per_window.append(round(statistics.median(ms), 1))
    ms = [v for _, v in lat]
    cpu = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / (t1 - t0) * 100
    st = summary["streams"][0]
    return {
        "path": name,
        "what": PATHS[name][1],
        "decoder": st.get("decoder"),
        "frames_sent": len(sends),
        "results": len(results),
        "unmatched": unmatched,
        "dropped": st["frames_dropped"],
        "p50_ms": round(statistics.median(ms), 1),
        "p90_ms": round(_pct(ms, 0.90), 1),
        "p99_ms": round(_pct(ms, 0.99), 1),
        "max_ms": round(max(ms), 1),
        "p50_per_window_ms": per_window,
        "cpu_percent_of_one_core": round(cpu, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=720)
    ap.add_argument("--fps", type=int, default=25)
    ap.add_argument("--windows", type=int, default=6, help="windows of the run for growth")
    ap.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    ap.add_argument("--json", default="reports/rtsp_latency.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bundle = classifier_bundle(Path(tmp) / "m")
        rows = [
            measure(
                p,
                PATHS[p][0],
                bundle,
                args.seconds,
                args.width,
                args.height,
                args.fps,
                args.windows,
            )
            for p in args.paths
        ]
    print(
        f"{args.width}x{args.height} H.264 at {args.fps} fps over RTSP on loopback, "
        f"{args.seconds:g} s per path"
    )
    print(
        f"{'path':<10} {'decoder':<11} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7} "
        f"{'results':>8} {'unmatched':>9} {'CPU %':>6}  p50 per window (ms)"
    )
    for r in rows:
        print(
            f"{r['path']:<10} {str(r['decoder']):<11} {r['p50_ms']:7.1f} {r['p90_ms']:7.1f} "
            f"{r['p99_ms']:7.1f} {r['max_ms']:7.1f} {r['results']:8d} {r['unmatched']:9d} "
            f"{r['cpu_percent_of_one_core']:6.1f}  {r['p50_per_window_ms']}"
        )
    by = {r["path"]: r for r in rows}
    ratio = None
    if "gstreamer" in by and "ffmpeg" in by:
        ratio = by["gstreamer"]["p50_ms"] / by["ffmpeg"]["p50_ms"]
        print(f"median latency, GStreamer / FFmpeg: {ratio:.2f} (goal: at most 0.5)")
    write_json(
        args.json,
        {
            "width": args.width,
            "height": args.height,
            "fps": args.fps,
            "seconds": args.seconds,
            "rows": rows,
            "p50_ratio": ratio,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
