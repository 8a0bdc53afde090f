"""The build's detector metric (issue 49): mAP50 and mAP50-95 of a candidate's boxes against FP32's
(or the labels), COCO's evaluation; checked on cases worked by hand and against pycocotools itself
(COCO's reference implementation) where it is installed."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from edgert.quantize.box_map import mean_average_precision


def test_identical_boxes_score_one_and_a_missed_class_counts_zero():
    boxes = np.array([[0, 0, 10, 10], [20, 20, 40, 40]], float)
    ref = [(boxes, [0, 1])]
    assert mean_average_precision(ref, [(boxes, [0.9, 0.8], [0, 1])]) == {
        "map50": 1.0,
        "map50_95": 1.0,
        "classes": 2,
    }
    half = mean_average_precision(ref, [(boxes[:1], [0.9], [0])])  # class 1 never found
    assert half["map50"] == pytest.approx(0.5) and half["map50_95"] == pytest.approx(0.5)
    nothing = mean_average_precision([(np.zeros((0, 4)), [])], [(boxes, [0.9, 0.8], [0, 1])])
    assert nothing["classes"] == 0  # no reference box: nothing judged


def test_a_box_shifted_counts_at_the_thresholds_its_iou_passes():
    """IoU 0.8 (a 10 x 10 box moved 1.11 px in x): a true positive at 0.50..0.80, a miss above,
    so mAP50-95 is 7/10; a wrongly ranked false positive lowers precision where it comes first."""
    ref = [(np.array([[0, 0, 10, 10]], float), [0])]
    dx = 10 * (1 - 0.8) / (1 + 0.8)  # IoU (10 - dx) / (10 + dx) = 0.8
    got = [(np.array([[dx, 0, 10 + dx, 10]]), [0.9], [0])]
    m = mean_average_precision(ref, got)
    assert m["map50"] == 1.0 and m["map50_95"] == pytest.approx(0.7)
    # a false positive scored above the true one: precision 1/2 at full recall
    worse = [(np.array([[50, 50, 60, 60], [0, 0, 10, 10]], float), [0.95, 0.9], [0, 0])]
    assert mean_average_precision(ref, worse)["map50"] == pytest.approx(0.5)
    # ... and below it: the ranking hides it
    better = [(np.array([[50, 50, 60, 60], [0, 0, 10, 10]], float), [0.5, 0.9], [0, 0])]
    assert mean_average_precision(ref, better)["map50"] == 1.0


def _random_case(rng, images: int = 30):
    ref, got = [], []
    for _ in range(images):
        m = int(rng.integers(0, 6))
        xy = rng.uniform(0, 200, (m, 2))
        rb = np.concatenate([xy, xy + rng.uniform(10, 80, (m, 2))], 1)
        rc = rng.integers(0, 3, m)
        seen = rng.random(m) < 0.85
        jb = rb[seen] + rng.normal(0, rng.uniform(0.5, 8), (int(seen.sum()), 4))
        jb = np.concatenate(
            [np.minimum(jb[:, :2], jb[:, 2:] - 1), np.maximum(jb[:, 2:], jb[:, :2] + 1)], 1
        )
        k = int(rng.integers(0, 4))
        fxy = rng.uniform(0, 200, (k, 2))
        fb = np.concatenate([fxy, fxy + rng.uniform(10, 80, (k, 2))], 1)
        gb = np.concatenate([jb, fb])
        gc = np.concatenate([rc[seen], rng.integers(0, 3, k)])
        ref.append((rb, rc))
        got.append((gb, rng.uniform(0.05, 1, len(gb)), gc))
    return ref, got


def _pycocotools(ref, got) -> tuple:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    images, anns, dets = [], [], []
    for i, ((rb, rc), (gb, gs, gc)) in enumerate(zip(ref, got, strict=True)):
        images.append({"id": i + 1, "width": 300, "height": 300})
        for b, c in zip(rb, rc, strict=True):
            w, h = b[2] - b[0], b[3] - b[1]
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": i + 1,
                    "category_id": int(c) + 1,
                    "bbox": [b[0], b[1], w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
        for b, c, s in zip(gb, gc, gs, strict=True):
            dets.append(
                {
                    "image_id": i + 1,
                    "category_id": int(c) + 1,
                    "score": float(s),
                    "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]],
                }
            )
    gt = COCO()
    gt.dataset = {
        "images": images,
        "annotations": anns,
        "categories": [{"id": c} for c in (1, 2, 3)],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(dets), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return ev.stats[1], ev.stats[0]


def test_equals_pycocotools_on_random_scenes():
    pytest.importorskip(
        "pycocotools", reason="pycocotools (COCO's own evaluation) is not installed"
    )
    rng = np.random.default_rng(1)
    for _ in range(8):
        ref, got = _random_case(rng)
        map50, map50_95 = _pycocotools(ref, got)
        mine = mean_average_precision(ref, got)
        assert mine["map50"] == pytest.approx(map50, abs=1e-9)
        assert mine["map50_95"] == pytest.approx(map50_95, abs=1e-9)
