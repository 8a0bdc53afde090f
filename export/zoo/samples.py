"""Calibration data a zoo entry brings with it (``edgert build --calib zoo``, the default for a
zoo model): each entry's module has a ``calibration_samples(calib_size, holdout_size, seed)``
returning :class:`ZooSamples`; ``quantize/calibration.py`` preprocesses them for the bundle. No
download: the bundled photos (:mod:`edgert.runtime.sample_data`) and scikit-learn's digits."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class ZooSamples:
    """A zoo entry's calibration and hold-out samples: BGR images (``preprocessed`` False: the
    bundle's preprocessing is applied, or a whole-image model takes them as they are) or model
    inputs; hold-out labels where the entry has them."""

    calibration: list | np.ndarray
    holdout: list | np.ndarray
    calibration_text: str
    holdout_text: str
    source: str
    preprocessed: bool = False
    labels: np.ndarray | None = None


def augmented_crops(images: list[np.ndarray], n: int, seed: int) -> list[np.ndarray]:
    """Random crops (25-100 % of the area, aspect 3:4-4:3), horizontal flips and brightness /
    contrast / saturation jitter (x0.7-1.3) of the given BGR images; deterministic for a seed."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        img = images[rng.integers(len(images))]
        h, w = img.shape[:2]
        area = h * w * rng.uniform(0.25, 1.0)
        ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        cw = int(min(w, round(np.sqrt(area * ratio))))
        ch = int(min(h, round(np.sqrt(area / ratio))))
        x, y = rng.integers(0, w - cw + 1), rng.integers(0, h - ch + 1)
        crop = img[y : y + ch, x : x + cw].astype(np.float32)
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        crop = crop * rng.uniform(0.7, 1.3)
        mean = crop.mean()
        crop = (crop - mean) * rng.uniform(0.7, 1.3) + mean
        gray = crop.mean(axis=2, keepdims=True)
        crop = (crop - gray) * rng.uniform(0.7, 1.3) + gray
        out.append(np.clip(crop, 0, 255).astype(np.uint8))
    return out
