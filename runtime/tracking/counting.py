"""Counting tracked objects: crossings of a line, and occupancy, entries, exits and dwell time of a
zone. Both take the :class:`~edgert.runtime.tracking.Track` objects of each update.

Coordinates are source pixels, or fractions of the frame when every coordinate is within 0..1
(``LineCounter("door", [(0.5, 0), (0.5, 1)])``: a vertical line through the middle); fractions are
turned into pixels by :meth:`resolve` once the frame size is known.

The point of a box that counts is its bottom centre by default (where a person stands), or its
centre (``anchor="center"``). Both counters have hysteresis: a point must be ``hysteresis`` of the
box height beyond the line (or inside / outside the zone's edge) before its side changes, so a box
jittering on the line is counted once, not on every frame. A line counts once per track per
crossing, per direction: looking from the first point to the second, ``in`` is a crossing from
right to left, ``out`` from left to right. State per track is dropped with :meth:`forget` when the
tracker ends the track, so a day-long run holds only the objects present.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from ..events import Event

ANCHORS = ("bottom_center", "center")


def anchor_point(box, anchor: str) -> tuple[float, float]:
    """The point of a box (x1, y1, x2, y2) that counts: its bottom centre, or its centre."""
    x1, y1, x2, y2 = box
    return ((x1 + x2) / 2, y2 if anchor == "bottom_center" else (y1 + y2) / 2)


def _fractions(points) -> bool:
    return all(0.0 <= v <= 1.0 for p in points for v in p)


MAX_ZONE_POINTS = 10000  # a polygon traced in a UI has hundreds; the check below stays seconds


@functools.lru_cache(maxsize=64)
def first_self_crossing(points: tuple) -> tuple[int, int] | None:
    """The first pair of edges (i, j), i < j, of the closed polygon ``points`` that properly
    cross (touching at an end does not count), or None. Neighbouring edges share a corner and
    are not compared. Vectorised in blocks of edges against all later edges: 10,000 points in a
    few seconds, and the answer is cached (a zone is checked when parsed, when its frame size is
    known and per stream, always the same points)."""
    p = np.asarray(points, dtype=np.float64)
    n = len(p)
    a, b = p, np.roll(p, -1, axis=0)  # edge k runs from a[k] to b[k]
    d = b - a

    def orient(o, dd, q):  # o, dd: (m, 1, 2); q: (1, k, 2) -> (m, k)
        return dd[..., 0] * (q[..., 1] - o[..., 1]) - dd[..., 1] * (q[..., 0] - o[..., 0])

    block = max(1, 4_000_000 // max(1, n))
    for start in range(0, n, block):
        i = np.arange(start, min(n, start + block))
        ai, di = a[i][:, None, :], d[i][:, None, :]
        o1 = orient(ai, di, a[None])
        o2 = orient(ai, di, b[None])
        o3 = orient(a[None], d[None], ai)
        o4 = orient(a[None], d[None], b[i][:, None, :])
        cross = (o1 * o2 < 0) & (o3 * o4 < 0)
        j = np.arange(n)[None, :]
        later = j > i[:, None] + 1  # each pair once, neighbours (i, i+1) left out
        later &= ~((i[:, None] == 0) & (j == n - 1))  # the first and the last edge are neighbours
        hit = np.argwhere(cross & later)
        if len(hit):
            r, c = hit[0]
            return int(i[r]), int(c)
    return None


class _Counter:
    kind = "counter"

    def __init__(self, name: str, points, anchor: str, hysteresis: float, least: int) -> None:
        if not name or not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"{self.kind} name {name!r}: use letters, digits, '-' and '_'")
        pts = [tuple(float(v) for v in p) for p in points]
        if len(pts) < least or any(len(p) != 2 for p in pts):
            raise ValueError(
                f"{self.kind} {name} needs at least {least} points (x,y), got {len(pts)}"
            )
        if not all(math.isfinite(v) for p in pts for v in p):
            raise ValueError(f"{self.kind} {name} has a coordinate that is not a number")
        if anchor not in ANCHORS:
            raise ValueError(f"anchor must be one of {', '.join(ANCHORS)}, not {anchor!r}")
        self.name, self.anchor, self.hysteresis = name, anchor, float(hysteresis)
        self.points = pts
        self.given = tuple(pts)  # as given: fractions stay fractions whatever the frame size
        self.fractions = _fractions(pts)
        self.size: tuple[int, int] | None = None

    def resolve(self, width: int, height: int):
        """Fix the frame size: fractions become pixels of this size (again at each new size:
        they follow the frame); points outside the frame are refused."""
        if self.fractions:
            self.points = [(x * width, y * height) for x, y in self.given]
            self._resized()
        for x, y in self.points:
            if not (0 <= x <= width and 0 <= y <= height):
                raise ValueError(
                    f"{self.kind} {self.name}: point ({x:g}, {y:g}) is outside the {width}x{height} frame"
                )
        self.size = (width, height)
        return self

    def _margin(self, box) -> float:
        return max(2.0, self.hysteresis * (box[3] - box[1]))

    def _resized(self) -> None:
        """The points changed (a new frame size): what is derived from them is made again."""


@dataclass
class _LineState:
    side: int  # -1 or +1: the last side the point was clearly on


class LineCounter(_Counter):
    """Crossings of a segment, per direction (``in``, ``out``)."""

    kind = "line"

    def __init__(self, name: str, points, anchor: str = "bottom_center", hysteresis: float = 0.1):
        super().__init__(name, points, anchor, hysteresis, 2)
        if len(self.points) != 2:
            raise ValueError(f"line {name} is two points (x1,y1,x2,y2), got {len(self.points)}")
        if self.points[0] == self.points[1]:
            raise ValueError(f"line {name} has both points at {self.points[0]}")
        self.counts = {"in": 0, "out": 0}
        self._state: dict[int, _LineState] = {}

    def _side(self, p) -> tuple[float, float]:
        """(signed distance from the line, position along the segment 0..1)."""
        (ax, ay), (bx, by) = self.points
        dx, dy = bx - ax, by - ay
        length = math.hypot(dx, dy)
        cross = dx * (p[1] - ay) - dy * (p[0] - ax)
        along = ((p[0] - ax) * dx + (p[1] - ay) * dy) / (length * length)
        return cross / length, along

    def update(self, tracks, timestamp: float) -> list[dict]:
        """Crossing events of this update: ``{"event": "line_cross", "line", "direction",
        "track_id", "label"}``."""
        events = []
        for t in tracks:
            p = anchor_point(t.box, self.anchor)
            dist, along = self._side(p)
            margin = self._margin(t.box)
            if abs(dist) < margin:
                continue  # on the line, within the hysteresis: the side does not change
            side = 1 if dist > 0 else -1
            state = self._state.get(t.track_id)
            if state is None:
                self._state[t.track_id] = _LineState(side)
                continue
            if side != state.side:
                state.side = side
                if -0.05 <= along <= 1.05:  # crossed the segment, not the line beyond its ends
                    # image y grows downwards: a positive cross product is the right-hand side
                    direction = "in" if side < 0 else "out"
                    self.counts[direction] += 1
                    events.append(
                        Event(
                            "line_cross",
                            track=t.track_id,
                            fields={"line": self.name, "direction": direction, "label": t.label},
                        ).to_record()
                    )
        return events

    def forget(self, track_ids) -> None:
        for i in track_ids:
            self._state.pop(i, None)

    def report(self) -> dict:
        return {"type": "line", "points": [list(p) for p in self.points], **self.counts}


@dataclass
class _ZoneState:
    inside: bool
    entered: float | None = None
    label: str = ""


class ZoneCounter(_Counter):
    """A polygon: occupancy now, entries, exits, and each track's dwell time when it leaves."""

    kind = "zone"

    def __init__(self, name: str, points, anchor: str = "bottom_center", hysteresis: float = 0.1):
        super().__init__(name, points, anchor, hysteresis, 3)
        n = len(self.points)
        if n > MAX_ZONE_POINTS:
            raise ValueError(
                f"zone {name} has {n} points; at most {MAX_ZONE_POINTS} are taken "
                "(simplify the polygon)"
            )
        crossing = first_self_crossing(tuple(self.given))
        if crossing is not None:
            i, j = crossing
            raise ValueError(f"zone {name} crosses itself (edges {i + 1} and {j + 1})")
        area = 0.5 * abs(
            sum(
                self.points[i][0] * self.points[(i + 1) % n][1]
                - self.points[(i + 1) % n][0] * self.points[i][1]
                for i in range(n)
            )
        )
        if area == 0:
            raise ValueError(f"zone {name} has no area (its points are on one line)")
        self.entries = 0
        self.exits = 0
        self.dwell_s: list[float] = []  # of the last exits (bounded)
        self._state: dict[int, _ZoneState] = {}
        self._contour: np.ndarray | None = None

    def _resized(self) -> None:
        self._contour = None

    def _distance(self, p) -> float:
        import cv2

        if self._contour is None:
            self._contour = np.array(self.points, dtype=np.float32).reshape(-1, 1, 2)
        return float(cv2.pointPolygonTest(self._contour, (float(p[0]), float(p[1])), True))

    @property
    def occupancy(self) -> int:
        return sum(1 for s in self._state.values() if s.inside)

    def update(self, tracks, timestamp: float) -> list[dict]:
        """Events of this update: ``zone_enter`` and ``zone_exit`` (with ``dwell_s``)."""
        events = []
        for t in tracks:
            dist = self._distance(anchor_point(t.box, self.anchor))  # > 0 inside
            margin = self._margin(t.box)
            state = self._state.get(t.track_id)
            if state is None:
                if abs(dist) >= margin or dist > 0:
                    state = self._state[t.track_id] = _ZoneState(False, label=t.label)
                else:
                    continue
            state.label = t.label
            if not state.inside and dist >= margin:
                state.inside, state.entered = True, timestamp
                self.entries += 1
                events.append(
                    Event(
                        "zone_enter", track=t.track_id, fields={"zone": self.name, "label": t.label}
                    ).to_record()
                )
            elif state.inside and dist <= -margin:
                events.append(self._exit(t.track_id, state, timestamp))
        return events

    def _exit(self, track_id: int, state: _ZoneState, timestamp: float, why: str = "") -> dict:
        dwell = timestamp - (state.entered if state.entered is not None else timestamp)
        state.inside, state.entered = False, None
        self.exits += 1
        self.dwell_s = (self.dwell_s + [dwell])[-1000:]
        fields = {"zone": self.name, "label": state.label, "dwell_s": round(dwell, 3)}
        if why:
            fields[why] = True
        return Event("zone_exit", track=track_id, fields=fields).to_record()

    def forget(
        self, track_ids, timestamp: float | None = None, why: str = "track_lost"
    ) -> list[dict]:
        """Drop ended tracks; one still inside leaves (``zone_exit`` with ``why``: the track was
        lost, or ``run_ended`` while it was still in view) at ``timestamp`` (its last sighting
        when the caller passes it)."""
        events = []
        for i in track_ids:
            state = self._state.pop(i, None)
            if state is not None and state.inside and timestamp is not None:
                events.append(self._exit(i, state, timestamp, why))
        return events

    def report(self) -> dict:
        dwell = self.dwell_s
        return {
            "type": "zone",
            "points": [list(p) for p in self.points],
            "occupancy": self.occupancy,
            "entries": self.entries,
            "exits": self.exits,
            "dwell_s_mean": round(sum(dwell) / len(dwell), 3) if dwell else None,
        }


@dataclass
class Counters:
    """Every line and zone of one stream, updated together."""

    lines: list[LineCounter] = field(default_factory=list)
    zones: list[ZoneCounter] = field(default_factory=list)

    def update(self, tracks, timestamp: float) -> list[dict]:
        events = []
        for c in (*self.lines, *self.zones):
            events += c.update(tracks, timestamp)
        return events

    def forget(self, ended, why: str = "track_lost") -> list[dict]:
        """Ended tracks (Track objects): their state is dropped; zone exits for those inside,
        marked ``why`` (``track_lost``, or ``run_ended`` at the end of a run)."""
        events = []
        ids = [t.track_id for t in ended]
        for line in self.lines:
            line.forget(ids)
        for zone in self.zones:
            for t in ended:
                events += zone.forget([t.track_id], t.last_seen, why)
        return events

    def report(self) -> dict:
        return {c.name: c.report() for c in (*self.lines, *self.zones)}
