"""Multi-object tracking on the device: ByteTrack-style association over a constant-velocity
Kalman filter that predicts with the real time between frames.

    tracker = Tracker()
    for frame in frames:
        tracks = tracker.update(detections, frame.t_capture)   # runtime Detection objects
        for t in tracks:
            print(t.track_id, t.box, t.label)

Why it holds up where frames arrive irregularly (a live queue that drops the oldest frame):

- the filter's state is in pixels and pixels per *second*; each prediction uses the time since
  the frame before (the capture timestamps), and its process noise grows with that time, so a
  track that skipped two frames is predicted two frames ahead, with a wider gate;
- tracks are kept for ``lost_seconds`` after their last match, not for a number of frames;
- association is ByteTrack's: confident detections first (IoU against every track's prediction,
  solved by SciPy's ``linear_sum_assignment``), then the low-confidence ones against the tracks
  still unmatched (occluded objects often score low), then new tracks only from unmatched
  confident detections; a track is confirmed after ``min_hits`` matches (a new track on the very
  first frames of a stream is confirmed at once, as ByteTrack does).

Association ignores the class by default (detectors flicker between similar classes); a track's
label is its most frequent label over its recent matches. ``per_class=True`` only lets a detection
join a track of its own class. Only tracks matched in this update are returned: a track that is
only predicted is not reported as if it were detected. Ended tracks are dropped (``ended`` lists
those of the last update), so memory does not grow with the number of objects ever seen.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from dataclasses import dataclass, field

import numpy as np

from ..tasks.detection import Detection, box_iou
from .kalman import KalmanBoxes


@dataclass
class Track:
    """One tracked object as of the last update that matched it."""

    track_id: int
    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in source pixels (filtered)
    score: float
    class_id: int
    label: str
    first_seen: float  # timestamp of the first detection
    last_seen: float  # timestamp of the last matched detection
    hits: int = 1
    confirmed: bool = False
    detection: Detection | None = None  # the detection matched in the last update
    detection_index: int | None = None  # its index in that update's detections
    predicted: bool = False  # its box is the filter's prediction (a frame not inferred)
    velocity: tuple[float, float] = (0.0, 0.0)  # the box centre's, pixels per second (filtered)
    last: Detection | None = None  # the last matched detection (kept while the track coasts)
    _labels: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=30), repr=False
    )

    @property
    def observed(self) -> tuple | None:
        """The last matched detection's own box (not filtered)."""
        return None if self.last is None else tuple(float(v) for v in self.last.box)

    @property
    def age(self) -> float:
        """Seconds from the first detection to the last match."""
        return self.last_seen - self.first_seen

    def as_object(self) -> Detection:
        """This track as one of a frame's objects (its filtered box, its ``age_s`` an extra):
        what a frame the gate skipped carries. Its last detection's extras (keypoints, a mask's
        outline, an oriented box) come along, moved with the box
        (:meth:`Detection.moved_to`)."""
        last = self.last if self.last is not None else Detection(self.box, 0.0, 0, "")
        moved = last.moved_to(self.box)
        return dataclasses.replace(
            moved,
            score=self.score,
            class_id=self.class_id,
            label=self.label,
            track_id=self.track_id,
            extras={**moved.extras, "age_s": round(self.age, 3)},
        )

    def to_dict(self) -> dict:
        return {
            "track_id": self.track_id,
            "box": [round(v, 2) for v in self.box],
            "score": round(self.score, 5),
            "class_id": self.class_id,
            "label": self.label,
            "age_s": round(self.age, 3),
        }


class ObjectTracker:
    """The contract of a tracker (one per stream): ``update(detections, timestamp)`` takes one
    frame's detections (runtime ``Detection`` objects or result dicts) at its time in seconds and
    returns the confirmed tracks matched in it, each naming the detection it matched by index
    (``Track.detection_index``); ``started`` and ``ended`` list the tracks confirmed and ended in
    that update; ``close()`` ends every live track. Time, not a frame count, decides how long a
    lost track is kept. A new tracker is one module with such a class and one row in
    :data:`TRACKERS`."""

    started: list[Track]
    ended: list[Track]

    def update(self, detections, timestamp: float) -> list[Track]:
        raise NotImplementedError

    def coast(self, timestamp: float) -> list[Track]:
        """A frame the detector did not see (event-gated inference skipped it): the confirmed
        tracks predicted to ``timestamp``, ``predicted`` set; no track starts or ends."""
        raise NotImplementedError

    def live(self) -> list[tuple[Track, tuple, tuple]]:
        """The confirmed tracks matched in the last update, with the filter's box and velocity
        at the last update's (or coast's) time: what event-gated inference asks."""
        raise NotImplementedError

    def missing(self) -> int:
        """Confirmed tracks the last update did not match and not yet ended (lost for less than
        ``lost_seconds``): event-gated inference looks for them again before they end."""
        raise NotImplementedError

    def close(self) -> list[Track]:
        raise NotImplementedError


# name -> (module, class), loaded when chosen (``edgert camera --tracker``)
TRACKERS: dict[str, tuple[str, str]] = {
    "bytetrack": ("edgert.runtime.tracking", "Tracker"),
}


# A detection at or above HIGH is matched first and may start a track; between LOW and it, it only
# extends one (ByteTrack's second pass). Ultralytics' ByteTrack (bytetrack.yaml since 8.1) starts
# and matches at 0.25, its predictor's own --conf: a detector that scores its objects 0.4-0.6 has
# every box drawn tracked. (0.5 / 0.6 here left 12 % of a real person detector's boxes untracked.)
HIGH = 0.25
LOW = 0.1


def default_thresholds(conf: float) -> tuple:
    """(high, new_track) for a detector run at ``conf``: the larger of the two, so that every box
    the user asked for can start and hold a track, and a lower ``conf`` (boxes kept to extend
    tracks through occlusion) does not start tracks on noise."""
    high = max(float(conf), HIGH)
    return high, high


def make_tracker(name: str = "bytetrack", **options) -> ObjectTracker:
    """A tracker from :data:`TRACKERS`; ``options`` go to its constructor."""
    import importlib

    if name not in TRACKERS:
        raise ValueError(f"unknown tracker {name!r}; choose one of {', '.join(TRACKERS)}")
    module, cls = TRACKERS[name]
    return getattr(importlib.import_module(module), cls)(**options)


class Tracker(ObjectTracker):
    """ByteTrack-class multi-object tracker; see the module text. Thresholds: detections scoring
    ``high`` or more are associated first and may start tracks (at ``new_track`` or more);
    those between ``low`` and ``high`` only extend existing tracks. ``match_iou``: the least IoU
    between a prediction and a detection to pair them (``low_match_iou`` for the second pass).
    The defaults are Ultralytics' ByteTrack's (:data:`HIGH`, :data:`LOW`)."""

    def __init__(
        self,
        high: float = HIGH,
        low: float = LOW,
        new_track: float = HIGH,
        match_iou: float = 0.2,
        low_match_iou: float = 0.5,
        min_hits: int = 2,
        lost_seconds: float = 1.0,
        per_class: bool = False,
    ) -> None:
        if not 0 <= low <= high <= 1 or not 0 < match_iou <= 1 or not 0 < low_match_iou <= 1:
            raise ValueError("thresholds must satisfy 0 <= low <= high <= 1 and IoUs in (0, 1]")
        if min_hits < 1 or lost_seconds < 0:
            raise ValueError("min_hits must be at least 1 and lost_seconds not negative")
        self.high, self.low, self.new_track = high, low, new_track
        self.match_iou, self.low_match_iou = match_iou, low_match_iou
        self.min_hits, self.lost_seconds, self.per_class = min_hits, lost_seconds, per_class
        self._tracks: list[Track] = []
        self._kf = KalmanBoxes()  # row k is self._tracks[k]'s filter
        self._ids = itertools.count(1)
        self._last_t: float | None = None
        self._updates = 0
        self._matched_t: float | None = None  # the last update's time (its matches' last_seen)
        self.started: list[Track] = []  # confirmed in the last update
        self.ended: list[Track] = []  # dropped in the last update (lost for lost_seconds)

    @property
    def tracks(self) -> list[Track]:
        """Every live track, matched or only predicted, confirmed or not."""
        return list(self._tracks)

    def update(self, detections, timestamp: float) -> list[Track]:
        """Associate this frame's detections (runtime ``Detection`` objects, or dicts with box,
        score, class_id, label) taken at ``timestamp`` (seconds, monotonic); return the confirmed
        tracks matched in this frame."""
        dets = [d if isinstance(d, Detection) else Detection.from_record(d) for d in detections]
        dt = 0.0 if self._last_t is None else max(0.0, timestamp - self._last_t)
        self._last_t = self._matched_t = timestamp
        self._updates += 1
        self.started, self.ended = [], []
        self._kf.predict(dt)
        self._pred = self._kf.boxes()
        scores = np.array([d.score for d in dets], dtype=np.float64)
        high = [i for i in range(len(dets)) if scores[i] >= self.high]
        low = [i for i in range(len(dets)) if self.low <= scores[i] < self.high]
        pool = list(range(len(self._tracks)))
        matched: dict[int, int] = {}  # track index -> detection index
        # confirmed tracks first, then tentative ones (ByteTrack's order)
        for group in (
            [k for k in pool if self._tracks[k].confirmed],
            [k for k in pool if not self._tracks[k].confirmed],
        ):
            pairs, high = self._associate(group, high, dets, self.match_iou)
            matched.update(pairs)
        rest = [k for k in pool if k not in matched and self._tracks[k].confirmed]
        pairs, _ = self._associate(rest, low, dets, self.low_match_iou)
        matched.update(pairs)
        # a confirmed track whose prediction ran off its object (it stopped or turned, above all
        # across frames event-gated inference skipped) is matched by its last observed box
        # (OC-SORT's observation-centric recovery) before that detection starts a new track
        rest = [k for k in pool if k not in matched and self._tracks[k].confirmed]
        if rest and high:
            seen = np.array([self._tracks[k].observed for k in rest], dtype=np.float64)
            pairs, high = self._associate(rest, high, dets, self.match_iou, seen)
            matched.update(pairs)
        order = sorted(matched)
        self._kf.update(order, np.array([dets[matched[k]].box for k in order], dtype=np.float64))
        filtered = self._kf.boxes()
        out = []
        for k in order:
            t = self._tracks[k]
            self._match(t, dets[matched[k]], timestamp, filtered[k], self._kf.x[k, 4:6])
            t.detection_index = matched[k]
            if t.confirmed:
                out.append(t)
        new = []
        for i in high:  # unmatched confident detections start tracks
            d = dets[i]
            if d.score < self.new_track:
                continue
            t = Track(
                next(self._ids),
                tuple(map(float, d.box)),
                float(d.score),
                d.class_id,
                d.label,
                timestamp,
                timestamp,
                detection=d,
                detection_index=i,
                last=d,
            )
            t._labels.append((d.class_id, d.label))
            if self._updates == 1 or self.min_hits == 1:  # a stream's first frame: no history
                t.confirmed = True
                self.started.append(t)
                out.append(t)
            self._tracks.append(t)
            new.append(d.box)
        if new:
            self._kf.add(np.array(new, dtype=np.float64))
        keep = []
        for t in self._tracks:
            lost = timestamp - t.last_seen
            # a tentative track that missed a frame is noise; a confirmed one waits lost_seconds
            gone = lost > self.lost_seconds or (not t.confirmed and lost > 0)
            if gone and t.confirmed:
                self.ended.append(t)
            keep.append(not gone)
        if not all(keep):
            self._tracks = [t for t, k in zip(self._tracks, keep) if k]
            self._kf.keep(np.array(keep, dtype=bool))
        out.sort(key=lambda t: t.track_id)
        return out

    def coast(self, timestamp: float) -> list[Track]:
        """Predict every track to ``timestamp`` (a frame the detector did not see): their boxes
        and velocities follow the filter; nothing is matched, started or ended (a track's time
        without a detection counts from its last match, so the next inferred frame ends it if
        it is gone by then). Returns the confirmed tracks the last update matched, marked
        ``predicted``: one it did not match stays out of the results, as it would had every frame
        been inferred (lines and zones do not see it walk on a prediction)."""
        dt = 0.0 if self._last_t is None else max(0.0, timestamp - self._last_t)
        self._last_t = timestamp
        self.started, self.ended = [], []
        if not self._tracks:
            return []
        self._kf.predict(dt)
        boxes = self._kf.boxes()
        out = []
        for k, t in enumerate(self._tracks):
            t.box = tuple(float(v) for v in boxes[k])
            t.velocity = (float(self._kf.x[k, 4]), float(self._kf.x[k, 5]))
            t.detection, t.detection_index, t.predicted = None, None, True
            if self._matched_last(t):
                out.append(t)
        out.sort(key=lambda t: t.track_id)
        return out

    def live(self) -> list[tuple[Track, tuple, tuple]]:
        if not self._tracks:
            return []
        boxes, x = self._kf.boxes(), self._kf.x
        return [
            (t, tuple(float(v) for v in boxes[k]), (float(x[k, 4]), float(x[k, 5])))
            for k, t in enumerate(self._tracks)
            if self._matched_last(t)
        ]

    def missing(self) -> int:
        return sum(1 for t in self._tracks if t.confirmed and not self._matched_last(t))

    def _matched_last(self, t: Track) -> bool:
        """A confirmed track the last update matched."""
        return t.confirmed and t.last_seen == self._matched_t

    def close(self) -> list[Track]:
        """End every live confirmed track (the stream ended); returns them."""
        ended = [t for t in self._tracks if t.confirmed]
        self._tracks = []
        self._kf = KalmanBoxes()
        return ended

    def _associate(self, tracks: list[int], det_idx: list[int], dets, min_iou: float, pred=None):
        """(pairs track->detection, detections left) by IoU of the tracks' predictions (or the
        boxes ``pred``, a row per track) against detections."""
        from scipy.optimize import linear_sum_assignment

        if not tracks or not det_idx:
            return {}, det_idx
        pred = self._pred[tracks] if pred is None else pred
        boxes = np.array([dets[i].box for i in det_idx], dtype=np.float64)
        iou = box_iou(pred, boxes)
        if self.per_class:
            same = np.array(
                [[self._tracks[k].class_id == dets[i].class_id for i in det_idx] for k in tracks]
            )
            iou = np.where(same, iou, 0.0)
        rows, cols = linear_sum_assignment(-iou)
        pairs, used = {}, set()
        for r, c in zip(rows, cols):
            if iou[r, c] >= min_iou:
                pairs[tracks[r]] = det_idx[c]
                used.add(c)
        return pairs, [i for j, i in enumerate(det_idx) if j not in used]

    def _match(self, t: Track, d: Detection, timestamp: float, box, velocity) -> None:
        t.box = tuple(float(v) for v in box)
        t.velocity = (float(velocity[0]), float(velocity[1]))
        t.score = float(d.score)
        t.last_seen = timestamp
        t.hits += 1
        t.detection = t.last = d
        t.predicted = False
        t._labels.append((d.class_id, d.label))
        (t.class_id, t.label), _ = collections.Counter(t._labels).most_common(1)[0]
        if not t.confirmed and t.hits >= self.min_hits:
            t.confirmed = True
            self.started.append(t)
