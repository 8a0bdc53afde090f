"""INT8 for a face-detection bundle (MTCNN: P-Net over an image pyramid, then R-Net on 24x24 and
O-Net on 48x48 candidate crops; the detector is :class:`edgert.runtime.faces.MtcnnDetector`).

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

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgert.runtime.errors import ModelError, SourceError
from edgert.runtime.faces import NETWORKS

from . import evaluate, gate, int8, int8_search

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
    from edgert.runtime.faces import MtcnnDetector

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
    rec = {name: _Recorder(det.engines[name], tiles if name == "pnet" else lambda x: x)
           for name in NETWORKS}  # fmt: skip
    det.engines.update(rec)
    try:
        found = [det.detect(img) for img in images]
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
    prep: int8_search.Preparation
    thresholds: dict
    quantized: object
    holdout: np.ndarray
    ref_holdout: dict
    fallback: int8_search.FallbackResult | None = None


def quantize_network(name: str, model, fit_all: np.ndarray, hold: np.ndarray, calib_size: int,
                     method: str | None, preparations, seed: int, say: Callable[[str], None]):  # fmt: skip
    """One network's preparation, calibration method and Q/DQ model from its recorded inputs."""
    if len(fit_all) < MIN_INPUTS or len(hold) < 4:
        raise SourceError(
            f"the calibration images give {name} only {len(fit_all)} inputs (hold-out: {len(hold)}): "
            f"the FP32 detector finds too few face candidates in them; give images with faces (--calib)"
        )
    cal = subset(fit_all, calib_size, seed)
    fit, validation = int8_search.split_validation(cal)
    fp32 = evaluate.session(model)
    ref_val = evaluate.run(fp32, validation)
    say(f"{name}: {len(fit)} calibration inputs {list(fit.shape[1:])}, {len(hold)} hold-out")
    try:
        search = int8_search.choose_preparation(
            model, fit, validation, ref_val, gate.Task("generic"), method, preparations, say
        )
    except ValueError as exc:
        raise ModelError(str(exc)) from None
    prep = search.best
    thresholds = prep.stats.thresholds(prep.choice.method)
    say(f"{name}: kept {prep.name}, calibration {prep.choice.method} ({prep.choice.why})")
    q = int8.quantize(prep.model, thresholds, validation)
    ref_hold = evaluate.run(fp32, hold)
    return NetworkResult(prep, thresholds, q, hold, ref_hold), (fit, validation, ref_val)


def network_cosine(result: NetworkResult) -> float:
    got = evaluate.run(result.quantized, result.holdout)
    return min(float(gate.cosine_rows(r, got[k]).mean()) for k, r in result.ref_holdout.items())
