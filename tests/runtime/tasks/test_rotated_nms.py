"""The oriented boxes' NMS in blocks (round 6, G11: it built float64 N x N matrices per class,
8400 candidates of one class took 7.27 GB and seconds): the same boxes kept, in the same order,
as the N x N Fast-NMS it replaced (written out here as the reference) on random scenes, with
and without ``max_det``; the candidates beyond :data:`MAX_ROTATED_NMS` are the worst-scored.
Time and memory before and after: benchmarks/obb_nms.py."""

from __future__ import annotations

import numpy as np
import pytest

from edgert.runtime.tasks.heads import MAX_ROTATED_NMS, Head, decode_head, probiou, rotated_nms


def reference_nms(boxes, scores, classes, threshold):
    """The N x N Fast-NMS edgert had (float64, one matrix per class)."""
    order = np.argsort(-np.asarray(scores), kind="stable")
    b = np.asarray(boxes, np.float64)[order]
    cls = np.asarray(classes)[order]
    keep = np.zeros(len(order), bool)
    for c in np.unique(cls):
        at = np.flatnonzero(cls == c)
        overlap = np.triu(probiou(b[at], b[at]), k=1)
        keep[at] = (overlap >= threshold).sum(axis=0) == 0
    return order[keep]


def scene(seed: int, n: int, classes: int, clustered: bool):
    """n oriented boxes in a 640 image: uniform, or around 40 objects (many candidates each,
    as a head gives them), with scores, classes and angles in Ultralytics' range."""
    rng = np.random.default_rng(seed)
    if clustered:
        centres = rng.uniform(40, 600, (40, 2))[rng.integers(0, 40, n)]
        xy = centres + rng.normal(0, 4, (n, 2))
    else:
        xy = rng.uniform(20, 620, (n, 2))
    wh = rng.uniform(4, 90, (n, 2))
    angle = rng.uniform(-np.pi / 4, 3 * np.pi / 4, (n, 1))
    boxes = np.hstack([xy, wh, angle]).astype(np.float32)
    return boxes, rng.uniform(0.25, 1, n).astype(np.float32), rng.integers(0, classes, n)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("clustered", [False, True])
def test_the_same_boxes_as_the_square_matrix_fast_nms(seed, clustered):
    boxes, scores, classes = scene(seed, 1500, 1 + seed % 3, clustered)
    for threshold in (0.45, 0.7):
        want = reference_nms(boxes, scores, classes, threshold)
        assert rotated_nms(boxes, scores, classes, threshold).tolist() == want.tolist()
        got = rotated_nms(boxes, scores, classes, threshold, max_det=50)
        assert got.tolist() == want[:50].tolist()


def test_ties_and_a_box_over_every_other():
    boxes = np.tile(np.float32([[300, 300, 50, 30, 0.2]]), (3000, 1))  # all one box
    kept = rotated_nms(boxes, np.full(3000, 0.9), np.zeros(3000, int), 0.45, 300)
    assert kept.tolist() == [0]  # the first of the tie; every other one suppressed


def test_only_the_best_candidates_reach_the_nms():
    n = MAX_ROTATED_NMS + 500
    rng = np.random.default_rng(7)
    scores = rng.uniform(0.3, 1, n)
    # the worst 500 are where nothing else is: kept if they reached the NMS
    xy = np.where(scores[:, None] < np.sort(scores)[500], 5000.0, rng.uniform(20, 620, (n, 2)))
    out = np.vstack([xy.T, np.full((2, n), 20.0), scores[None], np.zeros((1, n))])[None]
    (found,) = decode_head(out.astype(np.float32), Head(), 1, 1, 0.25, 0.45, 10000, True)
    assert found.boxes[:, 0].max() < 1000
    assert found.scores.min() >= np.sort(scores)[500]


def test_memory_is_blocks_not_a_square_matrix():
    import tracemalloc

    n = MAX_ROTATED_NMS  # one class, every box the same: nothing stops early, all compared
    boxes = np.tile(np.float32([[300, 300, 50, 30, 0.2]]), (n, 1))
    tracemalloc.start()
    try:
        rotated_nms(boxes, np.full(n, 0.9), np.zeros(n, int), 0.45)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100e6, peak  # the square float64 matrices took 1.3 GB at this size
