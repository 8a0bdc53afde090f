"""Heads whose outputs hold NaN, inf or absurd values (round 6, G4/G6): such a candidate is
dropped before NMS (it never takes valid objects with it, of its class or another), an
end-to-end class that is not a whole number in 0..nc-1 is no object, and numpy says nothing on
stderr (warnings are errors here). The same through the CLI and the camera:
tests/apps/test_non_finite_heads.py."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from edgert.runtime.tasks.detection import batched_nms, decode_detections, dropped_count
from edgert.runtime.tasks.heads import Head, decode_head

nan, inf = np.nan, np.inf


@pytest.fixture(autouse=True)
def _numpy_warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _yolo(rows):
    """Candidates (one per row) -> a YOLO output [1, C, N]."""
    return np.asarray(rows, np.float32).T[None]


def _detect(rows, conf=0.25):
    (dets,) = decode_detections([_yolo(rows)], conf=conf, num_classes=2, labels=["a", "b"])
    return [(d.label, round(d.score, 2), [round(v) for v in d.box]) for d in dets]


VALID = [
    [100, 100, 50, 50, 0.9, 0],
    [300, 300, 50, 50, 0.8, 0],
    [500, 500, 50, 50, 0.7, 0],
    [200, 500, 50, 50, 0, 0.6],
]
WANT = [
    ("a", 0.9, [75, 75, 125, 125]),
    ("a", 0.8, [275, 275, 325, 325]),
    ("a", 0.7, [475, 475, 525, 525]),
    ("b", 0.6, [175, 475, 225, 525]),
]


@pytest.mark.parametrize(
    "bad",
    [
        [nan, 200, 50, 50, 0.85, 0],  # the review's nan2: 4 objects became 1
        [400, 400, 50, inf, 0, 0.3],  # class 1, h = inf
        [inf, 100, 50, 50, 0.95, 0],  # x = inf
        [-inf, 100, 50, 50, 0.95, 0],
        [1e30, 100, 50, 50, 0.95, 0],  # huge but finite: out of any image
        [400, 100, 1e38, 50, 0.95, 0],
        [400, 100, 50, 50, inf, 0],  # an infinite score is no score
        [400, 100, 50, 50, 0.95, nan],
    ],
)
def test_one_bad_yolo_candidate_takes_no_valid_object_with_it(bad):
    assert _detect([*VALID[:3], bad, VALID[3]]) == WANT


def test_a_huge_box_of_one_class_leaves_the_other_class_alone():
    # batched NMS on its own (it is handed boxes already checked): the class offset was
    # max|box| + 1, and 1e30 wiped out every other box's coordinates in float64
    boxes = np.array([[75, 75, 125, 125], [1e30, 75, 1e30 + 50, 125], [75, 75, 125, 125]])
    boxes = np.vstack([boxes, [[375, 75, 425, 125]]])
    kept = batched_nms(boxes, np.array([0.9, 0.8, 0.7, 0.6]), np.array([0, 0, 1, 1]), 0.45)
    assert kept.tolist() == [0, 1, 2, 3]


def test_the_same_for_every_yolo_form_head():
    # pose: box, 1 class, 2 keypoints x (x, y, v)
    pose = [[100, 100, 50, 50, 0.9, 90, 90, 1, 110, 110, 1]]
    pose += [[100, 300, 50, 50, 0.8, 90, 290, 1, nan, 310, 1]]
    pose += [[300, 300, 50, 50, 0.7, 290, 290, 1, 310, 310, 1]]
    before = dropped_count()
    (found,) = decode_head(_yolo(pose), Head(kpt_shape=(2, 3)), 1, 6, 0.25, 0.45)
    assert found.scores.tolist() == pytest.approx([0.9, 0.7])
    assert np.isfinite(found.extras).all()
    assert dropped_count() == before + 1  # counted (and said once a process: the CLI's tests)
    # oriented boxes: centre, sides, 2 classes, angle last
    obb = [
        [100, 100, 50, 30, 0.9, 0, 0.3],
        [300, 300, 50, 30, 0.95, 0, nan],  # a NaN angle
        [nan, 300, 50, 30, 0.95, 0, 0.1],  # a NaN centre
        [400, 400, inf, 30, 0, 0.95, 0.1],  # an infinite side, the other class
        [300, 100, 50, 30, 0, 0.6, 0.2],
    ]
    (found,) = decode_head(_yolo(obb), Head(), 2, 1, 0.25, 0.45, rotated=True)
    assert found.scores.tolist() == pytest.approx([0.9, 0.6])
    assert found.classes.tolist() == [0, 1]
    # instance segmentation: 2 mask coefficients; the review's case kept none of the 2 valid
    seg = [
        [100, 100, 50, 50, 0.9, 1, 0],
        [nan, 200, 50, 50, 0.95, 1, 0],
        [300, 300, 50, 50, 0.95, nan, 0],
        [400, 400, inf, 50, 0.95, 1, 0],
        [500, 500, 50, 50, 0.8, 0, 1],
    ]
    (found,) = decode_head(_yolo(seg), Head(), 1, 2, 0.25, 0.45)
    assert found.scores.tolist() == pytest.approx([0.9, 0.8])


def test_end_to_end_rows_with_bad_values_or_classes_are_no_objects():
    rows = [
        [10, 10, 50, 50, 0.9, nan],  # the review's -9223372036854775808
        [10, 10, 50, 50, 0.9, 1e20],
        [60, 60, 90, 90, 0.9, -1],  # was label "-1"
        [100, 100, 150, 150, 0.9, 1.7],  # was class 1
        [100, 100, 150, 150, 0.9, 2],  # 2 classes: 0 and 1
        [inf, 100, 200, 200, 0.9, 0],  # was kept as [640, 100, 200, 200]
        [10, 10, 50, 50, inf, 0],
        [10, 10, 50, 50, nan, 0],
        [10, 10, 50, 50, 0.85, 0],  # the two valid rows
        [200, 200, 260, 260, 0.8, 1],
    ]
    (found,) = decode_head(np.array([rows], np.float32), Head("end2end"), 2, 0, 0.25, 0.45)
    assert found.classes.tolist() == [0, 1]
    assert found.boxes.tolist() == [[10, 10, 50, 50], [200, 200, 260, 260]]
    # pose rows: a NaN keypoint is no object; oriented rows: a NaN angle neither
    pose = [[0, 0, 9, 9, 0.9, 0, nan, 1, 1], [0, 0, 9, 9, 0.8, 0, 1, 1, 1]]
    (found,) = decode_head(np.array([pose], np.float32), Head("end2end"), 1, 3, 0.25, 0.45)
    assert found.scores.tolist() == pytest.approx([0.8])
    obb = [[5, 5, 9, 9, 0.9, 0, nan], [5, 5, 9, 9, 0.8, 0, 0.5]]
    (found,) = decode_head(
        np.array([obb], np.float32), Head("end2end"), 1, 1, 0.25, 0.45, 300, True
    )
    assert found.boxes[0].tolist() == pytest.approx([5, 5, 9, 9, 0.5]) and len(found.boxes) == 1


def test_detr_queries_with_bad_boxes_or_scores_are_no_objects():
    queries = [
        [nan, 0.5, 0.2, 0.2, 0.9],  # the review's: kept at 0.9 with a NaN box
        [0.5, 0.5, inf, 0.2, 0.9],
        [0.5, 0.5, 0.2, 0.2, inf],
        [0.5, 0.5, 0.2, 0.2, 0.8],
    ]
    (found,) = decode_head(np.array([queries], np.float32), Head("detr"), 1, 0, 0.25, 0.45)
    assert found.scores.tolist() == pytest.approx([0.8])
    assert found.boxes[0].tolist() == pytest.approx([0.4, 0.4, 0.6, 0.6])


def test_ssd_pairs_drop_non_finite_boxes_too():
    boxes = np.array([[[0.1, 0.1, 0.2, 0.2], [nan, 0.1, 0.2, 0.2], [0.5, 0.5, 0.6, 0.6]]])
    scores = np.array([[[0, 0.9, 0], [0, 0.95, 0], [0, 0, 0.7]]])
    (dets,) = decode_detections([boxes, scores], input_size=(100, 100), labels=["bg", "a", "b"])
    assert [(d.label, [round(v) for v in d.box]) for d in dets] == [
        ("a", [10, 10, 20, 20]),
        ("b", [50, 50, 60, 60]),
    ]


@pytest.mark.parametrize(
    "bad",
    [
        {"box": (nan, 10, 50, 50)},
        {"box": (10, 10, inf, 50)},
        {"box": (-1e30, 10, 1e30, 50)},  # finite, far outside: drawn clipped, never an overflow
        {"keypoints": [[nan, 20, 1.0], [30, 30, nan], [inf, -inf, 1.0], [1e30, 20, 1.0]]},
        {"corners": [[nan, 10], [50, 10], [50, 50], [10, 50]]},
        {"corners": [[1e30, 10], [50, 10], [50, 50], [10, 50]]},
        {"polygon": [[nan, 10], [50, 10], [50, 50]]},
    ],
)
@pytest.mark.parametrize("task", ["detect", "pose", "obb", "segment-instances"])
def test_the_overlay_skips_what_is_not_finite_and_draws_the_rest(task, bad):
    # a NaN that reaches a draw (records read back, a tracker's prediction) ended the camera:
    # "ValueError: cannot convert float NaN to integer" (G5)
    from edgert.runtime.results import Detection, Result
    from edgert.runtime.tasks import TASK_SPECS

    good = Detection((100, 100, 140, 140), 0.9, 0, "a")
    good = good.with_extras(
        keypoints=[[110, 110, 1.0]], corners=[[100, 100], [140, 100], [140, 140], [100, 140]]
    )
    broken = Detection(bad.get("box", (10, 10, 50, 50)), 0.8, 0, "a")
    broken = broken.with_extras(**{k: v for k, v in bad.items() if k != "box"})
    out = np.zeros((160, 160, 3), np.uint8)
    TASK_SPECS[task].draw(out, Result.of_objects([broken, good], task))
    assert out[100, 120].any() or out[120, 100].any()  # the good one's outline is drawn


def test_the_face_cascade_drops_broken_offsets_and_crops_within_bounds():
    # the same mistake in MTCNN's stages: a NaN, infinite or huge offset or score made a NaN
    # box for NMS and for the crops (int64 of NaN; a 1e30 box: a crop of that many pixels)
    from edgert.runtime.tasks.faces import MtcnnDetector, _generate

    prob = np.array([[0.9, 0.95, 0.97, 0.99]], np.float32)
    reg = np.zeros((4, 1, 4), np.float32)
    reg[0, 0, 1], reg[2, 0, 2] = nan, inf
    rows = _generate(reg, prob, 1.0, 0.6)
    assert rows[:, 4].tolist() == pytest.approx([0.9, 0.99])
    boxes = np.array([[0, 0, 20, 20, 0], [30, 0, 50, 20, 0], [60, 0, 80, 20, 0]], np.float32)
    offsets = np.array([[0, 0, 0, 0], [nan, 0, 0, 0], [1e30, 0, 0, 0]], np.float32)
    score = np.array([0.9, 0.95, 0.99], np.float32)
    for final in (False, True):
        kept = MtcnnDetector._refine(boxes.copy(), score, offsets, 0.7, final)
        assert kept[:, 4].tolist() == pytest.approx([0.9])
    huge = np.array([[-1e6, -1e6, 1e6, 1e6, 0.9]], np.float32)
    crops = MtcnnDetector._crops(None, np.zeros((48, 64, 3), np.float32), huge, 24)
    assert crops.shape == (1, 3, 24, 24)


@pytest.mark.parametrize("overlap", ["iou", "min"])
def test_nms_never_keeps_a_non_finite_box_nor_lets_it_suppress(overlap):
    from edgert.runtime.tasks.detection import nms

    boxes = np.array([[0, 0, 10, 10], [nan, 0, 10, 10], [0, 0, inf, 10], [20, 20, 30, 30]])
    assert nms(boxes, np.array([0.9, 0.99, 0.98, 0.8]), 0.5, overlap).tolist() == [0, 3]
    from edgert.runtime.tasks.detection import keep_sound

    assert keep_sound(np.zeros((0, 9), np.float32)).shape == (0,)  # no candidate: nothing said


def test_a_classifier_row_with_a_non_finite_score_gives_no_classes():
    # a NaN logit made every probability of its row NaN: written as "score": NaN, and a
    # second-stage classifier labelled tracks with "confidence": NaN
    from edgert.runtime.tasks.postprocess import classify

    rows = classify(np.array([[1.0, 3.0, 2.0], [nan, 1.0, 0.0], [inf, 0.0, 0.0]]), ["a", "b", "c"])
    assert [[c.label for c in row] for row in rows] == [["b", "c", "a"], [], []]
    assert classify(np.array([[nan, 1.0]]), k=1) == [[]]
    probs = classify(np.array([[0.2, 0.8], [nan, nan]]), k=1)  # probabilities stay as given
    assert probs[0][0].score == pytest.approx(0.8) and probs[1] == []


@pytest.mark.parametrize("classes", [1, 3, 80])
def test_per_class_nms_keeps_what_the_class_offset_kept_on_normal_scenes(classes):
    from edgert.runtime.tasks.detection import nms, xywh_to_xyxy

    rng = np.random.default_rng(classes)
    n = 2000
    boxes = xywh_to_xyxy(np.hstack([rng.uniform(0, 640, (n, 2)), rng.uniform(5, 120, (n, 2))]))
    scores = rng.uniform(0.25, 1, n).astype(np.float32)
    scores[:50] = 0.5  # ties: kept in index order, as one NMS of all of them keeps them
    cls = rng.integers(0, classes, n)
    span = float(np.abs(boxes).max()) + 1.0  # the offset trick it replaced
    want = nms(boxes + (cls * span * 2)[:, None], scores, 0.45)
    assert batched_nms(boxes, scores, cls, 0.45).tolist() == want.tolist()
