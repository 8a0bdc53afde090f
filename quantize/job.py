"""One build's state and the steps every recipe shares: the bundle, the manifest being updated,
the report (with the files staged for the commit), the user's settings; loading the FP32 model,
the calibration data, the gate with its node-by-node fallback, staging files."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgert.runtime.backends.plan_check import VERIFY_FILE
from edgert.runtime.bundle import Bundle, sha256_bytes, verify_hash
from edgert.runtime.errors import GateFailed, ModelError, first_line

from . import calibration, evaluate, gate, int8, qdq_search, ranges

VERIFY_SAMPLES = 8
RANGES_FILE = "calibration/ranges.json"


@dataclass
class BuildReport:
    bundle: Path
    precision: str
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)
    quantization: dict | None = None
    engine: dict = field(default_factory=dict)
    # files written only together with the manifest that records them (see _commit); None:
    # a file of an earlier build that this one did not make, removed once the manifest says so
    pending: dict[str, bytes | None] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        return {
            "bundle": str(self.bundle),
            "precision": self.precision,
            "seconds": round(self.seconds, 2),
            "files": self.files,
            "quantization": self.quantization,
            "engine": self.engine,
        }


@dataclass
class Job:
    """One build: the bundle, the manifest being updated, the report, and the user's settings."""

    bundle: Bundle
    manifest: dict
    report: BuildReport
    rules: dict
    say: Callable[[str], None]
    calib: str | None
    calib_size: int
    holdout_size: int
    calib_method: str | None
    seed: int
    preparations: tuple[str, ...] = qdq_search.PREPARATIONS
    calib_labels: str | None = None  # labelled boxes on the calibration folder's images

    @property
    def task(self) -> gate.Task:
        return gate.Task.of(self.bundle.manifest)


def ensure_node_names(model) -> None:
    """Give unnamed nodes stable names: node names are how nodes are excluded from quantization."""
    used = {n.name for n in model.graph.node if n.name}
    for i, n in enumerate(model.graph.node):
        if not n.name:
            name = f"{n.op_type}_{i}"
            while name in used:
                name += "_"
            n.name = name
            used.add(name)


def load_fp32(bundle: Bundle, file: str = "model.onnx"):
    """The bundle's FP32 ``file`` (its hash checked, external data only from inside the bundle)."""
    import onnx
    from onnx import external_data_helper

    path = bundle.path / file
    recorded = bundle.manifest.hashes.get(file)
    if recorded:
        verify_hash(path, recorded)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise ModelError(f"{path} is not a valid ONNX model: {first_line(exc)}") from exc
    root = bundle.path.resolve()
    for tensor in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        where = (root / location).resolve()
        if not location or Path(location).is_absolute() or root not in where.parents:
            raise ModelError(
                f"{path}: the external data of {tensor.name!r} ({location!r}) lies "
                "outside the bundle; refusing to read it"
            )
    try:
        external_data_helper.load_external_data_for_model(model, str(root))
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"cannot read the external data of {path}: {first_line(exc)}") from exc
    ensure_node_names(model)
    return model


def data_of(job: Job, calib_size: int | None = None) -> calibration.CalibrationData:
    size = job.calib_size if calib_size is None else calib_size
    data = calibration.load(
        job.calib, job.bundle.manifest, size, job.holdout_size, job.seed, job.calib_labels
    )
    job.say(f"calibration: {data.calibration.description}; hold-out: {data.holdout.description}")
    return data


def split(job: Job, model):
    """(data, calibration samples, validation split of them, quantizable nodes)."""
    data = data_of(job)
    nodes = ranges.quantizable_nodes(model)
    if not nodes:
        raise ModelError(
            "the model has no Conv, Gemm or MatMul with constant weights: nothing to quantize"
        )
    return data, *qdq_search.split_validation(data.calibration.inputs), nodes


def validation_truth(data, validation) -> list | None:
    """The labelled boxes of the validation split (the first of the calibration samples, as
    :func:`qdq_search.split_validation` takes them), or None where none is labelled."""
    objects = data.calibration.objects
    if not objects:
        return None
    part = objects[: len(validation)]
    return part if any(o is not None for o in part) else None


def say_if_nothing_found(job: Job, ev, samples: int, what: str, of: str) -> None:
    """A detector's box F1 of 1.0 on a hold-out where FP32 finds nothing judged nothing: say so."""
    if ev.metrics.get("boxes_fp32") == 0:
        job.say(
            f"warning: FP32 finds no {what} on the {samples} hold-out samples, so box F1 judges "
            f"nothing: calibrate with images of {of} (--calib)"
        )


def gate_record(job: Job, thresholds, first: dict, ev, quantized: int, nodes, fallback) -> dict:
    """The manifest's record of a quantized model's calibration and gate."""
    return {
        "calibration_sha256": hashlib.sha256(
            json.dumps(thresholds, sort_keys=True).encode()
        ).hexdigest(),
        "gate": job.rules,
        "holdout_before_fallback": {k: round(v, 5) for k, v in first.items()},
        "holdout": rounded(ev),
        "quantized_nodes": quantized,
        "quantizable_nodes": len(nodes),
        "kept_fp32": fallback.kept_fp32 if fallback else [],
        "passed": ev.passes(job.rules),
    }


@dataclass(frozen=True)
class References:
    """FP32 outputs on the validation split (method choice, sensitivity) and the hold-out (gate)."""

    validation: dict
    holdout: dict


def gate_and_fallback(
    job: Job,
    prep,
    fit,
    thresholds,
    nodes,
    validation,
    hold,
    ref: References,
    quantize=int8.quantize,
    label: str = "INT8",
    val_truth=None,
):
    """(Q/DQ model, its evaluation, the first evaluation's metrics, the fallback or None);
    ``val_truth``: the validation split's labelled boxes (the sensitivity pass ranks by them too)."""
    task = job.task
    q = quantize(prep.model, thresholds, validation)
    got = evaluate.run(q, hold.inputs, what=f"the gate: {label} on the hold-out")
    ev = gate.evaluate(ref.holdout, got, task, hold.truth)
    job.say(f"{label} vs FP32 on the hold-out: {ev.summary()}")
    say_if_nothing_found(job, ev, len(hold.inputs), "boxes", "what the model detects")
    first = dict(ev.metrics)
    if ev.passes(job.rules):
        return q, ev, first, None
    unmeasured = ev.unmeasured(job.rules)
    if unmeasured:  # no node kept out of INT8 makes a rule on absent labels pass
        raise GateFailed(
            f"{label} cannot be gated: " + "; ".join(unmeasured) + " (nothing was written)"
        )
    job.say(f"gate not met ({'; '.join(ev.failures(job.rules))}); ranking nodes by sensitivity")
    q, ev, fallback = qdq_search.fallback(
        prep.base,
        thresholds,
        [n.name for n in nodes if n.name not in prep.keep],
        validation,
        ref.validation,
        hold.inputs,
        ref.holdout,
        task,
        hold.truth,
        job.rules,
        job.say,
        rebuild=lambda kept: prep.rebuild(fit, kept),
        quantize=quantize,
        validation_truth=val_truth,
    )
    return q, ev, first, fallback


def stage_model(job: Job, name: str, model) -> int:
    """Stage ``model`` as the bundle file ``name`` for :func:`_commit`, with its hash in the
    manifest; its size in bytes."""
    data = model.SerializeToString()
    job.report.pending[name] = data
    job.report.files.append(name)
    job.manifest.setdefault("hashes", {})[name] = sha256_bytes(data)
    return len(data)


def rounded(ev) -> dict:
    return {k: round(v, 5) for k, v in ev.metrics.items()}


def cpu_speeds(fp32, reduced, precision: str, sample: np.ndarray, say) -> dict[str, float]:
    """Batch-1 latency of FP32 and the gated model on ONNX Runtime CPU, measured here and recorded:
    with precision "auto", ONNX Runtime on a CPU runs whichever was faster (TensorRT's Q/DQ form
    is made for TensorRT and can be slower than FP32 on a CPU)."""
    speeds = {
        "fp32": round(evaluate.cpu_latency_ms(fp32, sample), 4),
        precision: round(evaluate.cpu_latency_ms(reduced, sample), 4),
    }
    say(
        f"ONNX Runtime CPU, batch 1: fp32 {speeds['fp32']:.2f} ms, {precision} {speeds[precision]:.2f} ms"
    )
    return speeds


def stage_verify_samples(bundle, inputs: np.ndarray, ref: dict, report) -> None:
    """A few hold-out samples with FP32 outputs: the device checks its plan against them."""
    buf = io.BytesIO()
    np.savez_compressed(
        buf,
        inputs=inputs[:VERIFY_SAMPLES],
        **{f"ref_{k}": v[:VERIFY_SAMPLES] for k, v in ref.items()},
    )
    report.pending[VERIFY_FILE] = buf.getvalue()
    if VERIFY_FILE not in report.files:
        report.files.append(VERIFY_FILE)
