"""The FP16 recipe: an FP16 model (for TensorRT 11, strongly typed; overflow-prone operators kept
in FP32) and its error against FP32 where ONNX Runtime can run it."""

from __future__ import annotations

from edgert.runtime.embeddings import UnhealthyEncoder
from edgert.runtime.errors import EdgertError, first_line
from edgert.runtime.precision import model_file

from . import evaluate, gate
from .fp16 import to_fp16
from .job import Job, cpu_speeds, data_of, load_fp32, rounded, stage_model, stage_verify_samples


def build_fp16(job: Job) -> dict:
    """An FP16 model (for TensorRT 11, strongly typed) and its error against FP32 where ONNX
    Runtime can run it."""
    bundle, say, report = job.bundle, job.say, job.report
    model = load_fp32(bundle)
    fp16 = to_fp16(model)
    section: dict = {
        "model_bytes": stage_model(job, model_file("fp16"), fp16),
        "fp32_ops": "overflow-prone ops kept in FP32, FP32 inputs/outputs",
    }
    try:
        data = data_of(job, min(job.calib_size, 64))
        ref = evaluate.run(model, data.holdout.inputs, what="FP32 on the hold-out")
        ev = gate.evaluate(
            ref,
            evaluate.run(fp16, data.holdout.inputs, what="the gate: FP16 on the hold-out"),
            job.task,
            data.holdout.truth,
        )
        section["holdout"] = rounded(ev)
        section["onnxruntime_cpu_ms"] = cpu_speeds(model, fp16, "fp16", data.holdout.inputs[0], say)
        stage_verify_samples(bundle, data.holdout.inputs, ref, report)
        say(f"FP16 vs FP32 on the hold-out (ONNX Runtime): {ev.summary()}")
    except UnhealthyEncoder:  # FP32's own vectors fail the health check: no build at all
        raise
    except EdgertError as exc:
        section["holdout"] = None
        section["holdout_skipped"] = str(exc)
        say(f"FP16 error not measured: {exc}")
    except Exception as exc:  # noqa: BLE001 - e.g. an ONNX Runtime without FP16 kernels for an op
        section["holdout"] = None
        section["holdout_skipped"] = (
            f"ONNX Runtime cannot run the FP16 model here: {first_line(exc, 200)}"
        )
        say(section["holdout_skipped"])
    job.manifest.setdefault("quantization", {})["fp16"] = section
    return section
