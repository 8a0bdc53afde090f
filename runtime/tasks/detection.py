"""Detection post-processing: YOLOv5 / v8 / v11 and SSD-style heads, class-aware NMS, boxes
mapped back to source-image pixels."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from ..images.preprocess import Transform
from ..results import Detection  # also detection.Detection, where it was first

log = logging.getLogger(__name__)

# A box coordinate past this (model-input pixels; inputs are at most 8192 a side) is no box: a
# broken output (FP16 overflow, an untrained head), dropped with the non-finite ones
COORD_LIMIT = 1e6
_dropped = {"count": 0, "said": set()}
_dropped_lock = threading.Lock()


def sound_rows(values: np.ndarray, box_columns: int = 4) -> np.ndarray:
    """bool [M] of candidates [M, V]: every value finite and the first ``box_columns`` (the
    box) within +-:data:`COORD_LIMIT`. Non-finite values are tested first, so numpy never
    compares or casts a NaN (no RuntimeWarning on stderr)."""
    values = np.asarray(values)  # [M, V]
    ok = np.isfinite(values).all(axis=1)
    ok[ok] = (np.abs(values[ok, :box_columns]) <= COORD_LIMIT).all(axis=1)
    return ok


def dropped(
    count: int,
    why: str = "NaN, infinite or out-of-range values",
    what: str = "candidate object(s)",
) -> None:
    """Count candidates a decoder dropped as broken (``why``), and say so once per reason: the
    model's output is wrong (an FP16 engine that overflows, an untrained head), not the scene."""
    if not count:
        return
    with _dropped_lock:
        _dropped["count"] += count
        first = why not in _dropped["said"]
        _dropped["said"].add(why)
    if first:
        log.warning(
            "dropped %d %s with %s: the model's output is broken there "
            "(warned once; later ones are dropped and counted silently)",
            count,
            what,
            why,
        )


def dropped_count() -> int:
    """How many candidates the decoders dropped as broken in this process (:func:`dropped`)."""
    return _dropped["count"]


def keep_sound(values: np.ndarray, box_columns: int = 4) -> np.ndarray:
    """:func:`sound_rows`, the others counted and said (:func:`dropped`)."""
    ok = sound_rows(values, box_columns)
    dropped(int(len(ok) - ok.sum()))
    return ok


def xywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    out = np.empty_like(b)
    out[..., 0] = b[..., 0] - b[..., 2] / 2
    out[..., 1] = b[..., 1] - b[..., 3] / 2
    out[..., 2] = b[..., 0] + b[..., 2] / 2
    out[..., 3] = b[..., 1] + b[..., 3] / 2
    return out


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix between boxes a [N, 4] and b [M, 4] (x1, y1, x2, y2)."""
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = np.clip(rb - lt, 0, None)
    inter = wh[..., 0] * wh[..., 1]
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def nms(
    boxes: np.ndarray, scores: np.ndarray, threshold: float, overlap: str = "iou"
) -> np.ndarray:
    """Greedy NMS: indices of kept boxes (x1, y1, x2, y2), highest score first; a box is dropped
    when its overlap with a kept one exceeds ``threshold``. ``overlap="iou"`` runs OpenCV's
    ``cv2.dnn.NMSBoxes`` (C++, the same greedy rule; several times faster than numpy);
    ``overlap="min"`` is intersection over the smaller box, with MTCNN's +1 pixel areas."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if not len(boxes):
        return np.zeros(0, dtype=np.int64)
    finite = np.isfinite(boxes).all(axis=1) & np.isfinite(scores)
    if not finite.all():  # a NaN or infinite box is never kept, nor suppresses another
        at = np.flatnonzero(finite)
        return at[nms(boxes[at], scores[at], threshold, overlap)]
    if overlap == "iou":
        import cv2

        # a box whose corners cross (a random or untrained head's) overlaps nothing, as in
        # torchvision's and Ultralytics' NMS: width and height 0, not OpenCV's reading of them
        xywh = np.column_stack([boxes[:, :2], np.maximum(boxes[:, 2:] - boxes[:, :2], 0)])
        # OpenCV keeps scores above a threshold >= 0: lift non-positive scores, keeping the order
        s = scores if scores.min() > 0 else scores - scores.min() + 1.0
        kept = cv2.dnn.NMSBoxes(xywh, s, 0.0, float(threshold))
        return np.asarray(kept, dtype=np.int64).reshape(-1)
    if overlap != "min":
        raise ValueError(f"overlap must be 'iou' or 'min', not {overlap!r}")
    order = np.argsort(-scores, kind="stable")
    area = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    keep = []
    while order.size:
        i = order[0]
        keep.append(i)
        rest = order[1:]
        lt = np.maximum(boxes[i, :2], boxes[rest, :2])
        rb = np.minimum(boxes[i, 2:], boxes[rest, 2:])
        inter = np.prod(np.clip(rb - lt + 1, 0, None), axis=1)
        order = rest[inter / np.minimum(area[i], area[rest]) <= threshold]
    return np.asarray(keep, dtype=np.int64)


def batched_nms(
    boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou_threshold: float
) -> np.ndarray:
    """Class-aware NMS: boxes of different classes never suppress each other. Each class on its
    own (no offset of max|box| per class: one huge box would wipe out the other classes'
    coordinates); the indices kept, best first, ties in index order (as one NMS of them all)."""
    scores = np.asarray(scores)
    if len(scores) == 0:
        return np.zeros(0, dtype=np.int64)
    classes = np.asarray(classes)
    by_class = np.argsort(classes, kind="stable")
    starts = np.flatnonzero(np.diff(classes[by_class])) + 1
    kept = [at[nms(boxes[at], scores[at], iou_threshold)] for at in np.split(by_class, starts)]
    keep = np.sort(np.concatenate(kept))
    return keep[np.argsort(-scores[keep], kind="stable")]


def _finish(
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    conf: float,
    iou: float,
    max_det: int,
    transform: Transform | None,
    labels: Sequence[str] | None,
) -> list[Detection]:
    with np.errstate(invalid="ignore"):  # a NaN score is under any threshold
        mask = scores >= conf
    boxes, scores, classes = boxes[mask], scores[mask], classes[mask]
    ok = keep_sound(np.column_stack([boxes, scores]))
    boxes, scores, classes = boxes[ok], scores[ok], classes[ok]
    keep = batched_nms(boxes, scores, classes, iou)[:max_det]
    boxes, scores, classes = boxes[keep], scores[keep], classes[keep]
    if transform is not None:
        boxes = transform.to_source(boxes)
    # Python numbers for all of them at once (tolist), not a numpy scalar per field and object
    names = list(labels or ())
    return [
        Detection(tuple(b), s, c, names[c] if 0 <= c < len(names) else str(c))
        for b, s, c in zip(
            boxes.tolist(),
            np.asarray(scores, np.float64).tolist(),
            np.asarray(classes).astype(np.int64).tolist(),
        )
    ]


def yolo_layout(shape: tuple[int, ...], num_classes: int | None) -> str:
    """'v5' ([N, anchors, 5 + nc], objectness) or 'v8' ([N, 4 + nc, anchors], v8 and v11 heads)."""
    if len(shape) != 3:
        raise ShapeError(f"a YOLO head output must be [batch, ., .]; got {list(shape)}")
    _, a, b = shape
    if num_classes is not None:
        if b == 5 + num_classes:
            return "v5"
        if a == 4 + num_classes:
            return "v8"
        if b == 4 + num_classes:
            return "v8-transposed"
        raise ShapeError(f"output {list(shape)} matches no YOLO layout for {num_classes} classes")
    return "v8" if a < b else "v5"


def decode_yolo(
    output: np.ndarray,
    conf: float = 0.25,
    iou: float = 0.45,
    max_det: int = 300,
    transforms: Sequence[Transform | None] | None = None,
    labels: Sequence[str] | None = None,
    num_classes: int | None = None,
) -> list[list[Detection]]:
    """Decode a YOLOv5/v8/v11 head (boxes as centre x, y, width, height in input pixels)."""
    output = np.asarray(output, dtype=np.float32)
    nc = num_classes if num_classes is not None else (len(labels) if labels else None)
    layout = yolo_layout(output.shape, nc)
    results = []
    for i, pred in enumerate(output):
        t = transforms[i] if transforms else None
        if layout == "v5":
            # NaN and inf (an FP16 engine's overflow) go through the arithmetic silently;
            # _finish drops every candidate they reach
            with np.errstate(invalid="ignore", over="ignore"):
                cls_scores = pred[:, 5:] * pred[:, 4:5]
            boxes, classes = pred[:, :4], cls_scores.argmax(axis=1)
            scores = cls_scores[np.arange(len(pred)), classes]
        else:  # v8: the anchors under the threshold are left out before anything else
            boxes, scores, classes = _v8_candidates(pred, layout == "v8", conf)
        with np.errstate(invalid="ignore", over="ignore"):
            boxes = xywh_to_xyxy(boxes)
        results.append(_finish(boxes, scores, classes, conf, iou, max_det, t, labels))
    return results


def _v8_candidates(pred: np.ndarray, by_row: bool, conf: float) -> tuple:
    """(boxes cx, cy, w, h, best score, its class) of the anchors of a v8 head ``pred`` ([4 + nc,
    anchors] when ``by_row``, else [anchors, 4 + nc]) whose best class score reaches ``conf``
    (a NaN score: none). The best score of every anchor is one contiguous reduction; boxes and
    the class's index only for those kept (a quiet scene keeps a handful of 8,400): the same
    candidates, in the same order, as every anchor's argmax would give."""
    cls = pred[4:] if by_row else pred[:, 4:]
    axis = 0 if by_row else 1
    with np.errstate(invalid="ignore"):
        best = cls.max(axis=axis)  # NaN propagates: under any threshold
        keep = np.flatnonzero(best >= conf)
    if by_row:
        return pred[:4, keep].T, best[keep], cls[:, keep].argmax(axis=0)
    return pred[keep, :4], best[keep], cls[keep].argmax(axis=1)


def decode_ssd(
    boxes: np.ndarray,
    scores: np.ndarray,
    conf: float = 0.25,
    iou: float = 0.45,
    max_det: int = 300,
    input_size: tuple[int, int] | None = None,
    transforms: Sequence[Transform | None] | None = None,
    labels: Sequence[str] | None = None,
    background: int | None = 0,
) -> list[list[Detection]]:
    """Decode an SSD-style pair: boxes [N, K, 4] (x1, y1, x2, y2; normalised 0..1 when
    ``input_size`` (h, w) is given) and per-class scores [N, K, C]. ``background`` is the index of
    the background class to ignore (None when there is none)."""
    boxes = np.asarray(boxes, dtype=np.float32)
    scores = np.asarray(scores, dtype=np.float32)
    if (
        boxes.ndim != 3
        or boxes.shape[-1] != 4
        or scores.ndim != 3
        or scores.shape[:2] != boxes.shape[:2]
    ):
        raise ShapeError(
            f"SSD outputs must be boxes [N, K, 4] and scores [N, K, C]; got {list(boxes.shape)} and {list(scores.shape)}"
        )
    results = []
    for i in range(boxes.shape[0]):
        b = boxes[i].copy()
        if input_size is not None:
            h, w = input_size
            with np.errstate(over="ignore"):  # inf: dropped in _finish
                b[:, [0, 2]] *= w
                b[:, [1, 3]] *= h
        s = scores[i].copy()
        if background is not None:
            s[:, background] = -np.inf
        classes = s.argmax(axis=1)
        best = s[np.arange(len(s)), classes]
        t = transforms[i] if transforms else None
        results.append(_finish(b, best, classes, conf, iou, max_det, t, labels))
    return results


def decode_detections(
    outputs: Sequence[np.ndarray],
    conf: float = 0.25,
    iou: float = 0.45,
    transforms: Sequence[Transform | None] | None = None,
    labels: Sequence[str] | None = None,
    input_size: tuple[int, int] | None = None,
    num_classes: int | None = None,
) -> list[list[Detection]]:
    """A detector's outputs -> detections per image: an SSD-style pair (boxes [N, K, 4] and scores
    [N, K, C]; boxes normalised 0..1 are scaled by ``input_size`` (h, w)) or one YOLOv5/v8/v11
    head. The one place that tells the two apart."""
    values = list(outputs)
    if len(values) == 2:
        boxes, scores = sorted(values, key=lambda v: v.shape[-1] != 4)
        finite = boxes[np.isfinite(boxes)]  # one NaN would make every box look unnormalised
        normalised = input_size if float(np.max(finite, initial=0)) <= 1.5 else None
        return decode_ssd(
            boxes, scores, conf, iou, input_size=normalised, transforms=transforms, labels=labels
        )
    if len(values) != 1:
        raise ShapeError(
            f"a detector has one YOLO output or two SSD outputs (boxes, scores); this one has {len(values)}"
        )
    return decode_yolo(
        values[0], conf, iou, transforms=transforms, labels=labels, num_classes=num_classes
    )


def greedy_pairs(similarity: np.ndarray, min_similarity: float = 0.5) -> list:
    """Pairs (i, j) of rows and columns of a similarity matrix (IoU, OKS; 0 where two must not
    pair), greedily, the rows with the best similarity first, each column used once, at
    ``min_similarity`` or more."""
    sim = np.asarray(similarity, np.float64)
    if not sim.size:
        return []
    used: set[int] = set()
    pairs = []
    for i in np.argsort(-sim.max(axis=1), kind="stable"):
        j = int(sim[i].argmax())
        if sim[i, j] >= min_similarity and j not in used:
            used.add(j)
            pairs.append((int(i), j))
    return pairs


def matched_pairs(boxes_a, classes_a, boxes_b, classes_b, min_iou: float = 0.5) -> list:
    """The pairs (i, j) of boxes of ``a`` and ``b`` (x1, y1, x2, y2) of the same class at IoU >=
    ``min_iou``, greedily (:func:`greedy_pairs`)."""
    if not len(boxes_a) or not len(boxes_b):
        return []
    iou = box_iou(np.asarray(boxes_a, np.float64), np.asarray(boxes_b, np.float64))
    same = np.asarray(classes_a)[:, None] == np.asarray(classes_b)[None, :]
    return greedy_pairs(np.where(same, iou, 0), min_iou)


def matched_boxes(boxes_a, classes_a, boxes_b, classes_b, min_iou: float = 0.5) -> int:
    """How many boxes of ``a`` (x1, y1, x2, y2) pair with a box of ``b`` of the same class at IoU
    >= ``min_iou``, greedily, the best-overlapping first, each box of ``b`` used once."""
    return len(matched_pairs(boxes_a, classes_a, boxes_b, classes_b, min_iou))
