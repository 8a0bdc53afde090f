"""What event-gated inference (``edgert camera --gate``) knows of a stream's live tracks before
its next frame, measured against the stream's lines and zones: per track a :class:`Hint` (its
box and velocity, whether it moves, the seconds its path needs to reach a line or a zone's edge,
how far its counting point is from the nearest). Pure geometry on numpy (Python 3.8, numpy
1.17+); the camera's analytics build the hints (:func:`track_hints`), its gate reads them.

    hints = track_hints(tracker.live(), [*counters.lines, *counters.zones], "bottom", (h, w))
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .counting import anchor_point

__all__ = ["Hint", "distance_px", "reach_s", "track_hints"]

# a track moves when its box centre is faster than this share of the frame's height a second
MOVING = 0.02


class Hint(NamedTuple):
    """What the gate knows of one live track: its box and velocity (pixels, pixels a second) at
    the hints' time, whether it moves, the seconds it needs at its speed to reach a line or a
    zone's edge (inf: its path meets none, or it stands still), and how far its counting point
    is from the nearest one (pixels; inf without lines and zones)."""

    box: tuple
    velocity: tuple
    moving: bool
    reach_s: float = math.inf
    near_px: float = math.inf


def track_hints(live, counters, anchor: str, shape) -> tuple:
    """A :class:`Hint` per live track (``(track, box, velocity)`` as a tracker's ``live()`` gives
    them), against ``counters`` (lines and zones, ``kind`` and ``points``) in a frame of
    ``shape`` (height, width, ...); ``anchor`` is the counters' counting point of a box."""
    hints = []
    for _track, box, velocity in live:
        p = anchor_point(box, anchor)
        reach = min((reach_s(c, p, velocity) for c in counters), default=math.inf)
        near = min((distance_px(c, p, shape) for c in counters), default=math.inf)
        moving = math.hypot(*velocity) > MOVING * shape[0]
        hints.append(Hint(box, velocity, moving, reach, near))
    return tuple(hints)


def _edges(counter) -> list:
    """A line's segment, or a zone's edges (each vertex to the next, the last to the first)."""
    pts = np.asarray(counter.points, np.float64)
    return [(pts[0], pts[1])] if counter.kind == "line" else list(zip(pts, np.roll(pts, -1, 0)))


def distance_px(counter, p, shape) -> float:
    """Pixels from point ``p`` to the nearest point of a line (segment) or a zone's edge; a
    zone's edges along the frame's border are left out (an object leaves the frame there: its
    track ends, and the zone counts the exit)."""
    p = np.asarray(p, np.float64)
    h, w = shape[:2]
    best = math.inf
    for a, b in _edges(counter):
        if counter.kind != "line" and any(
            (a[k] == edge and b[k] == edge) for k, edge in ((0, 0), (0, w), (1, 0), (1, h))
        ):
            continue
        d = b - a
        u = float(np.clip(np.dot(p - a, d) / max(float(np.dot(d, d)), 1e-12), 0.0, 1.0))
        best = min(best, float(np.hypot(*(a + u * d - p))))
    return best


def reach_s(counter, p, v) -> float:
    """Seconds until point ``p`` moving at ``v`` (pixels a second) reaches a line (segment) or
    a zone's edge along its path, inf when its path meets none (the gate's hints are frames old,
    so the exact time, not a nearness, brackets the crossing)."""
    p, v = np.asarray(p, np.float64), np.asarray(v, np.float64)
    best = math.inf
    for a, b in _edges(counter):
        d = b - a
        cross = v[0] * d[1] - v[1] * d[0]  # p + v*s = a + d*u: Cramer's rule
        if abs(cross) < 1e-9:
            continue  # moving along it (or still)
        w = a - p
        s_, u_ = (w[0] * d[1] - w[1] * d[0]) / cross, (w[0] * v[1] - w[1] * v[0]) / cross
        if s_ >= 0 and 0 <= u_ <= 1:
            best = min(best, s_)
    return best
