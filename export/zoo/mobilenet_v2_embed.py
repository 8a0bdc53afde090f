"""ImageNet MobileNetV2's pooled features as an embedder: ``zoo:mobilenet_v2`` cut at the input
of its classifier (``classifier.0``, the dropout that is the identity in inference), 1,280 values
per image, L2-normalised by edgert. Same weights, preprocessing and calibration photos."""

from __future__ import annotations

from ..embed import cut_torch
from ..source_model import SourceModel
from . import mobilenet_v2
from .samples import ZooSamples

LAYER = "classifier.0"


def load() -> SourceModel:
    src = cut_torch(mobilenet_v2.load(), LAYER)
    src.name, src.spec = "mobilenet_v2_embed", "zoo:mobilenet_v2_embed"
    src.metrics = {**src.metrics, "embedding": f"the pooled features ({LAYER}'s output)"}
    return src


def calibration_samples(calib_size: int, holdout_size: int, seed: int) -> ZooSamples:
    return mobilenet_v2.calibration_samples(calib_size, holdout_size, seed)
