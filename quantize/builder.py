"""``edgert build``: FP16 / INT8 models checked by the accuracy gate, and the TensorRT plan.

    report = build("mobilenet_v2.edgert", precision="int8")

INT8: calibrate (bundle preprocessing, seeded subsets), choose the calibration method by
measurement, write the Q/DQ model, gate it against FP32 on the hold-out, fall back node by node if
needed. FP16: an FP16 ONNX model (for TensorRT 11) and its error. Then, where TensorRT and a GPU
exist, the plan is built (or taken from the cache) and checked against FP32 on stored samples;
elsewhere everything but the plan is written and the report says the plan will be built on the
device.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgert.runtime import atomic
from edgert.runtime.backends.tensorrt_compat import FP16_VARIANTS
from edgert.runtime.bundle import (
    Bundle,
    is_bundle,
    sha256_bytes,
    sha256_file,
    verify_hash,
    write_manifest,
)
from edgert.runtime.engine_cache import VERIFY_FILE
from edgert.runtime.errors import EdgertError, ModelError, OutputError, first_line
from edgert.runtime.faces import int8_file
from edgert.runtime.locks import file_lock

from . import calibration, evaluate, gate, int8, int8_search, ranges
from .fp16 import qdq_to_fp16, to_fp16

PRECISIONS = ("fp32", "fp16", "int8", "fp8")
VERIFY_SAMPLES = 8
RANGES_FILE = "calibration/ranges.json"


class GateFailed(EdgertError):
    """The quantized model (or plan) is further from FP32 than the gate allows."""


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


def build(
    model: str | Path,
    precision: str = "fp16",
    *,
    calib: str | None = None,
    calib_size: int = 500,
    holdout_size: int = 200,
    calib_method: str | None = None,
    prepare: str | tuple[str, ...] = "auto",
    gate_rules: str | dict | None = None,
    dla: int | None = None,
    workspace_gib: float | None = None,
    opt_level: int | None = None,
    shapes: dict | None = None,
    no_engine: bool = False,
    seed: int = 0,
    say: Callable[[str], None] = lambda s: None,
) -> BuildReport:
    """Quantize / convert a bundle (or an .onnx, wrapped into a bundle first) and build its plan."""
    start = time.perf_counter()
    if precision not in PRECISIONS:
        raise ModelError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if calib_method and calib_method not in ranges.METHODS:
        raise ModelError(
            f"unknown --calib-method {calib_method!r}; choose one of {', '.join(ranges.METHODS)}"
        )
    if opt_level is not None and not 0 <= opt_level <= 5:
        raise ModelError("--opt-level must be between 0 and 5")
    if workspace_gib is not None and workspace_gib <= 0:
        raise ModelError("--workspace must be a positive number of GiB")
    if dla is not None:
        from edgert.runtime.device import jetson_info

        if jetson_info() is None:
            raise ModelError(
                f"--dla {dla}: this machine has no DLA (DLA cores exist on Jetson Xavier and Orin)"
            )
    rules = gate_rules if isinstance(gate_rules, dict) else _parse_gate(gate_rules)
    preparations = _preparations(prepare)
    path = _as_bundle(Path(model), say)
    with file_lock(path / ".build.lock"):
        bundle = Bundle(path)
        job = _Job(bundle, dict(bundle.manifest.raw), BuildReport(path, precision), rules, say,
                   calib, calib_size, holdout_size, calib_method, seed, preparations)  # fmt: skip
        faces = bundle.manifest.task == "faces" and bundle.manifest.raw.get("models")
        if faces and precision != "int8":
            raise ModelError(
                f"--precision {precision} is not built for the face detector's three networks "
                "(P-Net, R-Net, O-Net); INT8 is: edgert build --precision int8"
            )
        if faces:
            job.report.quantization = _faces_int8(job)
        elif precision == "int8":
            job.report.quantization = _int8(job)
        elif precision == "fp16":
            job.report.quantization = _fp16(job)
        elif precision == "fp8":
            job.report.quantization = _fp8(job)
        _commit(bundle.path, job.manifest, job.report.pending)
        if faces:
            job.report.engine = {"built": False, "reason": _FACES_NO_PLAN}
            say(f"no TensorRT plan: {_FACES_NO_PLAN}")
        elif no_engine:
            job.report.engine = {"built": False, "reason": "--no-engine"}
        else:
            options = _plan_options(precision, workspace_gib, opt_level, shapes, dla)
            job.report.engine = _plan(bundle.path, precision, rules, options, say)
    job.report.seconds = time.perf_counter() - start
    return job.report


@dataclass
class _Job:
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
    preparations: tuple[str, ...] = int8_search.PREPARATIONS

    @property
    def task(self) -> gate.Task:
        return gate.Task.of(self.bundle.manifest)


def _preparations(prepare: str | tuple[str, ...]) -> tuple[str, ...]:
    """``auto``: the four fast preparations, the best kept; else the named ones (``none``,
    ``equalize``, ``bias``, ``equalize+bias``, ``adaround``, ``equalize+adaround``,
    ``equalize+bias+adaround``, ``shift+bias``, ``equalize+shift+bias``; comma-separated text
    or a tuple)."""
    if prepare == "auto":
        return int8_search.PREPARATIONS
    names = (
        tuple(p.strip() for p in prepare.split(",")) if isinstance(prepare, str) else tuple(prepare)
    )
    known = int8_search.ALL_PREPARATIONS
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise ModelError(
            f"unknown --prepare {bad[0] if bad else prepare!r}; choose auto or from "
            + ", ".join(known)
        )
    return names


def _commit(folder: Path, manifest: dict, files: dict[str, bytes | None]) -> None:
    """Write ``files`` and the manifest that records them as one change: the files go to hidden
    temporary names first, then the manifest, then the files move into place (and the ones given
    as None, which the manifest no longer records, are removed). A failure (a full disk, say)
    before the manifest leaves the bundle as it was; a crash after it leaves files whose hashes
    the manifest does not match, which loading refuses with a sentence."""
    temps: dict[str, Path] = {}
    try:
        for name, data in files.items():
            if data is None:
                continue
            final = folder / name
            temps[name] = final.with_name(f".{final.name}.pending")
            atomic.write_bytes(temps[name], data)
        write_manifest(folder, manifest)
        for name, tmp in temps.items():
            os.replace(tmp, folder / name)
        temps.clear()
        for name in (n for n, data in files.items() if data is None):
            with contextlib.suppress(FileNotFoundError):
                (folder / name).unlink()
    except OSError as exc:
        raise OutputError(atomic.describe_os_error(exc, folder)) from exc
    finally:
        for tmp in temps.values():
            with contextlib.suppress(OSError):
                tmp.unlink()


def _parse_gate(text):
    try:
        return gate.parse_gate(text)
    except ValueError as exc:
        raise ModelError(str(exc)) from None


def _as_bundle(path: Path, say) -> Path:
    if path.is_dir():
        if not is_bundle(path):
            raise ModelError(f"{path} is not an edgert bundle (no edgert manifest.json)")
        return path
    if path.suffix.lower() == ".onnx" and path.is_file():
        from edgert.export import export_model

        target = path.with_suffix(".edgert")
        if is_bundle(target):
            source = Bundle(target).manifest.hashes.get("source")
            if source is not None and source == sha256_file(path):
                say(f"using the bundle {target} (wrapped from this unchanged {path.name})")
                return target
        say(f"wrapping {path} into the bundle {target}")
        return export_model(str(path), target).bundle
    raise ModelError(f"{path} is neither a bundle folder nor an .onnx file")


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


def _load_fp32(bundle: Bundle, file: str = "model.onnx"):
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


def _data(job: _Job, calib_size: int | None = None) -> calibration.CalibrationData:
    size = job.calib_size if calib_size is None else calib_size
    data = calibration.load(job.calib, job.bundle.manifest, size, job.holdout_size, job.seed)
    job.say(f"calibration: {data.calibration.description}; hold-out: {data.holdout.description}")
    return data


def _split(job: _Job, model):
    """(data, calibration samples, validation split of them, quantizable nodes)."""
    data = _data(job)
    nodes = ranges.quantizable_nodes(model)
    if not nodes:
        raise ModelError(
            "the model has no Conv, Gemm or MatMul with constant weights: nothing to quantize"
        )
    return data, *int8_search.split_validation(data.calibration.inputs), nodes


def _int8(job: _Job) -> dict:
    """Calibrate, quantize, gate (with the sensitivity fallback when needed); stage the files."""
    model = _load_fp32(job.bundle)
    data, fit, validation, nodes = _split(job, model)
    stages: dict[str, float] = {}
    t0 = time.perf_counter()
    fp32 = evaluate.session(model)
    ref = _References(evaluate.run(fp32, validation), evaluate.run(fp32, data.holdout.inputs))
    job.say(f"preparing and calibrating on {len(fit)} samples: {', '.join(job.preparations)}")
    try:
        search = int8_search.choose_preparation(
            model, fit, validation, ref.validation, job.task, job.calib_method,
            job.preparations, job.say,
        )  # fmt: skip
    except ValueError as exc:
        raise ModelError(str(exc)) from None
    prep, table = search.best, search.table
    stages["prepare_and_calibrate"] = time.perf_counter() - t0
    choice, thresholds = prep.choice, prep.stats.thresholds(prep.choice.method)
    job.say(f"kept: {prep.name}, calibration {choice.method} ({choice.why})")
    t0 = time.perf_counter()
    q, ev, first, fallback = _gate(job, prep, fit, thresholds, nodes, validation, data.holdout, ref)
    stages["gate_and_fallback"] = time.perf_counter() - t0
    problems = int8.check_structure(q)
    if problems:
        raise ModelError("the Q/DQ model is not in TensorRT form: " + "; ".join(problems[:3]))
    section = {
        "calibration": {
            "source": data.source,
            "samples": int(len(fit)),
            "validation_samples": int(len(validation)),
            "holdout": data.holdout.description,
            "seed": job.seed,
            "method": choice.method,
            "method_why": choice.why,
            "method_scores": choice.scores,
        },
        "preparation": {
            "kept": prep.name,
            "candidates": table,
            **prep.report,
        },
        **_gate_record(job, thresholds, first, ev, len(int8.quantized_nodes(q)), nodes, fallback),
        "fallback_steps": fallback.steps if fallback else [],
    }
    if not ev.passes(job.rules):
        raise GateFailed(
            f"INT8 misses the accuracy gate even with {len(section['kept_fp32'])} of {len(nodes)} nodes kept in FP32: "
            + "; ".join(ev.failures(job.rules))
            + " (nothing was written; relax it with --gate or try --calib-method)"
        )
    # the DLA path calibrates the FP32 model itself (no Q/DQ): its ranges, same method
    plain = search.stats.get("none") or ranges.collect(
        model, fit, ranges.activation_inputs(model, nodes)
    )
    fp32_thresholds = plain.thresholds(choice.method)
    _stage_int8(job, q, section, data.holdout.inputs, ref.holdout, choice.method, fp32_thresholds)
    t0 = time.perf_counter()
    section["fp16_variant"] = _stage_fp16_variant(job, "int8", q, data.holdout, ref.holdout)
    stages["fp16_variant"] = time.perf_counter() - t0
    section["onnxruntime_cpu_ms"] = _cpu_speeds(fp32, q, "int8", data.holdout.inputs[0], job.say)
    section["seconds"] = {k: round(v, 1) for k, v in stages.items()}
    job.manifest.setdefault("quantization", {})["int8"] = section
    kept = f", {len(section['kept_fp32'])} kept in FP32" if section["kept_fp32"] else ""
    job.say(
        f"wrote model.int8.onnx ({section['quantized_nodes']}/{len(nodes)} nodes INT8{kept}); gate passed: {ev.summary()}"
    )
    return section


_FACES_NO_PLAN = (
    "the face detector runs its three networks on ONNX Runtime (with its TensorRT execution "
    "provider where installed); edgert builds no TensorRT plans for them"
)


def _faces_int8(job: _Job) -> dict:
    """INT8 for the three networks of a face-detection bundle (:mod:`faces`): calibrated on what
    each sees when the FP32 detector runs on the calibration images, gated end to end."""
    from . import faces

    t0 = time.perf_counter()
    cal_images, hold_images, source = calibration.load_images(
        job.calib, job.bundle.manifest, job.calib_size, job.holdout_size, job.seed
    )
    job.say(f"calibration: {len(cal_images)} of {source}; hold-out: {len(hold_images)} others")
    specs = job.bundle.manifest.raw["models"]
    det = faces.detector(job.bundle.path)
    try:
        cal_inputs, _ = faces.stage_inputs(det, cal_images, job.seed)
        hold_inputs, ref_faces = faces.stage_inputs(det, hold_images, job.seed + 1)
    finally:
        det.close()
    stages = {"record_inputs": time.perf_counter() - t0}
    t0 = time.perf_counter()
    nets, splits = {}, {}
    for name in faces.NETWORKS:
        model = _load_fp32(job.bundle, specs[name]["file"])
        nets[name], splits[name] = faces.quantize_network(
            name, model, cal_inputs[name], faces.subset(hold_inputs[name], job.holdout_size, 0),
            job.calib_size, job.calib_method, job.preparations, job.seed, job.say,
        )  # fmt: skip
    stages["prepare_and_calibrate"] = time.perf_counter() - t0
    t0 = time.perf_counter()

    def judge() -> gate.Evaluation:
        det_q = faces.detector(job.bundle.path, {n: r.quantized for n, r in nets.items()})
        try:
            got = [det_q.detect(img) for img in hold_images]
        finally:
            det_q.close()
        cos = {n: faces.network_cosine(r) for n, r in nets.items()}
        metrics = {
            "cosine": min(cos.values()),
            **gate.box_agreement(ref_faces, got),  # faces: all class 0
            **{f"cosine_{n}": c for n, c in cos.items()},
        }
        return gate.Evaluation(metrics)

    ev = judge()
    first = dict(ev.metrics)
    job.say(f"INT8 face detector vs FP32 on the hold-out: {ev.summary()}")
    _say_if_nothing_found(job, ev, len(hold_images), "faces", "faces")
    tried: list[str] = []
    while not ev.passes(job.rules) and len(tried) < len(nets):
        name = min((n for n in nets if n not in tried), key=lambda n: ev.metrics[f"cosine_{n}"])
        tried.append(name)
        r, (fit, validation, ref_val) = nets[name], splits[name]
        floor = max(job.rules.get("cosine", 0.0), 0.999)
        job.say(
            f"gate not met ({'; '.join(ev.failures(job.rules))}); {name} gives nodes back to FP32"
        )
        r.quantized, _, r.fallback = int8_search.fallback(
            r.prep.base, r.thresholds, [n.name for n in ranges.quantizable_nodes(r.prep.base)],
            validation, ref_val, r.holdout, r.ref_holdout, gate.Task("generic"), None,
            {"cosine": floor}, job.say, rebuild=lambda kept, p=r.prep, f=fit: p.rebuild(f, kept),
        )  # fmt: skip
        ev = judge()
        job.say(f"INT8 face detector vs FP32 on the hold-out: {ev.summary()}")
    stages["gate_and_fallback"] = time.perf_counter() - t0
    section: dict = {
        "calibration": {
            "source": source,
            "images": len(cal_images),
            "holdout_images": len(hold_images),
            "seed": job.seed,
        },
        "networks": {},
        "gate": job.rules,
        "holdout_before_fallback": {k: round(v, 5) for k, v in first.items()},
        "holdout": _rounded(ev),
        "passed": ev.passes(job.rules),
    }
    for name, r in nets.items():
        section["networks"][name] = {
            "inputs": int(len(splits[name][0]) + len(splits[name][1])),
            "preparation": r.prep.name,
            "method": r.prep.choice.method,
            "quantized_nodes": len(int8.quantized_nodes(r.quantized)),
            "kept_fp32": r.fallback.kept_fp32 if r.fallback else [],
        }
    if not section["passed"]:
        kept = sum(len(v["kept_fp32"]) for v in section["networks"].values())
        raise GateFailed(
            f"the INT8 face detector misses the accuracy gate even with {kept} nodes kept in FP32: "
            + "; ".join(ev.failures(job.rules))
            + " (nothing was written; relax it with --gate or calibrate with other images)"
        )
    for name, r in nets.items():
        file = int8_file(specs[name]["file"])
        section["networks"][name]["file"] = file
        section["networks"][name]["model_bytes"] = _stage_model(job, file, r.quantized)
    section["seconds"] = {k: round(v, 1) for k, v in stages.items()}
    job.manifest.setdefault("quantization", {})["int8"] = section
    job.say(
        f"wrote {', '.join(v['file'] for v in section['networks'].values())}; gate passed: {ev.summary()}"
    )
    return section


def _say_if_nothing_found(job: _Job, ev, samples: int, what: str, of: str) -> None:
    """A detector's box F1 of 1.0 on a hold-out where FP32 finds nothing judged nothing: say so."""
    if ev.metrics.get("boxes_fp32") == 0:
        job.say(
            f"warning: FP32 finds no {what} on the {samples} hold-out samples, so box F1 judges "
            f"nothing: calibrate with images of {of} (--calib)"
        )


def _gate_record(job: _Job, thresholds, first: dict, ev, quantized: int, nodes, fallback) -> dict:
    """The manifest's record of a quantized model's calibration and gate."""
    return {
        "calibration_sha256": hashlib.sha256(
            json.dumps(thresholds, sort_keys=True).encode()
        ).hexdigest(),
        "gate": job.rules,
        "holdout_before_fallback": {k: round(v, 5) for k, v in first.items()},
        "holdout": _rounded(ev),
        "quantized_nodes": quantized,
        "quantizable_nodes": len(nodes),
        "kept_fp32": fallback.kept_fp32 if fallback else [],
        "passed": ev.passes(job.rules),
    }


@dataclass(frozen=True)
class _References:
    """FP32 outputs on the validation split (method choice, sensitivity) and the hold-out (gate)."""

    validation: dict
    holdout: dict


def _gate(job: _Job, prep, fit, thresholds, nodes, validation, hold, ref: _References,
          quantize=int8.quantize, label: str = "INT8"):  # fmt: skip
    """(Q/DQ model, its evaluation, the first evaluation's metrics, the fallback or None)."""
    task = job.task
    q = quantize(prep.model, thresholds, validation)
    ev = gate.evaluate(ref.holdout, evaluate.run(q, hold.inputs), task, hold.labels)
    job.say(f"{label} vs FP32 on the hold-out: {ev.summary()}")
    _say_if_nothing_found(job, ev, len(hold.inputs), "boxes", "what the model detects")
    first = dict(ev.metrics)
    if ev.passes(job.rules):
        return q, ev, first, None
    job.say(f"gate not met ({'; '.join(ev.failures(job.rules))}); ranking nodes by sensitivity")
    q, ev, fallback = int8_search.fallback(
        prep.base, thresholds, [n.name for n in nodes], validation, ref.validation, hold.inputs,
        ref.holdout, task, hold.labels, job.rules, job.say,
        rebuild=lambda kept: prep.rebuild(fit, kept), quantize=quantize,
    )  # fmt: skip
    return q, ev, first, fallback


def _stage_int8(job: _Job, q, section: dict, hold_inputs, ref_hold, method, thresholds) -> None:
    """The INT8 model, the verification samples and the ranges, staged for :func:`_commit`."""
    section["model_bytes"] = _stage_model(job, "model.int8.onnx", q)
    _write_verify(job.bundle, hold_inputs, ref_hold, job.report)
    # the ranges themselves: TensorRT's calibration cache for INT8 on DLA is written from them
    job.report.pending[RANGES_FILE] = json.dumps(
        {"method": method, "thresholds": thresholds}, indent=1
    ).encode()
    job.report.files.append(RANGES_FILE)


def _stage_fp16_variant(job: _Job, precision: str, q, hold, ref_hold) -> dict:
    """For TensorRT 11 (strongly typed: the model's types are the engine's), the INT8 or FP8
    model ``q`` with everything outside INT8 / FP8 in FP16, gated like ``q``; staged when it
    passes. Without it TensorRT 11 builds model.int8.onnx / model.fp8.onnx, whose unquantized
    layers run in FP32."""
    name, plain = FP16_VARIANTS[precision], f"model.{precision}.onnx"
    try:
        q16 = qdq_to_fp16(q)
        ev = gate.evaluate(ref_hold, evaluate.run(q16, hold.inputs), job.task,
                           hold.labels)  # fmt: skip
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
        return {"written": False, "why": why, **({"holdout": _rounded(ev)} if ev else {})}
    size = _stage_model(job, name, q16)
    job.say(
        f"wrote {name} (for TensorRT 11: FP16 outside {precision.upper()}); hold-out: {ev.summary()}"
    )
    return {"written": True, "file": name, "holdout": _rounded(ev), "model_bytes": size}


def _stage_model(job: _Job, name: str, model) -> int:
    """Stage ``model`` as the bundle file ``name`` for :func:`_commit`, with its hash in the
    manifest; its size in bytes."""
    data = model.SerializeToString()
    job.report.pending[name] = data
    job.report.files.append(name)
    job.manifest.setdefault("hashes", {})[name] = sha256_bytes(data)
    return len(data)


def _rounded(ev) -> dict:
    return {k: round(v, 5) for k, v in ev.metrics.items()}


def _fp8(job: _Job) -> dict:
    """FP8 E4M3 Q/DQ (:mod:`fp8`): calibrate, choose the method, gate on the hold-out like INT8
    (with the same node-by-node fallback), stage ``model.fp8.onnx``."""
    from . import fp8

    model = _load_fp32(job.bundle)
    data, fit, validation, nodes = _split(job, model)
    t0 = time.perf_counter()
    task = job.task
    fp32 = evaluate.session(model)
    ref = _References(evaluate.run(fp32, validation), evaluate.run(fp32, data.holdout.inputs))
    # FP8 rounds weights to 3 mantissa bits: bias correction (for that rounding) is tried too
    candidates = tuple(p for p in job.preparations if p in ("none", "bias")) or ("none",)
    job.say(f"calibrating on {len(fit)} samples: {', '.join(candidates)}")
    search = int8_search.choose_preparation(
        model, fit, validation, ref.validation, task, job.calib_method, candidates, job.say,
        quantize=fp8.quantize, round_weights=fp8.round_weights,
    )  # fmt: skip
    prep, table = search.best, search.table
    choice, thresholds = prep.choice, prep.stats.thresholds(prep.choice.method)
    job.say(f"kept: {prep.name}, calibration {choice.method} ({choice.why})")
    hold = data.holdout
    q, ev, first, fallback = _gate(job, prep, fit, thresholds, nodes, validation, hold, ref,
                                   fp8.quantize, "FP8")  # fmt: skip
    section = {
        "format": "E4M3 (float8e4m3fn) Q/DQ, opset 19, per-tensor activations, per-channel weights",
        "calibration": {
            "source": data.source,
            "samples": int(len(fit)),
            "method": choice.method,
            "method_why": choice.why,
            "method_scores": choice.scores,
        },
        "preparation": {"kept": prep.name, "candidates": table},
        **_gate_record(job, thresholds, first, ev, len(fp8.quantized_nodes(q)), nodes, fallback),
        "requires": "TensorRT 10+ on a GPU of compute capability 8.9+ (Ada, Hopper, Blackwell, Jetson Thor)",
    }
    if not section["passed"]:
        raise GateFailed(
            f"FP8 misses the accuracy gate even with {len(section['kept_fp32'])} of {len(nodes)} nodes kept in FP32: "
            + "; ".join(ev.failures(job.rules))
            + " (nothing was written; relax it with --gate)"
        )
    section["model_bytes"] = _stage_model(job, "model.fp8.onnx", q)
    _write_verify(job.bundle, hold.inputs, ref.holdout, job.report)
    section["fp16_variant"] = _stage_fp16_variant(job, "fp8", q, hold, ref.holdout)
    section["onnxruntime_cpu_ms"] = _cpu_speeds(fp32, q, "fp8", hold.inputs[0], job.say)
    section["seconds"] = round(time.perf_counter() - t0, 1)
    job.manifest.setdefault("quantization", {})["fp8"] = section
    job.say(
        f"wrote model.fp8.onnx ({section['quantized_nodes']}/{len(nodes)} nodes FP8); gate passed: {ev.summary()}"
    )
    return section


def _fp16(job: _Job) -> dict:
    """An FP16 model (for TensorRT 11, strongly typed) and its error against FP32 where ONNX
    Runtime can run it."""
    bundle, say, report = job.bundle, job.say, job.report
    model = _load_fp32(bundle)
    fp16 = to_fp16(model)
    section: dict = {
        "model_bytes": _stage_model(job, "model.fp16.onnx", fp16),
        "fp32_ops": "overflow-prone ops kept in FP32, FP32 inputs/outputs",
    }
    try:
        data = _data(job, min(job.calib_size, 64))
        ref = evaluate.run(model, data.holdout.inputs)
        ev = gate.evaluate(
            ref, evaluate.run(fp16, data.holdout.inputs), job.task, data.holdout.labels
        )
        section["holdout"] = _rounded(ev)
        section["onnxruntime_cpu_ms"] = _cpu_speeds(
            model, fp16, "fp16", data.holdout.inputs[0], say
        )
        _write_verify(bundle, data.holdout.inputs, ref, report)
        say(f"FP16 vs FP32 on the hold-out (ONNX Runtime): {ev.summary()}")
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


def _cpu_speeds(fp32, reduced, precision: str, sample: np.ndarray, say) -> dict[str, float]:
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


def _write_verify(bundle, inputs: np.ndarray, ref: dict, report) -> None:
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


def _plan_options(precision, workspace_gib, opt_level, shapes, dla):
    from edgert.runtime.backends.tensorrt_build import BuildOptions

    return BuildOptions(
        precision=precision,
        workspace_bytes=int(workspace_gib * 2**30) if workspace_gib else None,
        opt_level=opt_level,
        shapes=shapes or {},
        dla_core=dla,
    )


def _plan(bundle_path, precision: str, rules: dict, options, say) -> dict:
    """The TensorRT plan (from the cache, or built now) checked against FP32 on the stored
    samples; or why it is not built here."""
    from edgert.runtime.backends.tensorrt import TensorRTBackend

    why_not = TensorRTBackend.availability()
    if why_not:
        say(
            f"TensorRT plan not built here ({why_not}); on the device run: edgert build {bundle_path} --precision {precision}"
        )
        return {
            "built": False,
            "reason": why_not,
            "on_device": f"edgert build {bundle_path} --precision {precision}",
        }
    from edgert.runtime.engine_cache import ensure_plan, run_stored_samples

    say(f"building the {precision} TensorRT plan")
    plan, built, key = ensure_plan(bundle_path, precision, options=options)
    say(f"{'built' if built else 'cached'}: {plan.name}")
    result = {"built": built, "plan": str(plan), "key": key.digest}
    ran = run_stored_samples(Path(bundle_path), plan)
    if ran is not None:
        ref, got, n = ran
        ev = gate.evaluate(ref, got, gate.Task.of(Bundle(bundle_path).manifest))
        result["verify"] = _rounded(ev)
        device_rules = {k: v for k, v in rules.items() if k in ("cosine",)}
        if not ev.passes(device_rules):
            plan.unlink(missing_ok=True)
            plan.with_suffix(".json").unlink(missing_ok=True)
            raise GateFailed(
                f"the TensorRT plan's outputs differ from FP32: {'; '.join(ev.failures(device_rules))} (plan deleted)"
            )
        say(f"plan vs FP32 on {n} stored samples: {ev.summary()}")
    return result
