"""NMS against a brute-force reference, YOLO and SSD decoding on constructed tensors, box mapping."""

from __future__ import annotations

import numpy as np
import pytest

from edgert.runtime import Preprocessing, ShapeError
from edgert.runtime.tasks.detection import (
    batched_nms,
    box_iou,
    decode_ssd,
    decode_yolo,
    nms,
    yolo_layout,
)
from edgert.runtime.tasks.postprocess import mask_to_source, segment


def brute_force_nms(boxes, scores, thr):
    """The definition, written as plainly as possible: visit by score, keep if no kept box overlaps."""
    kept = []
    for i in sorted(range(len(boxes)), key=lambda k: (-scores[k], k)):
        ok = True
        for j in kept:
            x1, y1 = max(boxes[i][0], boxes[j][0]), max(boxes[i][1], boxes[j][1])
            x2, y2 = min(boxes[i][2], boxes[j][2]), min(boxes[i][3], boxes[j][3])
            inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
            area = lambda b: (b[2] - b[0]) * (b[3] - b[1])  # noqa: E731
            if inter / (area(boxes[i]) + area(boxes[j]) - inter) > thr:
                ok = False
                break
        if ok:
            kept.append(i)
    return kept


@pytest.mark.parametrize("seed", range(8))
def test_nms_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 100, (60, 2))
    wh = rng.uniform(5, 40, (60, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1)
    scores = rng.uniform(0, 1, 60)
    for thr in (0.3, 0.5, 0.7):
        assert nms(boxes, scores, thr).tolist() == brute_force_nms(
            boxes.tolist(), scores.tolist(), thr
        )


def test_class_aware_nms_keeps_overlapping_boxes_of_other_classes():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [0, 0, 10, 10]], np.float32)
    scores = np.array([0.9, 0.8, 0.7])
    classes = np.array([0, 0, 1])
    assert sorted(batched_nms(boxes, scores, classes, 0.5).tolist()) == [0, 2]
    assert box_iou(boxes[:1], boxes[:1])[0, 0] == pytest.approx(1.0)


def yolo_v8_tensor(nc=3, anchors=50):
    """[1, 4 + nc, anchors]: two real objects (class 2 at 100,80 and class 0 at 40,40), a duplicate
    of the first with a lower score, and low-score noise."""
    out = np.zeros((1, 4 + nc, anchors), np.float32)
    out[0, :4, :] = np.array([[10], [10], [4], [4]])
    out[0, 4:, :] = 0.01
    out[0, :, 0] = [100, 80, 40, 20, 0.0, 0.0, 0.9]
    out[0, :, 1] = [101, 81, 40, 20, 0.0, 0.0, 0.8]  # same object, suppressed
    out[0, :, 2] = [40, 40, 10, 10, 0.7, 0.0, 0.0]
    return out


def test_yolo_v8_decode_and_map_back():
    pre = Preprocessing(size=(160, 160), resize="letterbox")
    _, t = pre.apply(np.zeros((80, 320, 3), np.uint8))  # scale 0.5, 60 px padding on top
    dets = decode_yolo(
        yolo_v8_tensor(), conf=0.25, iou=0.5, transforms=[t], labels=["cat", "dog", "bird"]
    )[0]
    assert [(d.label, round(d.score, 2)) for d in dets] == [("bird", 0.9), ("cat", 0.7)]
    x1, y1, x2, y2 = dets[0].box
    # model box (80, 70)-(120, 90) -> source: x / 0.5, (y - 60) / 0.5
    assert (x1, y1, x2, y2) == pytest.approx((160, 20, 240, 60), abs=1e-3)


def test_yolo_v5_decode_uses_objectness():
    out = np.zeros((1, 20, 5 + 2), np.float32)
    out[0, :, :4] = [50, 50, 10, 10]
    out[0, 0] = [50, 50, 20, 20, 0.9, 0.1, 0.8]  # 0.72 for class 1
    out[0, 1] = [10, 10, 4, 4, 0.2, 0.9, 0.1]  # 0.18: under the threshold
    dets = decode_yolo(out, conf=0.25, num_classes=2)[0]
    assert len(dets) == 1 and dets[0].class_id == 1 and dets[0].score == pytest.approx(0.72)
    assert dets[0].box == pytest.approx((40, 40, 60, 60))
    assert yolo_layout((1, 84, 8400), 80) == "v8" and yolo_layout((1, 25200, 85), 80) == "v5"
    with pytest.raises(ShapeError):
        yolo_layout((1, 10, 10), 80)


def test_ssd_decode_normalised_boxes_and_background():
    boxes = np.array(
        [[[0.1, 0.1, 0.5, 0.5], [0.12, 0.1, 0.5, 0.5], [0.6, 0.6, 0.9, 0.9]]], np.float32
    )
    scores = np.array([[[0.05, 0.9, 0.05], [0.1, 0.85, 0.05], [0.95, 0.02, 0.03]]], np.float32)
    dets = decode_ssd(
        boxes, scores, conf=0.3, input_size=(100, 200), labels=["bg", "person", "car"]
    )[0]
    # the third box is background: ignored; the second is a duplicate of the first
    assert [d.label for d in dets] == ["person"]
    assert dets[0].box == pytest.approx((20, 10, 100, 50))
    with pytest.raises(ShapeError):
        decode_ssd(np.zeros((1, 3, 5)), np.zeros((1, 3, 2)))


def test_segmentation_mask_back_to_source():
    logits = np.zeros((1, 3, 4, 4), np.float32)
    logits[0, 2, :2, :] = 1.0  # top half class 2
    logits[0, 1, 2:, :] = 1.0  # bottom half class 1
    mask = segment(logits)[0]
    assert mask.tolist()[0] == [2, 2, 2, 2] and mask.tolist()[3] == [1, 1, 1, 1]
    _, t = Preprocessing(size=(4, 4), resize="stretch").apply(np.zeros((8, 12, 3), np.uint8))
    src = mask_to_source(mask, t)
    assert src.shape == (8, 12)
    assert (src[:4] == 2).all() and (src[4:] == 1).all()
