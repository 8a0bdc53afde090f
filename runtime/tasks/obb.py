"""The obb task: oriented boxes. A YOLO OBB head's output is [B, 4 + nc + 1, N] (centre x, y,
width, height, class scores, the angle in radians last; end-to-end: [B, K, 7]), NMS by
probabilistic IoU. Each object's record keeps Ultralytics' convention: ``rbox`` = [centre x,
centre y, width, height, angle] in source pixels and radians (the angle as the head gives it,
in [-pi/4, 3pi/4)), its four ``corners``; ``box`` is the upright box around the corners
(clipped to the image), so tracking, lines and zones work on it as on any detector's."""

from __future__ import annotations

import numpy as np

from ..results import Result
from . import detect
from .heads import Candidates


def corners(rbox: np.ndarray) -> np.ndarray:
    """Oriented boxes [M, 5] (centre x, y, width, height, angle) -> their corners [M, 4, 2]."""
    r = np.asarray(rbox, np.float64).reshape(-1, 5)
    cos, sin = np.cos(r[:, 4]), np.sin(r[:, 4])
    vw = np.stack([r[:, 2] / 2 * cos, r[:, 2] / 2 * sin], axis=1)
    vh = np.stack([-r[:, 3] / 2 * sin, r[:, 3] / 2 * cos], axis=1)
    c = r[:, :2]
    return np.stack([c + vw + vh, c + vw - vh, c - vw - vh, c - vw + vh], axis=1)


def to_source(rbox: np.ndarray, transform) -> np.ndarray:
    """Oriented boxes [M, 5] in model pixels -> source pixels (centre shifted and scaled, sides
    scaled; letterbox and stretch scale both axes alike for an upright square, the angle kept)."""
    r = np.array(rbox, dtype=np.float64).reshape(-1, 5)
    if transform is None:
        return r
    r[:, 0] = (r[:, 0] - transform.ox) / transform.sx
    r[:, 1] = (r[:, 1] - transform.oy) / transform.sy
    r[:, 2] /= transform.sx
    r[:, 3] /= transform.sy
    return r


def head_extras(kpt, shapes: list):
    """Values per candidate after the classes: the angle, after the class scores."""
    return 1


def decode(model, values: list, transforms: list) -> list:
    found = detect.candidates(model, values, 1, rotated=True)
    results = []
    for c, t in zip(found, transforms or [None] * len(found)):
        # the upright box around the corners in model pixels, mapped and clipped as detect's
        pts = corners(c.boxes)
        upright = np.concatenate([pts.min(axis=1), pts.max(axis=1)], axis=1)
        (objs,) = detect.objects(model, [Candidates(upright, c.scores, c.classes, c.extras)], [t])
        r = to_source(c.boxes, t)
        results.append(
            Result.of_objects(
                [
                    o.with_extras(
                        rbox=[round(v, 2) for v in rb[:4]] + [round(rb[4], 5)],
                        corners=[[round(v, 2) for v in p] for p in cs],
                    )
                    for o, rb, cs in zip(objs, r.tolist(), corners(r).tolist())
                ],
                model.task,
            )
        )
    return results


def rotated_iou(ref: list, got: list):
    """Rotated IoU [len(ref), len(got)] of two images' oriented boxes: the probabilistic IoU
    (:func:`~edgert.runtime.tasks.heads.probiou`) that Ultralytics' OBB NMS and validator use."""
    from .heads import probiou

    if not all(o.extras.get("rbox") for o in (*ref, *got)):
        return None  # objects without their oriented boxes: compared by their upright ones
    a = np.array([o.extras["rbox"] for o in ref], np.float64).reshape(-1, 5)
    b = np.array([o.extras["rbox"] for o in got], np.float64).reshape(-1, 5)
    return probiou(a, b)


# detect's measures (on the upright boxes), and the oriented boxes': rbox_f1 (paired at rotated
# IoU >= 0.5) and rbox_iou (mean rotated IoU of the pairs the boxes match)
compare, judge = detect.shape_hooks(rotated_iou, "rbox", "iou", "oriented boxes")
observed = detect.observed


def draw(out, result: Result) -> list:
    """Each oriented box as its four sides, with its track, label and score."""
    import cv2

    from ..images.captions import current

    captions, placed = current(out), []
    for o in result.objects:
        poly = detect.pixels(o.extras.get("corners") or [], out)
        box = detect.pixels(o.box, out)
        color = detect.track_color(o.track_id)
        if poly is not None:
            cv2.polylines(out, [poly.reshape(-1, 1, 2)], True, color, 2, cv2.LINE_AA)
        if box is not None:
            placed.append((o, box.tolist(), color))
    for o, box, color in placed:  # after every outline, as detect's
        captions.label_box(out, detect.caption(o), box, color)
    return []


def describe(result: Result) -> list:
    """``edgert run``'s lines: score, label, centre, sides and angle (degrees) of each box."""
    lines = []
    for o in result.objects:
        cx, cy, w, h, a = o.extras.get("rbox", [0, 0, 0, 0, 0])
        lines.append(
            f"  {o.score:7.4f}  {o.label:<20} centre ({cx:.1f}, {cy:.1f}) {w:.1f}x{h:.1f} "
            f"at {np.degrees(a):.1f} deg"
        )
    return lines
