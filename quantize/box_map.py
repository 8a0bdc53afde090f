"""Mean average precision of one detector's boxes against reference boxes (FP32's own, or the
labels), as COCO's evaluation computes it: per class, detections ranked by score over all images,
each matched greedily to the unmatched reference box of its image and class it overlaps most at
IoU >= t; precision made monotone, sampled at 101 recall points; averaged over the classes that
have reference boxes, at t = 0.50 (mAP50) and t = 0.50, 0.55, ..., 0.95 (mAP50-95).

Pure numpy: the build's gate and its choices judge detectors by it (issue 49)."""

from __future__ import annotations

import numpy as np

THRESHOLDS = np.round(np.linspace(0.5, 0.95, 10), 2)
RECALLS = np.linspace(0.0, 1.0, 101)


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU [len(a), len(b)] of boxes x1, y1, x2, y2."""
    ix1 = np.maximum(a[:, None, 0], b[None, :, 0])
    iy1 = np.maximum(a[:, None, 1], b[None, :, 1])
    ix2 = np.minimum(a[:, None, 2], b[None, :, 2])
    iy2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(ix2 - ix1, 0, None) * np.clip(iy2 - iy1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def _matches(ious: np.ndarray) -> np.ndarray:
    """For detections (rows, best score first) against one image's reference boxes of their
    class: [len(THRESHOLDS), rows] whether each is a true positive at each threshold."""
    tp = np.zeros((len(THRESHOLDS), ious.shape[0]), bool)
    for t, thr in enumerate(THRESHOLDS):
        taken = np.zeros(ious.shape[1], bool)
        for d in range(ious.shape[0]):
            row = np.where(taken, -1.0, ious[d])
            j = int(row.argmax()) if row.size else -1
            if j >= 0 and row[j] >= thr - 1e-10:
                taken[j] = True
                tp[t, d] = True
    return tp


def _ap(tp: np.ndarray, scores: np.ndarray, positives: int) -> np.ndarray:
    """AP at each threshold of one class: ``tp`` [T, D], ``scores`` [D], ``positives`` its
    reference boxes."""
    order = np.argsort(-scores, kind="mergesort")  # COCO's stable ranking
    tp = tp[:, order]
    ctp = np.cumsum(tp, axis=1)
    cfp = np.cumsum(~tp, axis=1)
    out = np.zeros(len(THRESHOLDS))
    for t in range(len(THRESHOLDS)):
        recall = ctp[t] / positives
        precision = ctp[t] / np.maximum(ctp[t] + cfp[t], 1)
        precision = np.maximum.accumulate(precision[::-1])[::-1]  # monotone
        at = np.searchsorted(recall, RECALLS, side="left")
        sampled = np.where(at < len(precision), precision[np.minimum(at, len(precision) - 1)], 0)
        out[t] = sampled.mean()
    return out


def mean_average_precision(ref: list, got: list) -> dict:
    """mAP of ``got`` against ``ref``: per image, ``ref`` (boxes [M, 4], classes [M]) and
    ``got`` (boxes [K, 4], scores [K], classes [K]). Returns ``map50``, ``map50_95`` and
    ``classes`` (how many classes had reference boxes; 0: nothing judged, both 1.0)."""
    if len(ref) != len(got):
        raise ValueError(f"{len(ref)} reference images against {len(got)} compared ones")
    per_class: dict[int, list] = {}
    positives: dict[int, int] = {}
    for (rb, rc), (gb, gs, gc) in zip(ref, got, strict=True):
        rb, rc = np.asarray(rb, np.float64).reshape(-1, 4), np.asarray(rc).reshape(-1)
        gb, gs = np.asarray(gb, np.float64).reshape(-1, 4), np.asarray(gs, np.float64).reshape(-1)
        gc = np.asarray(gc).reshape(-1)
        for c in np.unique(rc):
            positives[int(c)] = positives.get(int(c), 0) + int((rc == c).sum())
        for c in np.unique(gc):
            mine = np.flatnonzero(gc == c)
            mine = mine[np.argsort(-gs[mine], kind="mergesort")]
            theirs = rb[rc == c]
            tp = (
                _matches(_iou(gb[mine], theirs))
                if len(theirs)
                else np.zeros((len(THRESHOLDS), len(mine)), bool)
            )
            per_class.setdefault(int(c), []).append((tp, gs[mine]))
    aps = []
    for c, n in positives.items():
        found = per_class.get(c)
        if not found:
            aps.append(np.zeros(len(THRESHOLDS)))
            continue
        tp = np.concatenate([f[0] for f in found], axis=1)
        scores = np.concatenate([f[1] for f in found])
        aps.append(_ap(tp, scores, n))
    if not aps:
        return {"map50": 1.0, "map50_95": 1.0, "classes": 0}
    ap = np.mean(aps, axis=0)
    return {"map50": float(ap[0]), "map50_95": float(ap.mean()), "classes": len(aps)}
