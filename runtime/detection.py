"""Detection post-processing: YOLOv5 / v8 / v11 and SSD-style heads, class-aware NMS, boxes
mapped back to source-image pixels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import ShapeError
from .preprocess import Transform


@dataclass(frozen=True)
class Detection:
    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in source-image pixels
    score: float
    class_id: int
    label: str

    def to_dict(self) -> dict:
        return {
            "box": [round(v, 2) for v in self.box],
            "label": self.label,
            "score": round(self.score, 5),
            "class_id": self.class_id,
        }


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


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Greedy NMS; indices of kept boxes, highest score first."""
    order = np.argsort(-scores, kind="stable")
    boxes = boxes.astype(np.float64)
    keep = []
    while order.size:
        i = order[0]
        keep.append(i)
        if order.size == 1:
            break
        ious = box_iou(boxes[i : i + 1], boxes[order[1:]])[0]
        order = order[1:][ious <= iou_threshold]
    return np.asarray(keep, dtype=np.int64)


def batched_nms(
    boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou_threshold: float
) -> np.ndarray:
    """Class-aware NMS: boxes of different classes never suppress each other (offset trick)."""
    if boxes.size == 0:
        return np.zeros(0, dtype=np.int64)
    span = float(np.abs(boxes).max()) + 1.0
    shifted = boxes + (classes.astype(np.float64) * span * 2)[:, None]
    return nms(shifted, scores, iou_threshold)


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
    mask = scores >= conf
    boxes, scores, classes = boxes[mask], scores[mask], classes[mask]
    keep = batched_nms(boxes, scores, classes, iou)[:max_det]
    boxes, scores, classes = boxes[keep], scores[keep], classes[keep]
    if transform is not None:
        boxes = transform.to_source(boxes)
    return [
        Detection(
            tuple(float(v) for v in b),
            float(s),
            int(c),
            labels[int(c)] if labels and int(c) < len(labels) else str(int(c)),
        )
        for b, s, c in zip(boxes, scores, classes)
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
    if layout == "v8":
        output = output.transpose(0, 2, 1)
    results = []
    for i, pred in enumerate(output):
        boxes = xywh_to_xyxy(pred[:, :4])
        cls_scores = pred[:, 5:] * pred[:, 4:5] if layout == "v5" else pred[:, 4:]
        classes = cls_scores.argmax(axis=1)
        scores = cls_scores[np.arange(len(pred)), classes]
        t = transforms[i] if transforms else None
        results.append(_finish(boxes, scores, classes, conf, iou, max_det, t, labels))
    return results


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
