"""The gate's detector metric: boxes of FP32 and of the quantized model paired by class and IoU."""

from __future__ import annotations

import numpy as np

from edgert.quantize import gate


def test_matched_boxes_pairs_by_class_and_overlap_once_each():
    a = [[0, 0, 10, 10], [20, 20, 30, 30], [0, 0, 10, 10], [50, 50, 60, 60]]
    b = [[1, 1, 10, 10], [20, 20, 30, 30], [50, 50, 52, 52]]
    # box 0 and box 2 of a both overlap b's box 0 (IoU 0.81): it is used once; the class-1 box
    # pairs only with the class-1 box; a's last box overlaps b's last by 0.04 only
    assert gate.matched_boxes(a, [0, 1, 0, 2], b, [0, 1, 2]) == 2
    assert gate.matched_boxes(a, [0, 1, 0, 2], b, [1, 0, 2]) == 0  # right places, wrong classes
    assert gate.matched_boxes([], [], b, [0, 1, 2]) == 0
    assert gate.matched_boxes(a[:1], [0], b[:1], [0], min_iou=0.9) == 0


def _yolo_v8(boxes, scores) -> np.ndarray:
    """[1, 4 + classes, anchors]: centre x, y, width, height rows, then a score row per class;
    padded with empty anchors (a head has many more anchors than rows)."""
    head = np.concatenate([np.asarray(boxes, np.float32).T, np.asarray(scores, np.float32).T])
    return np.pad(head, ((0, 0), (0, 16 - head.shape[1])))[None]


def test_box_f1_of_a_yolo_head():
    boxes = [[20, 20, 10, 10], [60, 60, 16, 16], [100, 30, 12, 12]]
    scores = [[0.9, 0.1], [0.1, 0.8], [0.7, 0.2]]
    ref = {"out": _yolo_v8(boxes, scores)}
    same = gate.evaluate(ref, {"out": _yolo_v8(boxes, scores)}, "detect")
    assert same.metrics["box_f1"] == 1.0
    moved = [boxes[0], [80, 80, 16, 16], boxes[2]]  # one box moved off its place
    flipped = [scores[0], scores[1], [0.2, 0.7]]  # one box's class changed
    ev = gate.evaluate(ref, {"out": _yolo_v8(moved, flipped)}, "detect")
    assert ev.metrics["box_f1"] == 2 * 1 / (3 + 3)
