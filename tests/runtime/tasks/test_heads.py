"""The heads of issue 48's tasks, on outputs written here with known answers: the YOLO form
(thresholds, NMS, extras), end-to-end rows, DETR queries, oriented boxes (probabilistic IoU and
Fast-NMS as Ultralytics' OBB predictor), instance masks from prototypes, and the manifest's
``head`` section from someone else's machine. Parity with Ultralytics' predictor on real exports:
tests/ultralytics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgert.runtime.errors import BundleError, ShapeError
from edgert.runtime.tasks.heads import Head, decode_head, probiou, rotated_nms
from edgert.runtime.tasks.instances import masks_of
from edgert.runtime.tasks.obb import corners


def _yolo(rows):
    """Candidates (one per row) -> a YOLO output [1, C, N]."""
    return np.asarray(rows, np.float32).T[None]


def test_yolo_form_thresholds_suppresses_and_carries_each_candidates_extras():
    out = _yolo(
        [
            [50, 50, 20, 20, 0.9, 0.1, 7, 8],  # kept: the best of its class
            [51, 50, 20, 20, 0.8, 0.1, 1, 1],  # IoU 0.9 with the first, same class: suppressed
            [51, 50, 20, 20, 0.1, 0.7, 2, 3],  # the same place, another class: kept
            [10, 10, 4, 4, 0.2, 0.1, 0, 0],  # under the threshold
        ]
    )
    (found,) = decode_head(out, Head(), 2, 2, conf=0.25, iou=0.45)
    assert found.scores.tolist() == pytest.approx([0.9, 0.7])
    assert found.classes.tolist() == [0, 1]
    assert found.boxes[0].tolist() == pytest.approx([40, 40, 60, 60])
    assert found.extras.tolist() == [[7, 8], [2, 3]]
    with pytest.raises(ShapeError, match="4 \\+ 3 classes \\+ 2"):
        decode_head(out, Head(), 3, 2, conf=0.25, iou=0.45)


def test_end_to_end_rows_are_the_models_choice_and_detr_queries_its_best_class():
    rows = np.array([[[1, 2, 3, 4, 0.9, 1, 5, 6], [1, 2, 3, 4, 0.2, 0, 0, 0]]], np.float32)
    (found,) = decode_head(rows, Head("end2end"), 2, 2, conf=0.25, iou=0.45)
    assert found.boxes.tolist() == [[1, 2, 3, 4]] and found.extras.tolist() == [[5, 6]]
    queries = np.array(
        [[[0.5, 0.5, 0.2, 0.4, 0.1, 0.8], [0.1, 0.1, 0.1, 0.1, 0.3, 0.1]]], np.float32
    )
    (found,) = decode_head(queries, Head("detr"), 2, 0, conf=0.25, iou=0.45)
    assert found.classes.tolist() == [1, 0] and found.scores.tolist() == pytest.approx([0.8, 0.3])
    assert found.boxes[0].tolist() == pytest.approx([0.4, 0.3, 0.6, 0.7])  # normalised x1y1x2y2


def test_probiou_and_the_oriented_boxes_nms():
    a = np.array([[50, 50, 40, 10, 0.0]])
    assert probiou(a, a)[0, 0] == pytest.approx(1.0, abs=1e-3)
    turned = np.array([[50, 50, 40, 10, math.pi / 2]])  # a cross: overlaps only in the middle
    assert probiou(a, turned)[0, 0] < 0.5
    same_turned = np.array([[50, 50, 10, 40, math.pi / 2 + math.pi / 2]])
    assert probiou(turned, same_turned)[0, 0] > 0.99  # w/h swapped and turned 90 degrees
    boxes = np.array([[50, 50, 40, 10, 0.0], [51, 50, 40, 10, 0.02], [50, 50, 40, 10, 0.0]])
    kept = rotated_nms(boxes, np.array([0.9, 0.8, 0.7]), np.array([0, 0, 1]), 0.45)
    assert sorted(kept.tolist()) == [0, 2]
    pts = corners(np.array([[10, 20, 4, 2, math.pi / 2]]))[0]
    assert np.round(pts, 6).tolist() == [[9.0, 22.0], [11.0, 22.0], [11.0, 18.0], [9.0, 18.0]]


def test_instance_masks_are_cropped_to_their_box_and_empty_ones_are_none():
    protos = np.ones((2, 8, 8), np.float32)
    protos[1] = -1
    boxes = np.array([[8, 8, 24, 16], [0, 0, 32, 32]], np.float32)  # input 32 x 32: 4 px / proto
    masks = masks_of(protos, np.array([[1.0, 0.0], [0.0, 1.0]]), boxes, (32, 32))
    full = masks[0].full()
    assert masks[1] is None  # its coefficients give a negative mask: nothing
    ys, xs = np.nonzero(full)
    assert (ys.min(), ys.max(), xs.min(), xs.max()) == pytest.approx((7, 16, 7, 24), abs=2)
    # the 4 x 2 prototype pixels inside the box, upsampled bilinearly: up to half a prototype
    # pixel (2 input pixels) past each side is still above 0, as in Ultralytics' predictor
    assert 16 * 8 <= masks[0].area <= 20 * 12


def test_a_head_section_from_elsewhere_is_checked():
    assert Head.from_dict({"form": "end2end", "kpt_shape": [17, 3]}).kpt_shape == (17, 3)
    for bad, said in (
        ({"form": "magic"}, "head.form"),
        ({"kpt_shape": [17, 9]}, "kpt_shape"),
        ({"kpt_shape": "17x3"}, "kpt_shape"),
        ([1, 2], "must be an object"),
    ):
        with pytest.raises(BundleError, match=said):
            Head.from_dict(bad)
