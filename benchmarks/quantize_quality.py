"""INT8 quality and cost: edgert vs ONNX Runtime's plain quantize_static (TensorRT form) vs NVIDIA
Model Optimizer (when its results file is given), on MobileNetV2 and digits_cnn.

MobileNetV2: FP32 vs INT8 top-1 agreement (all crops and FP32-confident crops), FP32 top-1 within
INT8 top-5, cosine, on >= 500 random crops / flips / colour jitter of the bundled photos, calibrated
on 200 other crops. digits_cnn: accuracy drop on the labelled test split. Plus model size and CPU
latency (ONNX Runtime, batch 1). Prints a table, writes JSON.

    python benchmarks/quantize_quality.py [--json reports/quantize_quality.json] [--eval 500] [--calib 200]
        [--modelopt reports/modelopt_mobilenet.onnx]   # a Model Optimizer INT8 model of the same FP32 file
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx

from edgert.export import export_model
from edgert.export.zoo.mobilenet_v2 import PREPROCESSING
from edgert.quantize import build, evaluate, gate, int8, int8_search, ranges
from edgert.quantize.builder import ensure_node_names
from edgert.quantize.calibration import augmented_crops
from edgert.runtime.sample_data import ALL_PHOTOS, load_photo

STRICT = {"cosine": 0.995, "agreement": 0.95}


def plain_quantize_static(src: Path, dst: Path, calib: np.ndarray) -> None:
    """ONNX Runtime's quantize_static with the TensorRT-form settings and nothing more."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter([{"input": calib[i : i + 1]} for i in range(len(calib))])

        def get_next(self):
            return next(self.items, None)

    with contextlib.redirect_stdout(io.StringIO()):
        quantize_static(
            str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False},
        )  # fmt: skip


def latency_ms(model_path: Path, x: np.ndarray, runs: int = 200) -> float:
    return evaluate.cpu_latency_ms(onnx.load(str(model_path)), x[0], runs=runs)


def score(model, evals: np.ndarray, ref: dict) -> dict:
    ev = gate.evaluate(ref, evaluate.run(model, evals), "classify")
    return {k: round(v, 4) for k, v in ev.metrics.items()}


def mobilenet(tmp: Path, n_eval: int, n_calib: int, modelopt: Path | None) -> dict:
    bundle = export_model(
        "zoo:mobilenet_v2", tmp / "mobilenet_v2.edgert", dynamic_batch=True, max_batch=64
    ).bundle
    src = bundle / "model.onnx"
    photos = [load_photo(p) for p in ALL_PHOTOS]
    calib = np.stack([PREPROCESSING.apply(c)[0] for c in augmented_crops(photos, n_calib, seed=11)])
    evals = np.stack([PREPROCESSING.apply(c)[0] for c in augmented_crops(photos, n_eval, seed=22)])
    fp32 = onnx.load(str(src))
    ensure_node_names(fp32)
    ref = evaluate.run(fp32, evals)
    rows = {}

    plain = tmp / "plain.onnx"
    plain_quantize_static(src, plain, calib)
    rows["ORT quantize_static (TensorRT form)"] = {
        **score(onnx.load(str(plain)), evals, ref),
        "kept_fp32": 0,
        "path": plain,
    }

    nodes = ranges.quantizable_nodes(fp32)
    tensors = ranges.activation_inputs(fp32, nodes)
    # the calibration set calibrates; a separate set of crops chooses the method and ranks nodes
    fit = calib
    validation = np.stack([PREPROCESSING.apply(c)[0] for c in augmented_crops(photos, 40, seed=33)])
    stats = ranges.collect(fp32, fit, tensors)
    ref_val = evaluate.run(fp32, validation)
    choice = int8_search.choose_method(
        fp32, stats, validation, ref_val, "classify", None, lambda s: None
    )
    thresholds = stats.thresholds(choice.method)
    ours = int8.quantize(fp32, thresholds, validation)
    onnx.save(ours, tmp / "edgert.onnx")
    rows[f"edgert, no fallback ({choice.method})"] = {
        **score(ours, evals, ref),
        "kept_fp32": 0,
        "path": tmp / "edgert.onnx",
    }

    budget = max(1, len(nodes) // 10)
    q, _, fb = int8_search.fallback(
        fp32,
        thresholds,
        [n.name for n in nodes],
        validation,
        ref_val,
        evals,
        ref,
        "classify",
        None,
        STRICT,
        lambda s: None,
    )
    kept = fb.kept_fp32[:budget]
    q = int8.quantize(fp32, thresholds, validation, exclude=kept)
    onnx.save(q, tmp / "edgert_fb.onnx")
    rows[f"edgert, fallback (<= {budget} of {len(nodes)} nodes)"] = {
        **score(q, evals, ref),
        "kept_fp32": len(kept),
        "path": tmp / "edgert_fb.onnx",
    }
    if modelopt and modelopt.is_file():
        rows["Model Optimizer (modelopt.onnx int8)"] = {
            **score(onnx.load(str(modelopt)), evals, ref),
            "kept_fp32": None,
            "path": modelopt,
        }

    x1 = evals[:1]
    base_ms = latency_ms(src, x1)
    for row in rows.values():
        path = row.pop("path")
        row["size_mb"] = round(path.stat().st_size / 1e6, 2)
        row["cpu_latency_ms"] = round(latency_ms(path, x1), 2)
    return {
        "fp32": {
            "size_mb": round(src.stat().st_size / 1e6, 2),
            "cpu_latency_ms": round(base_ms, 2),
        },
        "eval_crops": n_eval,
        "calib_crops": n_calib,
        "method": choice.method,
        "method_scores": choice.scores,
        "fallback_order": [(n, round(s, 5)) for n, s in fb.sensitivity[:10]],
        "rows": rows,
    }


def digits(tmp: Path) -> dict:
    bundle = export_model("zoo:digits_cnn", tmp / "digits.edgert", dynamic_batch=True).bundle
    report = build(bundle, "int8", calib_size=500, holdout_size=359, no_engine=True)
    h = report.quantization["holdout"]
    return {"accuracy_fp32": h["accuracy_fp32"], "accuracy_int8": h["accuracy"], "drop_points": round(100 * h["accuracy_drop"], 2),
            "method": report.quantization["calibration"]["method"]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", default="reports/quantize_quality.json")
    ap.add_argument("--eval", type=int, default=500)
    ap.add_argument("--calib", type=int, default=200)
    ap.add_argument(
        "--modelopt", type=Path, help="INT8 ONNX made by Model Optimizer from the same FP32 model"
    )
    ap.add_argument(
        "--save-fp32",
        type=Path,
        help="also copy the FP32 MobileNetV2 ONNX here (for Model Optimizer)",
    )
    args = ap.parse_args()
    logging.getLogger().setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mb = mobilenet(tmp, args.eval, args.calib, args.modelopt)
        if args.save_fp32:
            args.save_fp32.parent.mkdir(parents=True, exist_ok=True)
            args.save_fp32.write_bytes((tmp / "mobilenet_v2.edgert" / "model.onnx").read_bytes())
        dg = digits(tmp)
    print(
        f"MobileNetV2, {mb['eval_crops']} crops (calibration {mb['calib_crops']} other crops); FP32 {mb['fp32']['size_mb']} MB, {mb['fp32']['cpu_latency_ms']} ms"
    )
    print(
        f"{'variant':<44}{'agree':>7}{'conf':>7}{'top5':>7}{'cosine':>8}{'FP32':>6}{'MB':>7}{'ms':>7}"
    )
    for name, r in mb["rows"].items():
        kept = "" if r["kept_fp32"] is None else str(r["kept_fp32"])
        print(
            f"{name:<44}{r['agreement']:>7.3f}{r['agreement_confident']:>7.3f}{r['top5_contains_fp32']:>7.3f}{r['cosine']:>8.4f}{kept:>6}{r['size_mb']:>7.2f}{r['cpu_latency_ms']:>7.2f}"
        )
    print(
        f"digits_cnn: FP32 {dg['accuracy_fp32']:.4f}, INT8 {dg['accuracy_int8']:.4f}, drop {dg['drop_points']:.2f} points ({dg['method']})"
    )
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"mobilenet_v2": mb, "digits_cnn": dg, "strict_gate": STRICT}, indent=2, default=str
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
