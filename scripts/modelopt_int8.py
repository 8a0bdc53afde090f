"""NVIDIA Model Optimizer's INT8 of the same FP32 model on the same calibration data, for
benchmarks/quantize_quality.py. Runs in Model Optimizer's own environment (it pins its own numpy,
onnx and onnxruntime), on the CPU:

    python3 -m venv /tmp/mo && /tmp/mo/bin/pip install "nvidia-modelopt[onnx]"
    python benchmarks/quantize_quality.py --save-fp32 reports/mv2.onnx --save-calib reports/calib.npz
    /tmp/mo/bin/python scripts/modelopt_int8.py reports/mv2.onnx reports/calib.npz reports/
    python benchmarks/quantize_quality.py --modelopt reports/modelopt_int8_max.onnx \\
        --modelopt reports/modelopt_int8_entropy.onnx

Writes one model per calibration method Model Optimizer offers for INT8 (max, entropy), with its
other settings at their defaults except the high-precision type, FP32 (so the comparison is INT8
against INT8, not INT8 plus FP16).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    import numpy as np
    from modelopt.onnx.quantization import quantize

    onnx_path, calib_path, out_dir = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    calib = np.load(calib_path)["input"]
    out_dir.mkdir(parents=True, exist_ok=True)
    for method in ("max", "entropy"):
        out = out_dir / f"modelopt_int8_{method}.onnx"
        t0 = time.perf_counter()
        quantize(
            str(onnx_path),
            quantize_mode="int8",
            calibration_data=calib,
            calibration_method=method,
            calibration_eps=["cpu"],
            high_precision_dtype="fp32",
            output_path=str(out),
            log_level="WARNING",
        )
        print(f"{out}: {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
