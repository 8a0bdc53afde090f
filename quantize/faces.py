"""INT8 for a face-detection bundle (MTCNN: P-Net over an image pyramid, then R-Net on 24x24 and
O-Net on 48x48 candidate crops; the detector is :class:`edgert.runtime.tasks.faces.MtcnnDetector`).

Each network gets its own Q/DQ model (``model.int8.onnx``, ``rnet.int8.onnx``,
``onet.int8.onnx``), calibrated on what it sees when the FP32 detector runs on the calibration
images: P-Net's pyramid levels (cut into tiles: the network is fully convolutional, and a
per-tensor range does not depend on the image's size), R-Net's and O-Net's candidate crops. Each
network chooses its preparation and calibration method on a validation split of its own inputs,
as a single-model build does. The gate is end to end: the INT8 detector (all three networks
quantized) against the FP32 detector on the hold-out images, faces matched at IoU >= 0.5 (box F1;
``boxes_fp32``: FP32's faces per image), and each network's output cosine on the inputs the FP32
detector gave it there. When the gate fails, the network furthest from FP32 gives nodes back to
FP32 (most sensitive first, as for one model) until its cosine passes, and the detector is judged
again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgert.runtime.errors import GateFailed, ModelError, SourceError
from edgert.runtime.tasks.faces import NETWORKS, int8_file

from . import calibration, evaluate, gate, int8, progress, qdq_search, ranges
from .job import Job, load_fp32, rounded, say_if_nothing_found, stage_model

TILE = 24  # P-Net calibration tiles (its receptive field is 12 x 12)
MIN_INPUTS = 16


class _Recorder:
    """An engine that keeps (``keep``: some of) the inputs the detector gives it."""

    def __init__(self, engine, keep: Callable[[np.ndarray], np.ndarray]) -> None:
        self.engine, self.keep = engine, keep
        self.inputs: list[np.ndarray] = []

    @property
    def outputs(self):
        return self.engine.outputs

    def infer(self, x: np.ndarray) -> dict:
        kept = self.keep(x)
        if len(kept):
            self.inputs.append(np.array(kept, np.float32))
        return self.engine.infer(x)


@dataclass(frozen=True)
class _Output:
    name: str


class _OnnxRuntime:
    """A (quantized) network on ONNX Runtime CPU with the calls the detector makes."""

    def __init__(self, model) -> None:
        self.sess = evaluate.session(model)
        self.input = self.sess.get_inputs()[0].name
        self.outputs = [_Output(o.name) for o in self.sess.get_outputs()]

    def infer(self, x: np.ndarray) -> dict:
        values = self.sess.run(None, {self.input: np.ascontiguousarray(x, np.float32)})
        return dict(zip([o.name for o in self.outputs], values, strict=True))

    def close(self) -> None:
        self.sess = None


def detector(bundle_path, models: dict | None = None):
    """The bundle's MTCNN detector on ONNX Runtime CPU; ``models``: {network: ModelProto} run in
    place of its FP32 files."""
    from edgert.runtime.tasks.faces import MtcnnDetector

    det = MtcnnDetector(bundle_path, backend="onnxruntime")
    for name, model in (models or {}).items():
        det.engines[name].close()
        det.engines[name] = _OnnxRuntime(model)
    return det


def stage_inputs(det, images: list[np.ndarray], seed: int) -> tuple[dict[str, np.ndarray], list]:
    """({network: the inputs the detector gave it on ``images``}, the faces it found in each):
    P-Net's pyramid levels cut into TILE x TILE tiles as they pass (about a quarter of each
    level), R-Net's and O-Net's crops."""
    rng = np.random.default_rng(seed)

    def tiles(level: np.ndarray) -> np.ndarray:
        _, _, h, w = level.shape
        if h < TILE or w < TILE:
            return level[:0, :, :TILE, :TILE]
        out = []
        for _ in range(max(1, (h // TILE) * (w // TILE) // 4)):
            y, x = rng.integers(0, h - TILE + 1), rng.integers(0, w - TILE + 1)
            out.append(level[:, :, y : y + TILE, x : x + TILE])
        return np.concatenate(out)

    originals = dict(det.engines)
    rec = {
        name: _Recorder(det.engines[name], tiles if name == "pnet" else lambda x: x)
        for name in NETWORKS
    }
    det.engines.update(rec)
    try:
        recording = progress.each(images, "recording the networks' inputs", len(images), "images")
        found = [det.detect(img) for img in recording]
    finally:
        det.engines.update(originals)
    inputs = {
        name: np.concatenate(r.inputs) if r.inputs else np.zeros((0, 3, TILE, TILE), np.float32)
        for name, r in rec.items()
    }
    return inputs, found


def subset(x: np.ndarray, n: int, seed: int) -> np.ndarray:
    """At most ``n`` of ``x``, a seeded choice in their order."""
    return x if len(x) <= n else x[np.sort(np.random.default_rng(seed).permutation(len(x))[:n])]


@dataclass
class NetworkResult:
    prep: qdq_search.Preparation
    thresholds: dict
    quantized: object
    holdout: np.ndarray
    ref_holdout: dict
    fallback: qdq_search.FallbackResult | None = None


def quantize_network(
    name: str,
    model,
    fit_all: np.ndarray,
    hold: np.ndarray,
    calib_size: int,
    method: str | None,
    preparations,
    seed: int,
    say: Callable[[str], None],
):
    """One network's preparation, calibration method and Q/DQ model from its recorded inputs."""
    if len(fit_all) < MIN_INPUTS or len(hold) < 4:
        raise SourceError(
            f"the calibration images give {name} only {len(fit_all)} inputs (hold-out: {len(hold)}): "
            f"the FP32 detector finds too few face candidates in them; give images with faces (--calib)"
        )
    cal = subset(fit_all, calib_size, seed)
    fit, validation = qdq_search.split_validation(cal)
    fp32 = evaluate.session(model)
    ref_val = evaluate.run(fp32, validation, what=f"{name} FP32 on the validation split")
    say(f"{name}: {len(fit)} calibration inputs {list(fit.shape[1:])}, {len(hold)} hold-out")
    try:
        search = qdq_search.choose_preparation(
            model, fit, validation, ref_val, gate.Task("generic"), method, preparations, say
        )
    except ValueError as exc:
        raise ModelError(str(exc)) from None
    prep = search.best
    thresholds = prep.stats.thresholds(prep.choice.method)
    say(f"{name}: kept {prep.name}, calibration {prep.choice.method} ({prep.choice.why})")
    q = int8.quantize(prep.model, thresholds, validation)
    ref_hold = evaluate.run(fp32, hold, what=f"{name} FP32 on the hold-out")
    return NetworkResult(prep, thresholds, q, hold, ref_hold), (fit, validation, ref_val)


def network_cosine(result: NetworkResult) -> float:
    got = evaluate.run(result.quantized, result.holdout)
    return min(float(gate.cosine_rows(r, got[k]).mean()) for k, r in result.ref_holdout.items())


# -- the recipe ---------------------------------------------------------------------------
def build_int8(job: Job) -> dict:
    """INT8 for the three networks of a face-detection bundle (:mod:`faces`): calibrated on what
    each sees when the FP32 detector runs on the calibration images, gated end to end."""
    t0 = time.perf_counter()
    cal_images, hold_images, source = calibration.load_images(
        job.calib, job.bundle.manifest, job.calib_size, job.holdout_size, job.seed
    )
    job.say(f"calibration: {len(cal_images)} of {source}; hold-out: {len(hold_images)} others")
    specs, det = job.bundle.manifest.models, detector(job.bundle.path)
    try:
        cal_inputs, _ = stage_inputs(det, cal_images, job.seed)
        hold_inputs, ref_faces = stage_inputs(det, hold_images, job.seed + 1)
    finally:
        det.close()
    stages = {"record_inputs": time.perf_counter() - t0}
    t0 = time.perf_counter()
    nets, splits = {}, {}
    for name in progress.each(NETWORKS, "networks", len(NETWORKS)):
        model = load_fp32(job.bundle, specs[name].file)
        nets[name], splits[name] = quantize_network(
            name,
            model,
            cal_inputs[name],
            subset(hold_inputs[name], job.holdout_size, 0),
            job.calib_size,
            job.calib_method,
            job.preparations,
            job.seed,
            job.say,
        )
    stages["prepare_and_calibrate"] = time.perf_counter() - t0
    t0 = time.perf_counter()

    def judge() -> gate.Evaluation:
        det_q = detector(job.bundle.path, {n: r.quantized for n, r in nets.items()})
        gating = progress.each(hold_images, "the gate: INT8 faces", len(hold_images), "images")
        try:
            got = [det_q.detect(img) for img in gating]
        finally:
            det_q.close()
        cos = {n: network_cosine(r) for n, r in nets.items()}
        metrics = {
            "cosine": min(cos.values()),
            **gate.box_agreement(ref_faces, got),  # faces: all class 0
            **{f"cosine_{n}": c for n, c in cos.items()},
        }
        return gate.Evaluation(metrics)

    rules = gate.with_box_f1(job.rules)
    ev = judge()
    first = dict(ev.metrics)
    job.say(f"INT8 face detector vs FP32 on the hold-out: {ev.summary()}")
    say_if_nothing_found(job, ev, len(hold_images), "faces", "faces")
    tried: list[str] = []
    while not ev.passes(rules) and len(tried) < len(nets):
        name = min((n for n in nets if n not in tried), key=lambda n: ev.metrics[f"cosine_{n}"])
        tried.append(name)
        r, (fit, validation, ref_val) = nets[name], splits[name]
        floor = max(rules.get("cosine", 0.0), 0.999)
        job.say(f"gate not met ({'; '.join(ev.failures(rules))}); {name} gives nodes back to FP32")
        r.quantized, _, r.fallback = qdq_search.fallback(
            r.prep.base,
            r.thresholds,
            [n.name for n in ranges.quantizable_nodes(r.prep.base)],
            validation,
            ref_val,
            r.holdout,
            r.ref_holdout,
            gate.Task("generic"),
            None,
            {"cosine": floor},
            job.say,
            rebuild=lambda kept, p=r.prep, f=fit: p.rebuild(f, kept),
        )
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
        "gate": rules,
        "holdout_before_fallback": {k: round(v, 5) for k, v in first.items()},
        "holdout": rounded(ev),
        "passed": ev.passes(rules),
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
            + "; ".join(ev.failures(rules))
            + " (nothing was written; relax it with --gate or calibrate with other images)"
        )
    for name, r in nets.items():
        file = int8_file(specs[name].file)
        section["networks"][name]["file"] = file
        section["networks"][name]["model_bytes"] = stage_model(job, file, r.quantized)
    section["seconds"] = {k: round(v, 1) for k, v in stages.items()}
    job.manifest.setdefault("quantization", {})["int8"] = section
    job.say(
        f"wrote {', '.join(v['file'] for v in section['networks'].values())}; gate passed: {ev.summary()}"
    )
    return section
