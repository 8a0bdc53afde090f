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
    """Top-k per batch row; logits get a softmax, probabilities are used as they are. A row
    with a NaN or infinite score (a broken model's) gives no classes: counted and said once
    (:func:`~edgert.runtime.tasks.detection.dropped`), never a class with a NaN score."""
    from .detection import dropped

    scores = np.asarray(scores, dtype=np.float32)
    scores = scores.reshape(scores.shape[0], -1)
    sound = np.isfinite(scores).all(axis=1)
    dropped(int(len(sound) - sound.sum()), "a NaN or infinite score", "classifier output row(s)")
    scores = np.where(sound[:, None], scores, 0)
    given = sound.any() and looks_like_probabilities(scores[sound])
    probs = scores if given else softmax(scores)
    k = max(1, min(k, probs.shape[1]))
    top = np.argsort(-probs, axis=1)[:, :k]
    top[~sound] = -1
    return [
        [
            Classification(
                int(i), labels[i] if labels and i < len(labels) else str(int(i)), float(row[i])
            )
            for i in idx
            if i >= 0
        ]
        for row, idx in zip(probs, top)
    ]


def segment(logits: np.ndarray) -> np.ndarray:
    """Per-pixel class: [N, C, H, W] scores -> [N, H, W] int32 masks (argmax over C)."""
    logits = np.asarray(logits)
    if logits.ndim != 4:
        raise ValueError(f"segmentation output must be [N, C, H, W]; got {list(logits.shape)}")
    return logits.argmax(axis=1).astype(np.int32)


def mask_to_source(mask: np.ndarray, transform, fill: int = 0) -> np.ndarray:
    """A model-space mask [H, W] back onto the source image (undo crop / padding and scale).

    Each source pixel takes the model pixel its centre falls in; pixels that fall outside the
    model input (cropped away) get ``fill``.
    """
    h, w = transform.source_hw
    mx = np.floor((np.arange(w) + 0.5) * transform.sx + transform.ox).astype(np.int64)
    my = np.floor((np.arange(h) + 0.5) * transform.sy + transform.oy).astype(np.int64)
    inside_x = (mx >= 0) & (mx < mask.shape[1])
    inside_y = (my >= 0) & (my < mask.shape[0])
    out = mask[np.clip(my, 0, mask.shape[0] - 1)][:, np.clip(mx, 0, mask.shape[1] - 1)]
    out = out.copy()
    out[~inside_y, :] = fill
    out[:, ~inside_x] = fill
    return out
