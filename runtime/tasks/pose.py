"""The pose task: people (or any objects) with K keypoints each. A YOLO pose head's output is
[B, 4 + nc + K*D, N] (end-to-end: [B, K', 6 + K*D]); each object's keypoints are (x, y) in
source pixels with a visibility in 0..1 where D is 3. Boxes are a detector's: tracking,
counting, the gate and comparisons use them as they use detect's (its hooks); the overlay adds
each skeleton."""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from ..results import Result
from . import detect

# COCO's 17 keypoints (Ultralytics' and MMPose's order): the limbs the overlay draws
COCO_SKELETON = (
    (15, 13),
    (13, 11),
    (16, 14),
    (14, 12),
    (11, 12),
    (5, 11),
    (6, 12),
    (5, 6),
    (5, 7),
    (6, 8),
    (7, 9),
    (8, 10),
    (1, 2),
    (0, 1),
    (0, 2),
    (1, 3),
    (2, 4),
    (3, 5),
    (4, 6),
)
VISIBLE = 0.5  # a keypoint drawn, and counted as seen, from this visibility up (Ultralytics' 0.5)


def kpt_shape(model) -> tuple:
    """(K, D) of the model's keypoints: its manifest's, else ModelError naming the flag."""
    shape = detect.head_of(model).kpt_shape
    if shape is None:
        raise ModelError(
            "the pose model records no keypoint shape; export it with --keypoints KxD "
            "(e.g. 17x3 for COCO's people)"
        )
    return shape


def head_extras(kpt, shapes: list):
    """Values per candidate after the classes: the K x D keypoints (None: the shape is not known)."""
    return kpt[0] * kpt[1] if kpt else None


def decode(model, values: list, transforms: list) -> list:
    k, d = kpt_shape(model)
    found = detect.candidates(model, values, k * d)
    results = []
    ts = transforms or [None] * len(found)
    for objs, c, t in zip(detect.objects(model, found, ts), found, ts):
        points = c.extras.reshape(-1, k, d).astype(np.float64)
        if t is not None:
            points = t.points_to_source(points)
        results.append(
            Result.of_objects(
                [
                    o.with_extras(keypoints=[[round(v, 2) for v in p] for p in kp])
                    for o, kp in zip(objs, points.tolist())
                ],
                model.task,
            )
        )
    return results


# COCO's per-keypoint sigmas (the spread of its annotators' clicks), for its 17 keypoints
COCO_SIGMAS = (
    np.array(
        [
            0.26,
            0.25,
            0.25,
            0.35,
            0.35,
            0.79,
            0.79,
            0.72,
            0.72,
            0.62,
            0.62,
            1.07,
            1.07,
            0.87,
            0.87,
            0.89,
            0.89,
        ]
    )
    / 10.0
)


def oks(ref: list, got: list):
    """Object keypoint similarity [len(ref), len(got)] of two images' objects: COCO's, with
    Ultralytics' validator's choices: the area is 0.53 of the reference object's box, the sigmas
    COCO's for 17 keypoints and 1/K each otherwise; only the keypoints the reference shows
    (visibility >= 0.5, every one where it has no visibility or shows none) count."""
    if not all(o.extras.get("keypoints") for o in (*ref, *got)):
        return None  # objects without keypoints: compared by their boxes
    a = np.array([o.extras["keypoints"] for o in ref], np.float64)
    b = np.array([o.extras["keypoints"] for o in got], np.float64)
    if a.ndim != 3 or b.ndim != 3 or a.shape[1:] != b.shape[1:]:
        return np.zeros((len(ref), len(got)))  # different keypoints: none pairs
    k = a.shape[1]
    sigma = COCO_SIGMAS if k == 17 else np.full(k, 1.0 / k)
    box = np.array([o.box for o in ref], np.float64).reshape(-1, 4)
    area = 0.53 * (box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1])
    d2 = ((a[:, None, :, :2] - b[None, :, :, :2]) ** 2).sum(-1)  # [A, B, K]
    e = d2 / ((2 * sigma) ** 2 * (area[:, None, None] + 1e-9) * 2)
    shown = a[:, :, 2] >= VISIBLE if a.shape[2] > 2 else np.ones(a.shape[:2], bool)
    shown[~shown.any(axis=1)] = True
    return (np.exp(-e) * shown[:, None, :]).sum(-1) / shown.sum(-1)[:, None]


# detect's measures, and the keypoints': keypoint_f1 (objects paired at OKS >= 0.5, as COCO's
# keypoint AP50 pairs them) and keypoint_oks (mean OKS of the pairs the boxes match)
compare, judge = detect.shape_hooks(oks, "keypoint", "oks", "keypoints")
observed = detect.observed


def draw(out, result: Result) -> list:
    """Boxes as detect draws them, then each skeleton: limbs between visible keypoints (COCO's
    pairs where the model has 17), the keypoints as dots."""
    import cv2

    detect.draw(out, result)
    for o in result.objects:
        points = o.extras.get("keypoints") or []
        color = detect.track_color(o.track_id)
        # a keypoint not shown, or whose place is NaN or infinite, is not drawn
        at = [detect.pixels(p[:2], out) for p in points]
        at = [tuple(a.tolist()) if a is not None else None for a in at]
        seen = [a is not None and (len(p) < 3 or p[2] >= VISIBLE) for a, p in zip(at, points)]
        if len(points) == 17:
            for a, b in COCO_SKELETON:
                if seen[a] and seen[b]:
                    cv2.line(out, at[a], at[b], color, 2, cv2.LINE_AA)
        for a, s in zip(at, seen):
            if s:
                cv2.circle(out, a, 3, (0, 0, 255), -1, cv2.LINE_AA)
    return []


def describe(result: Result) -> list:
    """``edgert run``'s lines: each object as detect says it, and how many keypoints it shows."""
    lines = []
    for line, o in zip(detect.describe(result), result.objects):
        points = o.extras.get("keypoints") or []
        seen = sum(1 for p in points if len(p) < 3 or p[2] >= VISIBLE)
        lines.append(f"{line}  keypoints {seen}/{len(points)} visible")
    return lines
