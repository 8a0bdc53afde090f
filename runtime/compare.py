"""Outputs compared with FP32, shared by the device's plan check and the host's accuracy gate."""

from __future__ import annotations

import numpy as np


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-sample cosine similarity of two (N, ...) arrays, in float64. A row of zeros matches
    only a row of zeros (1.0); against anything else it scores 0.0, not a perfect 1.0."""
    a = a.reshape(len(a), -1).astype(np.float64)
    b = b.reshape(len(b), -1).astype(np.float64)
    num = (a * b).sum(axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.where(
        den > 0, num / np.maximum(den, 1e-30), np.where(np.abs(a - b).max(axis=1) == 0, 1.0, 0.0)
    )
