"""The output heads of the YOLO family and of DETR-style detectors: what each form holds, and its
decoding to objects in model-input pixels (thresholds, NMS, extras per object).

Forms (``Head.form``, recorded in the manifest's ``head`` section):

- ``yolo``: one output [B, 4 + nc + E, N]: per candidate a box (centre x, y, width, height in
  input pixels), nc class scores and E extras (K x D keypoints for pose, 32 mask coefficients
  for instance segmentation, an angle for oriented boxes). Thresholded, then class-aware NMS
  (greedy IoU; for oriented boxes Fast-NMS on probabilistic IoU, as Ultralytics does).
- ``end2end``: [B, K, 6 + E]: boxes (x1, y1, x2, y2; for oriented boxes centre x, y, width,
  height with the angle last), score, class, extras: the model chose them; no NMS (YOLOv10,
  YOLO26, exports with ``nms=True``).
- ``detr``: [B, K, 4 + nc]: boxes as centre x, y, width, height normalised to the input, and
  class scores (RT-DETR): the best class per query above the threshold; no NMS.

Everything here is numpy (the device side: Python 3.8, numpy 1.x).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError

# the layout a manifest records is read with the manifest (bundle -> manifest_checks)
from ..manifest_checks import FORMS, Head  # noqa: F401 - also edgert.runtime.tasks.heads' names
from .detection import batched_nms, dropped, keep_sound, xywh_to_xyxy

MAX_NMS = 30000  # candidates kept for NMS, the best first (as Ultralytics)
# oriented boxes' NMS compares each candidate with every better one (Fast-NMS on probabilistic
# IoU, quadratic): at most this many, the best first (the worst case, all of them of one class
# and every one suppressed, took 0.4 s on 2 x86 cores; a real scene has far fewer above the
# threshold, and the result is the same as without a bound wherever it has fewer)
MAX_ROTATED_NMS = 4096


@dataclass
class Candidates:
    """One image's objects in model-input pixels: ``boxes`` [M, 4] (x1, y1, x2, y2) or [M, 5]
    (centre x, y, width, height, angle in radians) for oriented boxes; scores, class ids and
    the extras [M, E] each candidate carried (keypoints, mask coefficients)."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    extras: np.ndarray

    def take(self, keep) -> Candidates:
        return Candidates(
            self.boxes[keep], self.scores[keep], self.classes[keep], self.extras[keep]
        )


def _empty(box_width: int, extra: int) -> Candidates:
    return Candidates(
        np.zeros((0, box_width), np.float32),
        np.zeros(0, np.float32),
        np.zeros(0, np.int64),
        np.zeros((0, extra), np.float32),
    )


def decode_head(
    output: np.ndarray,
    head: Head,
    num_classes: int | None,
    extra: int,
    conf: float,
    iou: float,
    max_det: int = 300,
    rotated: bool = False,
) -> list:
    """The first output of a detector-family model -> :class:`Candidates` per image.
    ``extra``: values per candidate after the classes (the angle of an oriented box counts).
    ``num_classes``: None where not known (an end-to-end head without labels). A candidate
    above ``conf`` with a NaN, infinite or out-of-range value (box, score, extras) or, in an
    end-to-end row, a class that is not a whole number in 0..nc-1 is dropped before NMS and
    counted (:func:`~edgert.runtime.tasks.detection.dropped`)."""
    out = np.asarray(output, dtype=np.float32)
    if out.ndim != 3:
        raise ShapeError(f"a detector head's output is [batch, ., .]; got {list(out.shape)}")
    # a NaN is under any threshold, and what else is not finite is dropped by keep_sound
    # before any arithmetic that would warn: numpy says nothing on stderr
    with np.errstate(invalid="ignore", over="ignore"):
        if head.form == "end2end":
            return [_end2end(pred, extra, conf, max_det, rotated, num_classes) for pred in out]
        if head.form == "detr":
            return [_detr(pred, conf, max_det) for pred in out]
        if out.shape[1] != 4 + (num_classes or 0) + extra:
            raise ShapeError(
                f"output {list(out.shape)} is not [batch, 4 + {num_classes} classes + {extra}, "
                "candidates]"
            )
        return [_yolo(pred, num_classes or 0, extra, conf, iou, max_det, rotated) for pred in out]


def _yolo(pred, nc, extra, conf, iou, max_det, rotated) -> Candidates:
    """One image's [4 + nc + E, N]: the candidates whose best class beats ``conf``, then NMS."""
    cls = pred[4 : 4 + nc]
    best = cls.max(axis=0) if nc else np.zeros(pred.shape[1], np.float32)
    keep = np.flatnonzero(best > conf)
    if not keep.size:
        return _empty(5 if rotated else 4, extra - (1 if rotated else 0))
    most = MAX_ROTATED_NMS if rotated else MAX_NMS
    if keep.size > most:
        keep = keep[np.argsort(-best[keep], kind="stable")[:most]]
    sel = pred[:, keep].T  # [M, 4 + nc + E]: only the candidates left are transposed
    ok = keep_sound(sel)
    sel, keep = sel[ok], keep[ok]
    scores = best[keep]
    classes = cls[:, keep].argmax(axis=0).astype(np.int64)
    if rotated:
        boxes = np.concatenate([sel[:, :4], sel[:, -1:]], axis=1)
        extras = sel[:, 4 + nc : -1]
        kept = rotated_nms(boxes, scores, classes, iou, max_det)
    else:
        boxes = xywh_to_xyxy(sel[:, :4])
        extras = sel[:, 4 + nc :]
        kept = batched_nms(boxes, scores, classes, iou)
    return Candidates(boxes, scores, classes, extras).take(kept[:max_det])


def _whole_classes(values: np.ndarray, nc: int | None) -> np.ndarray:
    """bool [M]: the (finite) class values that are a class id, a whole number in 0..nc-1
    (0..2**31-1 where nc is not known); the others are counted as dropped."""
    ok = (values == np.floor(values)) & (values >= 0) & (values < (nc if nc else 2**31))
    dropped(
        int(len(ok) - ok.sum()), "a class that is not a whole number from 0 to the classes' count"
    )
    return ok


def _end2end(pred, extra, conf, max_det, rotated, num_classes=None) -> Candidates:
    """One image's [K, 6 + E]: the model's own choice; those above ``conf``, in its order."""
    if pred.shape[1] != 6 + extra:
        raise ShapeError(
            f"an end-to-end head's rows hold 6 + {extra} values (box, score, class, extras); "
            f"these hold {pred.shape[1]}"
        )
    rows = pred[pred[:, 4] > conf]
    rows = rows[keep_sound(rows)]
    rows = rows[_whole_classes(rows[:, 5], num_classes)][:max_det]
    classes = rows[:, 5].astype(np.int64)
    if rotated:  # centre x, y, width, height, score, class, angle
        return Candidates(
            np.concatenate([rows[:, :4], rows[:, -1:]], axis=1), rows[:, 4], classes, rows[:, 6:-1]
        )
    return Candidates(rows[:, :4], rows[:, 4], classes, rows[:, 6:])


def _detr(pred, conf, max_det) -> Candidates:
    """One image's [K, 4 + nc] (normalised centre boxes, class scores): best class per query
    above ``conf``, best first; boxes in model-input units of 1 (scaled by the caller)."""
    scores = pred[:, 4:].max(axis=1)
    classes = pred[:, 4:].argmax(axis=1).astype(np.int64)
    keep = np.flatnonzero(scores > conf)
    keep = keep[keep_sound(np.column_stack([pred[keep, :4], scores[keep]]))]
    keep = keep[np.argsort(-scores[keep], kind="stable")][:max_det]
    return Candidates(
        xywh_to_xyxy(pred[keep, :4]),
        scores[keep],
        classes[keep],
        np.zeros((len(keep), 0), np.float32),
    )


def _covariance(b: np.ndarray):
    """The (a, b, c) of the Gaussian of each oriented box [M, 5] (its covariance [[a, c], [c, b]])."""
    w2, h2 = b[:, 2] ** 2 / 12.0, b[:, 3] ** 2 / 12.0
    cos, sin = np.cos(b[:, 4]), np.sin(b[:, 4])
    return w2 * cos**2 + h2 * sin**2, w2 * sin**2 + h2 * cos**2, (w2 - h2) * cos * sin


def _gaussians(b: np.ndarray, dtype=np.float64) -> tuple:
    """Per oriented box [M, 5], in float64 then as ``dtype``: centre x, y, the covariance's
    (a, b, c) and the square root of its determinant."""
    b = np.asarray(b, np.float64).reshape(-1, 5)
    a, bb, c = _covariance(b)
    root = np.sqrt(np.clip(a * bb - c**2, 0, None))
    return tuple(v.astype(dtype) for v in (b[:, 0], b[:, 1], a, bb, c, root))


def _probiou_of(g1: tuple, g2: tuple, eps: float) -> np.ndarray:
    """Probabilistic IoU [M, N] of two sets of :func:`_gaussians` (in their dtype)."""
    x1, y1, a1, b1, c1, r1 = (v[:, None] for v in g1)
    x2, y2, a2, b2, c2, r2 = (v[None, :] for v in g2)
    # degenerate boxes (a side 0) give NaN or inf here: no overlap (NaN >= t is False)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        dx, dy = x1 - x2, y1 - y2
        sa, sb, sc = a1 + a2, b1 + b2, c1 + c2
        det = sa * sb - sc**2
        t1 = (sa * dy**2 + sb * dx**2) / (det + eps) * 0.25
        t2 = (sc * (-dx) * dy) / (det + eps) * 0.5
        t3 = 0.5 * np.log(det / (4 * r1 * r2 + eps) + eps)
        bd = np.clip(t1 + t2 + t3, eps, 100.0)
        return 1.0 - np.sqrt(1.0 - np.exp(-bd) + eps)


def probiou(b1: np.ndarray, b2: np.ndarray, eps: float = 1e-7) -> np.ndarray:
    """Probabilistic IoU [M, N] of oriented boxes (centre x, y, width, height, angle): one minus
    the Hellinger distance of their Gaussians (Llerena et al., arXiv:2106.06072), the measure
    Ultralytics' OBB NMS uses (float64)."""
    return _probiou_of(_gaussians(b1), _gaussians(b2), eps)


def rotated_nms(
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    threshold: float,
    max_det: int | None = None,
):
    """Fast-NMS (Bolya et al., arXiv:1904.02689) of oriented boxes, class-aware: a box goes when
    any better-scored box of its class overlaps it by ``threshold`` or more (probabilistic IoU).
    Indices kept, best first; with ``max_det``, the first ``max_det`` of them (each class stops
    once it has that many: a box's fate depends only on the boxes before it, so the answer is
    the same). Computed in blocks of rows against the boxes before them, in float32 (each box's
    Gaussian in float64 first): memory O(N x block), not N x N."""
    if not len(boxes):
        return np.zeros(0, np.int64)
    order = np.argsort(-np.asarray(scores), kind="stable")
    g = _gaussians(np.asarray(boxes)[order], np.float32)
    cls = np.asarray(classes)[order]
    keep = np.zeros(len(order), bool)
    for c in np.unique(cls):  # boxes of two classes never suppress each other
        at = np.flatnonzero(cls == c)
        keep[at] = _fast_nms(tuple(v[at] for v in g), threshold, max_det)
    return order[keep][:max_det]


_PAIRS = 1 << 20  # probabilistic IoUs a block of Fast-NMS computes (float32: 4 MB a temporary)


def _fast_nms(g: tuple, threshold: float, max_det: int | None) -> np.ndarray:
    """Which of one class's boxes (their :func:`_gaussians`, best first) no earlier box
    overlaps by ``threshold``: rows in blocks, each against the boxes up to its end."""
    n = len(g[0])
    keep = np.zeros(n, bool)
    step = max(1, _PAIRS // n)
    for s in range(0, n, step):
        e = min(n, s + step)
        iou = _probiou_of(tuple(v[:e] for v in g), tuple(v[s:e] for v in g), 1e-7)
        earlier = np.arange(e)[:, None] < np.arange(s, e)[None, :]
        keep[s:e] = ~((iou >= threshold) & earlier).any(axis=0)
        if max_det is not None and np.count_nonzero(keep[:e]) >= max_det:
            break
    return keep
