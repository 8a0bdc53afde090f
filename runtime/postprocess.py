"""Post-processing into small result dataclasses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Classification:
    index: int
    label: str
    score: float


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    z = logits - logits.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def looks_like_probabilities(x: np.ndarray) -> bool:
    return bool(x.min() >= 0 and np.allclose(x.sum(axis=-1), 1.0, atol=1e-3))


def classify(
    scores: np.ndarray, labels: Sequence[str] | None = None, k: int = 5
) -> list[list[Classification]]:
    """Top-k per batch row; logits get a softmax, probabilities are used as they are."""
    scores = np.asarray(scores, dtype=np.float32)
    scores = scores.reshape(scores.shape[0], -1)
    probs = scores if looks_like_probabilities(scores) else softmax(scores)
    k = max(1, min(k, probs.shape[1]))
    top = np.argsort(-probs, axis=1)[:, :k]
    return [
        [
            Classification(
                int(i), labels[i] if labels and i < len(labels) else str(int(i)), float(row[i])
            )
            for i in idx
        ]
        for row, idx in zip(probs, top, strict=True)
    ]
