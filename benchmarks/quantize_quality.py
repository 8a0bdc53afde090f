"""INT8 / FP8 quality and cost, side by side in one run: ONNX Runtime's plain quantize_static
(TensorRT form), edgert today (no preparation; with its node fallback), edgert with each
preparation (activation equalisation, bias correction, adaptive rounding, shifting post-ReLU inputs
to use all INT8 levels) and with them together,
the best with at most 2 nodes outside INT8 (and both with FP16 instead of FP32 outside INT8: what
TensorRT 11 builds), FP8 E4M3 (and with FP16 outside FP8), FP16, and NVIDIA Model Optimizer (when
its INT8 model of the same FP32 file is given: see scripts/modelopt_int8.py), on MobileNetV2;
digits_cnn and the face detector (MTCNN) through edgert build.

MobileNetV2: FP32 vs quantized top-1 agreement (all crops and FP32-confident crops), FP32 top-1
within the top-5, cosine, on 400 random crops / flips / colour jitter of the bundled photos (one of
them never seen by calibration), calibrated on 200 crops of the other photos. digits_cnn: accuracy
drop on the labelled test split; the face detector: face box F1 of the INT8 detector against FP32
and each network's cosine on its hold-out. Plus model size, CPU latency (ONNX Runtime, batch 1) and the
preparation's seconds. Prints a table, writes JSON.

    python benchmarks/quantize_quality.py [--json reports/quantize_quality.json] [--eval 400] [--calib 200]
        [--no-adaround] [--save-fp32 reports/mobilenet_v2_fp32.onnx --save-calib reports/calib.npz]
        [--modelopt reports/modelopt_int8_max.onnx ...]   # Model Optimizer's INT8 of the same FP32 file
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx
from json_report import write_json

from edgert.export import export_model
from edgert.export.zoo.mobilenet_v2 import PREPROCESSING
from edgert.export.zoo.samples import augmented_crops
from edgert.quantize import build, evaluate, gate, int8, qdq_search, ranges
from edgert.quantize.job import ensure_node_names
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
            str(src),
            str(dst),
            Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            extra_options={
                "ActivationSymmetric": True,
                "WeightSymmetric": True,
                "QuantizeBias": False,
            },
        )


def latency_ms(model_path: Path, x: np.ndarray, runs: int = 200) -> float:
    return evaluate.cpu_latency_ms(onnx.load(str(model_path)), x[0], runs=runs)


def score(model, evals: np.ndarray, ref: dict) -> dict:
    ev = gate.evaluate(ref, evaluate.run(model, evals), "classify")
    return {k: round(v, 4) for k, v in ev.metrics.items()}


HELD_OUT_PHOTO = "camera"  # in the evaluation crops, never in calibration


def prepared(fp32, name: str, calib: np.ndarray, validation, ref_val):
    """(model, thresholds, method, seconds, the model before bias correction) for a preparation,
    made by edgert build's own search with that one candidate (its method chosen on validation)."""
    import time

    t0 = time.perf_counter()
    best = qdq_search.choose_preparation(
        fp32, calib, validation, ref_val, "classify", None, (name,), lambda s: None
    ).best
    thresholds = best.stats.thresholds(best.choice.method)
    return best.model, thresholds, best.choice.method, time.perf_counter() - t0, best.base


def mobilenet(
    tmp: Path, n_eval: int, n_calib: int, modelopt: Path | None, adaround_rows: bool
) -> dict:
    from edgert.quantize import fp8
    from edgert.quantize.fp16 import to_fp16

    bundle = export_model(
        "zoo:mobilenet_v2", tmp / "mobilenet_v2.edgert", dynamic_batch=True, max_batch=64
    ).bundle
    src = bundle / "model.onnx"
    photos = [load_photo(p) for p in ALL_PHOTOS]
    calib_photos = [load_photo(p) for p in ALL_PHOTOS if p != HELD_OUT_PHOTO]
    calib = np.stack(
        [PREPROCESSING.apply(c)[0] for c in augmented_crops(calib_photos, n_calib, seed=11)]
    )
    evals = np.stack([PREPROCESSING.apply(c)[0] for c in augmented_crops(photos, n_eval, seed=22)])
    np.savez(tmp / "calib.npz", input=calib)
    fp32 = onnx.load(str(src))
    ensure_node_names(fp32)
    ref = evaluate.run(fp32, evals)
    rows = {}

    def add(name, model, kept, seconds=None, method=None):
        path = tmp / f"row{len(rows)}.onnx"
        onnx.save(model, path)
        rows[name] = {
            **score(model, evals, ref),
            "outside_int8": kept,
            "method": method,
            "seconds": round(seconds, 1) if seconds is not None else None,
            "path": path,
        }
        r = rows[name]
        print(f"  {name:<44} agreement {r['agreement']:.3f} cosine {r['cosine']:.4f}", flush=True)

    plain = tmp / "plain.onnx"
    plain_quantize_static(src, plain, calib)
    add("ORT quantize_static (TensorRT form)", onnx.load(str(plain)), 0, method="minmax")

    # a separate set of crops chooses the method and ranks nodes; the evaluation set only scores
    validation = np.stack(
        [PREPROCESSING.apply(c)[0] for c in augmented_crops(calib_photos, 40, seed=33)]
    )
    ref_val = evaluate.run(fp32, validation)
    nodes = [n.name for n in ranges.quantizable_nodes(fp32)]
    names = ["none", "equalize", "bias", "equalize+bias", "equalize+shift+bias"]
    if adaround_rows:
        names += ["adaround", "equalize+adaround", "equalize+bias+adaround"]
    made = {}
    for name in names:
        model, th, method, sec, base = prepared(fp32, name, calib, validation, ref_val)
        made[name] = (model, th, base)
        label = "edgert today (no fallback)" if name == "none" else f"edgert + {name}"
        add(label, int8.quantize(model, th, validation), 0, sec, method)

    def with_fallback(name, budget, label):
        model, th, base = made[name]
        ranked, _ = qdq_search.sensitivity(base, th, nodes, validation, ref_val, lambda s: None)
        kept = [n for n, _ in ranked[:budget]]  # the most sensitive nodes, by the validation crops
        source = qdq_search.Preparation(name, model, None, None, {}, base).rebuild(calib, kept)
        add(label, int8.quantize(source, th, validation, exclude=kept), len(kept))
        return kept

    today_kept = with_fallback("none", 5, "edgert today + fallback (5 nodes FP32)")
    best = max((n for n in names if n != "none"), key=lambda n: rows[f"edgert + {n}"]["cosine"])
    for name in dict.fromkeys(["equalize+bias", best]):
        best_kept = with_fallback(name, 2, f"edgert + {name} + fallback (2 nodes)")
    from edgert.quantize.fp16 import qdq_to_fp16

    for label in (f"edgert + {best}", f"edgert + {best} + fallback (2 nodes)"):
        row = rows[label]  # what TensorRT 11 builds: FP16, not FP32, outside INT8
        add(
            f"{label}, FP16 outside INT8",
            qdq_to_fp16(onnx.load(str(row["path"]))),
            row["outside_int8"],
        )

    from edgert.quantize import equalize

    bc8 = equalize.correct_bias(fp32, calib, quantize_weight=fp8.round_weights)[0]
    for label, model in (
        ("FP8 E4M3 (per-channel weights)", fp32),
        ("FP8 E4M3 + bias correction", bc8),
    ):
        stats = ranges.collect(
            model, calib, ranges.activation_inputs(model, ranges.quantizable_nodes(model))
        )
        choice = qdq_search.choose_method(
            model,
            stats,
            validation,
            ref_val,
            "classify",
            None,
            lambda s: None,
            quantize=fp8.quantize,
        )
        add(label, fp8.quantize(model, stats.thresholds(choice.method)), 0, method=choice.method)
    fp8_best = max(
        ("FP8 E4M3 (per-channel weights)", "FP8 E4M3 + bias correction"),
        key=lambda n: rows[n]["cosine"],
    )
    # what TensorRT 11 (Thor) builds FP8 from: FP16, not FP32, outside FP8
    add(f"{fp8_best}, FP16 outside FP8", qdq_to_fp16(onnx.load(str(rows[fp8_best]["path"]))), 0)
    add("FP16 (ONNX, for TensorRT 11)", to_fp16(fp32), 0)
    for path in modelopt or []:  # scripts/modelopt_int8.py, in Model Optimizer's environment
        if not path.is_file():
            raise SystemExit(f"{path} does not exist (make it with scripts/modelopt_int8.py)")
        mo = onnx.load(str(path))
        dq = {o for n in mo.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
        weighted = [n for n in mo.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")]
        outside = sum(1 for n in weighted if len(n.input) < 2 or n.input[1] not in dq)
        add(f"Model Optimizer INT8 ({path.stem.rsplit('_', 1)[-1]} calibration)", mo, outside)

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
        "held_out_photo": HELD_OUT_PHOTO,
        "today_fallback": today_kept,
        "best_fallback": best_kept,
        "rows": rows,
    }


def digits(tmp: Path) -> dict:
    bundle = export_model("zoo:digits_cnn", tmp / "digits.edgert", dynamic_batch=True).bundle
    report = build(bundle, "int8", calib_size=500, holdout_size=359, no_engine=True)
    h = report.quantization["holdout"]
    return {
        "accuracy_fp32": h["accuracy_fp32"],
        "accuracy_int8": h["accuracy"],
        "drop_points": round(100 * h["accuracy_drop"], 2),
        "method": report.quantization["calibration"]["method"],
    }


def faces(tmp: Path) -> dict:
    """The face detector's INT8 build (its own data: crops of the bundled photos), gated end to end."""
    bundle = export_model("zoo:mtcnn", tmp / "mtcnn.edgert").bundle
    q = build(bundle, "int8", no_engine=True).quantization
    return {
        "holdout": q["holdout"],
        "kept_fp32": {n: v["kept_fp32"] for n, v in q["networks"].items()},
        "seconds": q["seconds"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", default="reports/quantize_quality.json")
    ap.add_argument("--eval", type=int, default=400)
    ap.add_argument(
        "--no-adaround", action="store_true", help="skip the adaptive-rounding rows (minutes each)"
    )
    ap.add_argument("--calib", type=int, default=200)
    ap.add_argument(
        "--modelopt",
        type=Path,
        action="append",
        help="INT8 ONNX made by Model Optimizer from the same FP32 model (repeatable)",
    )
    ap.add_argument(
        "--save-fp32",
        type=Path,
        help="also copy the FP32 MobileNetV2 ONNX here (for Model Optimizer)",
    )
    ap.add_argument("--save-calib", type=Path, help="and the calibration tensors (.npz, key input)")
    args = ap.parse_args()
    logging.getLogger().setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mb = mobilenet(tmp, args.eval, args.calib, args.modelopt, not args.no_adaround)
        if args.save_fp32:
            args.save_fp32.parent.mkdir(parents=True, exist_ok=True)
            args.save_fp32.write_bytes((tmp / "mobilenet_v2.edgert" / "model.onnx").read_bytes())
        if args.save_calib:
            args.save_calib.parent.mkdir(parents=True, exist_ok=True)
            args.save_calib.write_bytes((tmp / "calib.npz").read_bytes())
        dg = digits(tmp)
        fc = faces(tmp)
    print(
        f"MobileNetV2, {mb['eval_crops']} crops (calibration {mb['calib_crops']} other crops); FP32 {mb['fp32']['size_mb']} MB, {mb['fp32']['cpu_latency_ms']} ms"
    )
    print(
        f"(evaluation crops include the photo {mb['held_out_photo']!r}, which calibration never saw)"
    )
    print(
        f"{'variant':<46}{'agree':>7}{'conf':>7}{'top5':>7}{'cosine':>8}{'!INT8':>6}{'MB':>7}{'ms':>7}{'prep s':>8}"
    )
    for name, r in mb["rows"].items():
        kept = "" if r["outside_int8"] is None else str(r["outside_int8"])
        sec = "" if r["seconds"] is None else f"{r['seconds']:.0f}"
        print(
            f"{name:<46}{r['agreement']:>7.3f}{r['agreement_confident']:>7.3f}{r['top5_contains_fp32']:>7.3f}"
            f"{r['cosine']:>8.4f}{kept:>6}{r['size_mb']:>7.2f}{r['cpu_latency_ms']:>7.2f}{sec:>8}"
        )
    print(
        f"digits_cnn: FP32 {dg['accuracy_fp32']:.4f}, INT8 {dg['accuracy_int8']:.4f}, drop {dg['drop_points']:.2f} points ({dg['method']})"
    )
    h = fc["holdout"]
    print(
        f"face detector (MTCNN): box F1 vs FP32 {h['box_f1']:.4f} ({h['boxes_fp32']:.2f} faces per image), "
        f"cosine P-Net {h['cosine_pnet']:.4f} R-Net {h['cosine_rnet']:.4f} O-Net {h['cosine_onet']:.4f}, "
        f"nodes in FP32: {sum(len(v) for v in fc['kept_fp32'].values())}"
    )
    write_json(
        args.json,
        {"mobilenet_v2": mb, "digits_cnn": dg, "faces": fc, "strict_gate": STRICT},
        default=str,
    )


if __name__ == "__main__":
    main()
