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
    (15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7),
    (6, 8), (7, 9), (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6),
)  # fmt: skip
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


compare, judge, observed = detect.compare, detect.judge, detect.observed


def draw(out, result: Result) -> list:
    """Boxes as detect draws them, then each skeleton: limbs between visible keypoints (COCO's
    pairs where the model has 17), the keypoints as dots."""
    import cv2

    detect.draw(out, result)
    for o in result.objects:
        points = o.extras.get("keypoints") or []
        color = detect.track_color(o.track_id)
        seen = [len(p) < 3 or p[2] >= VISIBLE for p in points]
        if len(points) == 17:
            for a, b in COCO_SKELETON:
                if seen[a] and seen[b]:
                    pa = tuple(int(round(v)) for v in points[a][:2])
                    pb = tuple(int(round(v)) for v in points[b][:2])
                    cv2.line(out, pa, pb, color, 2, cv2.LINE_AA)
        for p, s in zip(points, seen):
            if s:
                cv2.circle(
                    out, (int(round(p[0])), int(round(p[1]))), 3, (0, 0, 255), -1, cv2.LINE_AA
                )
    return []


def describe(result: Result) -> list:
    """``edgert run``'s lines: each object as detect says it, and how many keypoints it shows."""
    lines = []
    for line, o in zip(detect.describe(result), result.objects):
        points = o.extras.get("keypoints") or []
        seen = sum(1 for p in points if len(p) < 3 or p[2] >= VISIBLE)
        lines.append(f"{line}  keypoints {seen}/{len(points)} visible")
    return lines
