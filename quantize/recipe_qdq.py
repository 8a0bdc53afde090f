"""The Q/DQ recipe, for INT8 and FP8 alike, parametrised by a :class:`QdqFormat`: calibrate on
seeded subsets with the bundle's preprocessing, choose the preparation and calibration method by
measurement on a validation split, write the Q/DQ model, gate it against FP32 on the hold-out
(falling back node by node when needed), stage the model, the verification samples and its FP16
variant for TensorRT 11."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from edgert.runtime.errors import GateFailed, ModelError, first_line
from edgert.runtime.precision import model_file

from . import evaluate, fp8, gate, int8, progress, qdq_search, ranges
from .fp16 import qdq_to_fp16
from .head import Head, find_head
from .job import (
    RANGES_FILE,
    Job,
    References,
    cpu_speeds,
    gate_and_fallback,
    gate_record,
    load_fp32,
    rounded,
    split,
    stage_model,
    stage_verify_samples,
    validation_truth,
)


@dataclass(frozen=True)
class QdqFormat:
    """What differs between INT8 and FP8 Q/DQ."""

    precision: str  # int8 | fp8
    label: str
    quantize: Callable
    quantized_nodes: Callable
    preparations: Callable[[tuple], tuple]  # the candidates tried, from the user's --prepare
    round_weights: Callable | None = None  # weight rounding that bias correction corrects for
    check_structure: Callable | None = None  # problems with the Q/DQ model's TensorRT form
    dla_ranges: bool = False  # stage the FP32 model's ranges (INT8 on DLA calibrates from them)
    format: str | None = None  # the manifest's description of the format
    requires: str | None = None  # what runs it
    hint: str = "relax it with --gate"


INT8 = QdqFormat(
    "int8",
    "INT8",
    int8.quantize,
    int8.quantized_nodes,
    lambda prepare: prepare,
    check_structure=int8.check_structure,
    dla_ranges=True,
    hint="relax it with --gate or try --calib-method",
)
FP8 = QdqFormat(
    # FP8 rounds weights to 3 mantissa bits: bias correction (for that rounding) is tried too
    "fp8",
    "FP8",
    fp8.quantize,
    fp8.quantized_nodes,
    lambda prepare: tuple(p for p in prepare if p in ("none", "bias")) or ("none",),
    round_weights=fp8.round_weights,
    format="E4M3 (float8e4m3fn) Q/DQ, opset 19, per-tensor activations, per-channel weights",
    requires="TensorRT 10+ on a GPU of compute capability 8.9+ (Ada, Hopper, Blackwell, Jetson Thor)",
)
FORMATS = {f.precision: f for f in (INT8, FP8)}


def build_qdq(job: Job, fmt: QdqFormat) -> dict:
    """Calibrate, quantize, gate (with the sensitivity fallback when needed); stage the files."""
    model = load_fp32(job.bundle)
    data, fit, validation, nodes = split(job, model)
    truth = validation_truth(data, validation)  # --calib-labels: the choices go by them too
    stages: dict[str, float] = {}
    t0 = time.perf_counter()
    fp32 = evaluate.session(model)
    holdout = evaluate.run(fp32, data.holdout.inputs, what="FP32 on the hold-out")
    ref = References(evaluate.run(fp32, validation, what="FP32 on the validation split"), holdout)
    candidates = fmt.preparations(job.preparations)
    head = detector_head(job, model)
    if head:
        job.say(f"{fmt.label} leaves out {head.describe()} (a detector's head, by rule)")
    job.say(f"preparing and calibrating on {len(fit)} samples: {', '.join(candidates)}")
    try:
        search = qdq_search.choose_preparation(
            model,
            fit,
            validation,
            ref.validation,
            job.task,
            job.calib_method,
            candidates,
            job.say,
            quantize=fmt.quantize,
            round_weights=fmt.round_weights,
            keep=tuple(head.nodes) if head else (),
            truth=truth,
            also=tuple(ranges.float_activations(model)) if fmt.dla_ranges else (),
        )
    except ValueError as exc:
        raise ModelError(str(exc)) from None
    prep, table = search.best, search.table
    head_choice = None
    if head:
        prep, head_choice = qdq_search.choose_head(
            prep, head, fit, validation, ref.validation, job.task, fmt.quantize, truth
        )
        where = "stays out of" if head_choice.kept_out else "goes into"
        job.say(f"the head {where} {fmt.label}: {head_choice.why}")
    quantize = qdq_search.keeping(fmt.quantize, prep.keep)
    stages["prepare_and_calibrate"] = time.perf_counter() - t0
    choice, thresholds = prep.choice, prep.stats.thresholds(prep.choice.method)
    job.say(f"kept: {prep.name}, calibration {choice.method} ({choice.why})")
    t0 = time.perf_counter()
    hold = data.holdout
    q, ev, first, fallback = gate_and_fallback(
        job, prep, fit, thresholds, nodes, validation, hold, ref, quantize, fmt.label, truth
    )
    stages["gate_and_fallback"] = time.perf_counter() - t0
    problems = fmt.check_structure(q) if fmt.check_structure else []
    if problems:
        raise ModelError("the Q/DQ model is not in TensorRT form: " + "; ".join(problems[:3]))
    in_format = fmt.quantized_nodes(q)
    macs = ranges.node_macs(model)
    section = {
        **({"format": fmt.format} if fmt.format else {}),
        "calibration": {
            "source": data.source,
            "samples": int(len(fit)),
            "validation_samples": int(len(validation)),
            "holdout": hold.description,
            "seed": job.seed,
            "method": choice.method,
            "method_why": choice.why,
            "method_scores": choice.scores,
        },
        "preparation": {"kept": prep.name, "candidates": table, **prep.report},
        **gate_record(job, thresholds, first, ev, len(in_format), nodes, fallback),
        "fallback_steps": fallback.steps if fallback else [],
        **({"head": head_choice.record()} if head_choice else {}),
        "kept_out": kept_out(prep.keep, fallback),
        "macs_share": round(sum(macs[n] for n in in_format) / max(1, sum(macs.values())), 4),
        **({"requires": fmt.requires} if fmt.requires else {}),
    }
    if not ev.passes(job.rules):
        raise GateFailed(
            f"{fmt.label} misses the accuracy gate even with {len(section['kept_out'])} of "
            f"{len(nodes)} nodes kept out of it: "
            + "; ".join(ev.failures(job.rules))
            + f" (nothing was written; {fmt.hint})"
        )
    section["model_bytes"] = stage_model(job, model_file(fmt.precision), q)
    stage_verify_samples(job.bundle, hold.inputs, ref.holdout, job.report)
    if fmt.dla_ranges:
        # the DLA path calibrates the FP32 model itself (no Q/DQ): the ranges of every float
        # tensor it computes (as TensorRT's calibrator measures them), same method; TensorRT's
        # calibration cache for INT8 on DLA is written from them
        plain = search.stats.get("none")  # collected with the none candidate's pass
        if plain is None:  # --prepare without none: a pass of its own
            plain = ranges.collect(model, fit, ranges.float_activations(model))
        job.report.pending[RANGES_FILE] = json.dumps(
            {"method": choice.method, "thresholds": plain.thresholds(choice.method)}, indent=1
        ).encode()
        job.report.files.append(RANGES_FILE)
    t0 = time.perf_counter()
    section["fp16_variant"] = stage_fp16_variant(job, fmt.precision, q, hold, ref.holdout)
    stages["fp16_variant"] = time.perf_counter() - t0
    section["onnxruntime_cpu_ms"] = cpu_speeds(fp32, q, fmt.precision, hold.inputs[0], job.say)
    section["seconds"] = {k: round(v, 1) for k, v in stages.items()}
    job.manifest.setdefault("quantization", {})[fmt.precision] = section
    out = section["kept_out"]
    kept = f", {len(out)} kept out of it" if out else ""
    job.say(
        f"wrote {model_file(fmt.precision)} ({len(in_format)}/{len(nodes)} nodes {fmt.label}{kept}, "
        f"{section['macs_share']:.1%} of the MACs); gate passed: {ev.summary()}"
    )
    return section


def detector_head(job: Job, model) -> Head | None:
    """The head of a detector-family model (:mod:`head`), None for other tasks or graphs."""
    from edgert.runtime.tasks import TASK_SPECS

    spec = TASK_SPECS.get(job.task.name)
    if spec is None or not spec.decodes_boxes:
        return None
    return find_head(model)


def kept_out(by_rule, fallback) -> list[dict]:
    """What stayed out of INT8 / FP8 and why: the head by rule, then the fallback's nodes in the
    order it gave them back, each with its measured sensitivity."""
    out = [{"node": n, "why": "detector head (rule)"} for n in by_rule]
    if fallback:
        loss = dict(fallback.sensitivity)
        out += [
            {"node": n, "why": f"sensitivity: {fallback.measure} loss {loss[n]:.5f}"}
            for n in fallback.kept_fp32
        ]
    return out


def stage_fp16_variant(job: Job, precision: str, q, hold, ref_hold) -> dict:
    """For TensorRT 11 (strongly typed: the model's types are the engine's), the INT8 or FP8
    model ``q`` with everything outside INT8 / FP8 in FP16, gated like ``q``; staged when it
    passes. Without it TensorRT 11 builds model.int8.onnx / model.fp8.onnx, whose unquantized
    layers run in FP32."""
    name, plain = model_file(precision, "fp16"), model_file(precision)
    try:
        with progress.step(f"{name} (FP16 outside {precision.upper()})", 2, "parts") as made:
            made.at("converting")
            q16 = qdq_to_fp16(q)
            made.advance(1, "its gate")
            got = evaluate.run(q16, hold.inputs, what=f"{name} on the hold-out")
        ev = gate.evaluate(ref_hold, got, job.task, hold.truth)
    except Exception as exc:  # noqa: BLE001 - ModelError, or ONNX Runtime refusing the model
        ev, why = None, first_line(exc, 200)
    else:
        why = (
            None
            if ev.passes(job.rules)
            else "misses the gate: " + "; ".join(ev.failures(job.rules))
        )
    if why:
        job.say(
            f"no {name}: {why}; TensorRT 11 will build {plain} (FP32 outside {precision.upper()})"
        )
        job.manifest.get("hashes", {}).pop(name, None)  # an earlier build's, for another model
        job.report.pending[name] = None
        return {"written": False, "why": why, **({"holdout": rounded(ev)} if ev else {})}
    size = stage_model(job, name, q16)
    job.say(
        f"wrote {name} (for TensorRT 11: FP16 outside {precision.upper()}); hold-out: {ev.summary()}"
    )
    return {"written": True, "file": name, "holdout": rounded(ev), "model_bytes": size}
