"""Tracking and line and zone counting for the camera app: one tracker and one set of counters
per stream (every stream's track IDs are its own), fed from the output thread in
each stream's frame order with the frames' capture timestamps.

``--line NAME=x1,y1,x2,y2`` and ``--zone NAME=x1,y1,x2,y2,x3,y3,...`` apply to every stream;
``STREAM:NAME=...`` (a stream number) to one. Coordinates are pixels, or fractions of the frame
when all are within 0..1 (see :mod:`edgert.runtime.tracking.counting`).
"""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from dataclasses import dataclass, field, replace

from edgert.runtime.errors import EdgertError, GeometryError
from edgert.runtime.events import Event
from edgert.runtime.results import Result
from edgert.runtime.tasks import TASK_SPECS, task_spec
from edgert.runtime.tracking import LOW, TRACKERS, ObjectTracker, default_thresholds, make_tracker
from edgert.runtime.tracking.counting import Counters, LineCounter, ZoneCounter, anchor_point
from edgert.runtime.tracking.hints import track_hints

log = logging.getLogger(__name__)
_SPEC = re.compile(r"(?:(\d+):)?([A-Za-z0-9_-]+)=(.*)")
TRAIL = 20  # centres drawn behind each track


@dataclass(frozen=True)
class Geometry:
    kind: str  # line | zone
    stream: int | None  # None: every stream
    name: str
    points: tuple[tuple[float, float], ...]
    spec: str

    def counter(self, anchor: str):
        cls = LineCounter if self.kind == "line" else ZoneCounter
        return cls(self.name, self.points, anchor=anchor)


def parse_geometry(spec: str, kind: str, streams: int) -> Geometry:
    """``[STREAM:]NAME=x1,y1,...`` -> Geometry; GeometryError with one sentence otherwise."""
    m = _SPEC.fullmatch(spec.strip())
    flag = f"--{kind} {spec}"
    if m is None:
        raise GeometryError(
            f"{flag}: write it as NAME=x1,y1,x2,y2{',...' if kind == 'zone' else ''} "
            "(or STREAM:NAME=... for one stream), NAME in ASCII letters, digits, "
            "'-' and '_'"
        )
    stream = int(m.group(1)) if m.group(1) is not None else None
    if stream is not None and stream >= streams:
        raise GeometryError(f"{flag}: there is no stream {stream} (streams are 0 to {streams - 1})")
    try:
        values = [float(v) for v in m.group(3).split(",")]
    except ValueError:
        raise GeometryError(
            f"{flag}: the coordinates must be numbers separated by commas"
        ) from None
    if len(values) % 2:
        raise GeometryError(f"{flag}: coordinates come in x,y pairs ({len(values)} numbers given)")
    points = tuple(zip(values[::2], values[1::2]))
    geometry = Geometry(kind, stream, m.group(2), points, spec)
    try:
        geometry.counter("bottom_center")  # the counter's own checks: points, crossing, area
    except ValueError as exc:
        raise GeometryError(f"{flag}: {exc}") from None
    return geometry


def parse_all(lines: list[str], zones: list[str], streams: int) -> list[Geometry]:
    found = [parse_geometry(s, "line", streams) for s in lines]
    found += [parse_geometry(s, "zone", streams) for s in zones]
    for i in range(streams):
        names = [g.name for g in found if g.stream in (None, i)]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise GeometryError(
                f"the name {dup} is used by two lines or zones of stream {i}: give each its own"
            )
    return found


def check_in_frame(geometries: list[Geometry], stream: int, size: tuple[int, int] | None) -> None:
    """GeometryError when a pixel coordinate lies outside stream ``stream``'s frame."""
    if size is None:
        return
    for g in geometries:
        if g.stream in (None, stream):
            try:
                g.counter("bottom_center").resolve(*size)
            except ValueError as exc:
                raise GeometryError(f"--{g.kind} {g.spec} on stream {stream}: {exc}") from None


@dataclass(frozen=True)
class TrackingOptions:
    """Tracking and counting: a tracker per stream (``tracker``, from the runtime's table),
    lines and zones (``[STREAM:]NAME=...``), the point of a box that counts and how long a lost
    track is kept. ``enabled`` also says whether anything asks for it."""

    track: bool = False  # a tracker per stream (implied by lines, zones and an events sink)
    lines: tuple = ()  # [STREAM:]NAME=x1,y1,x2,y2
    zones: tuple = ()  # [STREAM:]NAME=x1,y1,x2,y2,x3,y3,...
    count_anchor: str = "bottom_center"  # or "center"
    lost_seconds: float = 1.0
    tracker: str = "bytetrack"
    track_high: float | None = None  # None: default_thresholds(--conf)
    track_new: float | None = None  # None: track_high

    def thresholds(self, conf: float) -> dict:
        """The tracker's (high, new_track, low) for a detector run at ``conf``."""
        high, new = default_thresholds(conf)
        high = self.track_high if self.track_high is not None else high
        new = self.track_new if self.track_new is not None else max(high, new)
        return {"high": high, "new_track": new, "low": min(LOW, high)}

    @property
    def enabled(self) -> bool:
        return bool(self.track or self.lines or self.zones)

    @staticmethod
    def add_arguments(parser, boxes: str) -> None:
        from edgert.apps.argtypes import nonneg_float

        t = parser.add_argument_group(f"tracking and counting ({boxes} models)")
        t.add_argument(
            "--track",
            action="store_true",
            help="follow objects across frames: a track ID per detection (one tracker per stream)",
        )
        t.add_argument(
            "--tracker",
            choices=list(TRACKERS),
            default="bytetrack",
            help="the tracker (default bytetrack: ByteTrack's association over a Kalman filter "
            "stepped by the frames' real times)",
        )
        _add_thresholds(t)
        t.add_argument(
            "--line",
            action="append",
            default=[],
            metavar="[STREAM:]NAME=x1,y1,x2,y2",
            help="count crossings of a line, per direction (pixels, or fractions of the frame "
            "when all are 0..1); repeatable; implies --track",
        )
        t.add_argument(
            "--zone",
            action="append",
            default=[],
            metavar="[STREAM:]NAME=x1,y1,x2,y2,x3,y3,...",
            help="count who is in a polygon, entries, exits and dwell time; repeatable; implies "
            "--track",
        )
        t.add_argument(
            "--events",
            metavar="FILE",
            help="one JSON line per event: track_start, track_end, line_cross, zone_enter, "
            "zone_exit; appended to, each run starting with run_start; implies --track (the "
            "same as --output events://FILE)",
        )
        t.add_argument(
            "--count-point",
            choices=["bottom_center", "center"],
            default="bottom_center",
            help="the point of a box that counts (default bottom_center: where a person stands)",
        )
        t.add_argument(
            "--lost-seconds",
            type=nonneg_float,
            default=1.0,
            metavar="S",
            help="how long a track waits for its object to be detected again (default 1)",
        )

    @classmethod
    def from_args(cls, args) -> TrackingOptions:
        high, new = getattr(args, "track_high", None), getattr(args, "track_new", None)
        if high is not None and new is not None and new < high:
            raise EdgertError(
                f"--track-new {new:g} is under --track-high {high:g}: a track starts only from a "
                "detection matched first, so give --track-new at least --track-high"
            )
        return cls(
            args.track,
            tuple(args.line),
            tuple(args.zone),
            args.count_point,
            args.lost_seconds,
            args.tracker,
            getattr(args, "track_high", None),
            getattr(args, "track_new", None),
        )


def _add_thresholds(group) -> None:
    from edgert.apps.argtypes import fraction

    group.add_argument(
        "--track-high",
        type=fraction,
        metavar="T",
        help="a detection scoring T or more is matched first and may start a track; lower "
        "ones only extend tracks (default: the larger of --conf and 0.25, as Ultralytics' "
        "ByteTrack)",
    )
    group.add_argument(
        "--track-new",
        type=fraction,
        metavar="T",
        help="the least score that starts a new track (default: --track-high)",
    )


@dataclass
class _Stream:
    tracker: ObjectTracker
    counters: Counters
    geometries: list
    size: tuple[int, int] | None = None  # the frame size the counters are resolved for
    warned: bool = False  # that pixel geometry stays put when the size changes
    trails: dict = field(default_factory=dict)
    task: str = ""  # the task of its last inferred results (a skipped frame's are the same)
    lenient: bool = False  # added while running: a line outside its first frame is left out


class Analytics:
    """Per stream: a tracker, its counters, the trails drawn on the overlay."""

    def __init__(
        self,
        streams: int,
        geometries: list[Geometry],
        anchor: str = "bottom_center",
        lost_seconds: float = 1.0,
        tracker: str = "bytetrack",
        thresholds: dict | None = None,
    ) -> None:
        self.thresholds = dict(thresholds or {})
        self.coverage = Coverage(self.thresholds.get("high", default_thresholds(0)[0]))
        self.streams = [
            _Stream(
                make_tracker(tracker, lost_seconds=lost_seconds, **self.thresholds),
                Counters(),
                [g for g in geometries if g.stream in (None, i)],
            )
            for i in range(streams)
        ]
        self.anchor = anchor
        self.event_counts: collections.Counter = collections.Counter()
        self.t0_wall = time.time() - time.monotonic()  # monotonic -> wall clock
        self.gates = None  # the streams' gates (event-gated inference): told what tracks do
        self._lock = threading.Lock()  # a reload's change of a stream's lines and zones

    def add_stream(self, geometries: list[Geometry], tracker: str, lost_seconds: float) -> int:
        """A stream added while the run goes on (a reload): its own tracker and counters."""
        self.streams.append(
            _Stream(
                make_tracker(tracker, lost_seconds=lost_seconds, **self.thresholds),
                Counters(),
                list(geometries),
                lenient=True,
            )
        )
        return len(self.streams) - 1

    def set_geometries(self, stream: int, geometries: list[Geometry]) -> dict:
        """Stream ``stream``'s lines and zones replaced while it runs (a reload), its tracks
        kept: an unchanged line or zone (kind, name, points) keeps its counter and counts; a new
        or edited one starts from zero with the next frame (the tracks inside an edited zone
        enter it then); one taken away goes with its counts. {"added", "removed", "kept"}."""
        s = self.streams[stream]
        with self._lock:  # between two frames of the output thread
            old = {(g.kind, g.name, g.points) for g in s.geometries}
            counters = {
                (c.kind, c.name, c.given): c for c in (*s.counters.lines, *s.counters.zones)
            }
            kept = [g.name for g in geometries if (g.kind, g.name, g.points) in old]
            removed = [
                k[1] for k in old if k not in {(g.kind, g.name, g.points) for g in geometries}
            ]
            s.geometries = list(geometries)
            if s.size is not None:  # else its counters are made at its first frame
                s.counters = Counters()
                for g in geometries:
                    c = counters.get((g.kind, g.name, g.points)) or g.counter(self.anchor)
                    c.resolve(*s.size)  # (a kept one: as it was)
                    (s.counters.lines if g.kind == "line" else s.counters.zones).append(c)
        added = [g.name for g in geometries if g.name not in kept]
        return {"added": added, "removed": removed, "kept": kept}

    def _resolve(self, s: _Stream, stream: int, hw: tuple[int, int]) -> None:
        """The counters, for this frame's size. When a stream's frames change size (a folder of
        mixed images, a camera switching resolution), lines and zones given as fractions follow
        the frame; ones given in pixels stay where they were, said once."""
        h, w = hw
        if s.size is None:
            if s.lenient:  # its size was not known when it was checked: the run goes on
                s.geometries = _inside(s.geometries, stream, (w, h))
            check_in_frame(s.geometries, stream, (w, h))
            for g in s.geometries:
                counter = g.counter(self.anchor).resolve(w, h)
                (s.counters.lines if g.kind == "line" else s.counters.zones).append(counter)
        else:
            for counter in (*s.counters.lines, *s.counters.zones):
                if counter.fractions:
                    counter.resolve(w, h)
            pixels = [c.name for c in (*s.counters.lines, *s.counters.zones) if not c.fractions]
            if pixels and not s.warned:
                s.warned = True
                log.warning(
                    "stream %d changed size from %dx%d to %dx%d: %s given in pixels %s "
                    "where %s (give fractions of the frame, 0..1, to follow its size)",
                    stream,
                    *s.size,
                    w,
                    h,
                    ", ".join(pixels),
                    "stays" if len(pixels) == 1 else "stay",
                    "it was" if len(pixels) == 1 else "they were",
                )
        s.size = (w, h)

    def update(self, frame) -> None:
        """Track this frame's detections; sets ``track_id`` on each (None when no confirmed track
        holds it) and ``frame.tracks``; writes the events."""
        with self._lock:
            self._update(frame)

    def _update(self, frame) -> None:
        s = self.streams[frame.stream]
        if s.size != frame.scene_hw[::-1]:
            self._resolve(s, frame.stream, frame.scene_hw)
        if frame.inferred:
            found = frame.results.objects if frame.results is not None else []
            tracks = s.tracker.update(found, frame.t_scene)
            ids = [None] * len(found)  # no confirmed track holds it (yet)
            for t in tracks:
                ids[t.detection_index] = t.track_id
            objects = [replace(d, track_id=i) for d, i in zip(found, ids)]
            self.coverage.add(frame.stream, found, ids)
            s.task = frame.results.task if frame.results is not None else s.task
            frame.results = Result.of_objects(objects, s.task, tracked=True)
        else:  # the gate skipped it: the tracks predicted to its time are its results
            tracks = s.tracker.coast(frame.t_scene)
            objects = [t.as_object() for t in tracks]
            frame.results = Result.of_objects(objects, s.task, tracked=True, predicted=True)
        frame.tracks = tracks
        gate = self.gates[frame.stream] if self.gates is not None else None
        if gate is not None:  # (a removed stream's gate is let go)
            gate.hints = self._hints(s, frame.scene_hw, frame.t_scene)
        events = [
            Event("track_start", track=t.track_id, fields={"label": t.label})
            for t in s.tracker.started
        ]
        events += map(Event.of, s.counters.update(tracks, frame.t_scene))
        ended = s.tracker.ended
        events += map(Event.of, s.counters.forget(ended))
        events += map(_ended, ended)
        for t in tracks:
            point = anchor_point(t.box, self.anchor)
            s.trails.setdefault(t.track_id, collections.deque(maxlen=TRAIL)).append(point)
        for t in ended:
            s.trails.pop(t.track_id, None)
        frame.events = self._records(
            events, frame.stream, frame.index, frame.t_capture, frame.t_media
        )

    def _hints(self, s: _Stream, shape, t: float) -> dict:
        """What the stream's gate reads before its next frame: every live track's box and
        velocity (the filter's, at ``t``), whether it moves (its box centre faster than 2 % of the
        frame's height a second), the seconds its path needs to reach a line or a zone's edge and
        how far its counting point is from the nearest (pixels); and how many confirmed tracks the last inferred frame missed
        (looked for again before they are given up)."""
        counters = (*s.counters.lines, *s.counters.zones)
        hints = track_hints(s.tracker.live(), counters, self.anchor, shape)
        return {"t": t, "tracks": hints, "missing": s.tracker.missing()}

    def _records(
        self,
        events: list,
        stream: int,
        index: int | None,
        t: float,
        t_media: float | None = None,
    ) -> list:
        """Event records (runtime.events.Event): what happened, where (stream, frame), and when:
        the capture's monotonic and wall-clock time, and for a video file the frame's time in
        the video."""
        out = []
        for e in events:
            self.event_counts[e.kind] += 1
            e.stream, e.time = stream, round(self.t0_wall + t, 4)
            e.fields.update(frame=index, t_monotonic=round(t, 4))
            if t_media is not None:
                e.fields["t_video"] = round(t_media, 4)
            out.append(e.to_record())
        return out

    def finish(self) -> list[dict]:
        """The run ended: every live track ends (zone exits for those inside); their events."""
        records = []
        for i, s in enumerate(self.streams):
            ended = s.tracker.close()
            events = [Event.of(e) for e in s.counters.forget(ended, "run_ended")]
            events += map(_ended, ended)
            records += self._records(events, i, None, time.monotonic())
        return records

    def counts(self, stream: int) -> dict:
        return self.streams[stream].counters.report()

    def overlay(self, stream: int):
        """(counters, trails) for drawing."""
        s = self.streams[stream]
        return [*s.counters.lines, *s.counters.zones], s.trails


def _inside(geometries: list, stream: int, size: tuple) -> list:
    """The lines and zones inside the frame; each of the others said and left out."""
    inside = []
    for g in geometries:
        try:
            inside += [check_in_frame([g], stream, size) or g]
        except GeometryError as exc:
            log.warning("%s: left out", exc)
    return inside


def _ended(t) -> Event:
    """A track's ``track_end``."""
    return Event(
        "track_end", track=t.track_id, fields={"label": t.label, "duration_s": round(t.age, 3)}
    )


def check_task(task: str, asked_by: str = "--track") -> None:
    """Tracking needs boxes: a model whose task's results are boxes (detect, faces);
    ``asked_by`` is what turned tracking on (--track, --line, --clips DIR, ...)."""
    if not task_spec(task).boxes:
        boxes = " or ".join(t.name for t in TASK_SPECS.values() if t.boxes)
        raise EdgertError(
            f"{asked_by} follows detected objects (it tracks them), and this is a {task} model: "
            f"use a {boxes} bundle"
        )


class Coverage:
    """How many confident boxes (scoring the tracker's ``high`` or more) got a track ID, per
    stream; said once a stream when, over ``WINDOW`` of them, more than ``SHARE`` did not (a
    tracker that misses what the user sees drawn: its thresholds, or objects too fast for its
    IoU match)."""

    WINDOW = 300
    SHARE = 0.2

    def __init__(self, high: float) -> None:
        self.high = high
        self.boxes = collections.Counter()  # stream -> confident boxes
        self.with_id = collections.Counter()
        self._window: dict = {}  # stream -> [boxes, untracked] since the last look
        self.warned: set = set()

    def add(self, stream: int, found, ids) -> None:
        window = self._window.setdefault(stream, [0, 0])
        for d, track_id in zip(found, ids):
            if not d.score >= self.high:
                continue
            self.boxes[stream] += 1
            self.with_id[stream] += track_id is not None
            window[0] += 1
            window[1] += track_id is None
        if window[0] >= self.WINDOW:
            if window[1] > self.SHARE * window[0] and stream not in self.warned:
                self.warned.add(stream)
                log.warning(
                    "stream %d: %d of the last %d boxes scoring %.2f or more got no track ID "
                    "(%.0f %%): objects that move too far between inferred frames for the "
                    "tracker's IoU match, or thresholds above their scores (--track-high, "
                    "--track-new)",
                    stream,
                    window[1],
                    window[0],
                    self.high,
                    100.0 * window[1] / window[0],
                )
            self._window[stream] = [0, 0]

    def report(self, stream: int) -> dict:
        boxes = self.boxes[stream]
        return {
            "boxes": boxes,
            "with_track_id": self.with_id[stream],
            "share": round(self.with_id[stream] / boxes, 4) if boxes else None,
        }
