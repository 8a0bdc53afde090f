"""What one frame's work costs when frames come as a camera sends them, against the same work in a
tight loop (issue 71: why edgert's ~1.5 ms of Python a frame in ``benchmarks/streams.py`` is
several times what a loop over the same steps measures).

One thread runs the camera's steps on one decoder-scaled frame (a 640x360 BGR picture of a
1080p camera, as GStreamer's scaler hands it over), each timed in the thread's own CPU time
(``time.thread_time``): ``copy`` (the frame out of the decoder's memory, as the capture thread
copies it), ``preprocess`` (the bundle's letterbox into the model's tensor), ``infer`` (one
ONNX Runtime call, no spinning, as ``edgert camera`` loads it), ``postprocess`` (decode, NMS,
results). Between two frames:

    none      nothing: a tight loop, what a loop benchmark measures (trtexec, ``edgert bench``)
    sleep     the thread sleeps a frame period (``--fps``, 15: 66.7 ms), as a camera's thread
              waits for its next frame while other threads and processes run
    spin      the thread runs other Python for a frame period (a busy loop: the core is never
              idle, its data untouched)
    evict     the thread writes one byte in every 64 of ``--evict-mb`` (64) MB: the data caches
              emptied, the code's own state (instruction cache, branch predictors, TLB) kept

The process keeps freed memory as ``edgert camera`` does (``runtime/malloc.py``), so no page
faults are counted. The modes alternate over ``--rounds`` rounds (this VM's speed drifts), each
``--frames`` frames; the table gives the mean of the rounds, ms of CPU a frame.

    python benchmarks/frame_gap.py [--bundle B.edgert] [--fps 15] [--frames 300] [--rounds 3]
        [--json reports/frame_gap.json]

Without ``--bundle`` it builds the streams benchmark's ``stub8`` bundle (a YOLOv8 head's I/O,
uint8 input, a graph of microseconds).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.json_report import write_json  # noqa: E402

MODES = ("none", "sleep", "spin", "evict")
STEPS = ("copy", "preprocess", "infer", "postprocess")


def between(mode: str, period: float, scratch: np.ndarray):
    """What runs between two frames in ``mode``."""
    if mode == "sleep":
        return lambda: time.sleep(period)
    if mode == "spin":

        def spin():
            end = time.perf_counter() + period
            while time.perf_counter() < end:
                pass

        return spin
    if mode == "evict":

        def evict():
            scratch[::64] += 1

        return evict
    return lambda: None


def run_mode(model, frame: np.ndarray, source_hw, wait, frames: int) -> dict[str, float]:
    """Mean thread-CPU ms a frame of each step over ``frames`` frames, ``wait()`` between."""
    spent = dict.fromkeys(STEPS, 0.0)
    for _ in range(frames):
        wait()
        t0 = time.thread_time()
        image = frame.copy()
        t1 = time.thread_time()
        tensor, transform = model.preprocess(image, source_hw)
        t2 = time.thread_time()
        outputs = model.infer(model.collate([tensor]))
        t3 = time.thread_time()
        model.postprocess(outputs, [transform])
        t4 = time.thread_time()
        for step, dt in zip(STEPS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            spent[step] += dt
    return {step: spent[step] / frames * 1e3 for step in STEPS}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bundle", help="an edgert bundle (default: the streams benchmark's stub8)")
    ap.add_argument("--fps", type=float, default=15.0, help="a camera's frame rate (the gap)")
    ap.add_argument("--frames", type=int, default=300, help="frames per mode and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--evict-mb", type=int, default=64)
    ap.add_argument("--source", default="1920x1080", help="the camera's size (WxH)")
    ap.add_argument("--json", default="reports/frame_gap.json")
    a = ap.parse_args()

    from edgert.runtime.malloc import keep_freed_memory
    from edgert.runtime.tasks import load_task_model

    kept = keep_freed_memory()
    bundle = a.bundle
    if bundle is None:
        from benchmarks.streams_media import stub_bundle

        bundle = str(stub_bundle(Path(tempfile.mkdtemp(prefix="edgert-gap-")), uint8=True))
    model = load_task_model(bundle, spin=False)
    sw, sh = (int(v) for v in a.source.lower().split("x"))
    w, h = model.engine.preprocessing.decode_size((sh, sw)) or (sw, sh)
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 200, (h, w, 3), dtype=np.uint8)
    scratch = np.ones(a.evict_mb << 20, np.uint8)
    period = 1.0 / a.fps
    run_mode(model, frame, (sh, sw), lambda: None, 50)  # warm: first calls, allocations
    rounds = {m: [] for m in MODES}
    for _ in range(a.rounds):
        for mode in MODES:
            wait = between(mode, period, scratch)
            rounds[mode].append(run_mode(model, frame, (sh, sw), wait, a.frames))
    table = {m: {s: float(np.mean([r[s] for r in rounds[m]])) for s in STEPS} for m in MODES}
    for m in MODES:
        table[m]["total"] = sum(table[m][s] for s in STEPS)
    print(f"{Path(bundle).name}: a {w}x{h} frame of a {sw}x{sh} camera, {os.cpu_count()} CPUs,")
    print(f"{a.rounds} rounds x {a.frames} frames a mode, ms of thread CPU a frame (malloc {kept})")
    print(f"{'between frames':16s}" + "".join(f"{s:>12s}" for s in (*STEPS, "total", "x none")))
    for m in MODES:
        row = table[m]
        ratio = row["total"] / table["none"]["total"]
        print(
            f"{m:16s}" + "".join(f"{row[s]:12.3f}" for s in (*STEPS, "total")) + f"{ratio:11.2f}x"
        )
    write_json(
        a.json,
        {
            "bundle": Path(bundle).name,
            "frame": [w, h],
            "camera": [sw, sh],
            "fps": a.fps,
            "frames": a.frames,
            "rounds": a.rounds,
            "evict_mb": a.evict_mb,
            "cpu_count": os.cpu_count(),
            "malloc": kept,
            "ms_cpu_a_frame": {m: {k: round(v, 4) for k, v in table[m].items()} for m in MODES},
            "by_round": {
                m: [{k: round(v, 4) for k, v in r.items()} for r in rounds[m]] for m in MODES
            },
        },
    )


if __name__ == "__main__":
    main()
