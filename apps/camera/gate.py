"""Event-gated inference (``--gate``): per stream, before inference, decide whether a frame goes to
the detector, and why. Frigate's idea, kept exact: motion found on a small grey copy of the frame
against a slowly adapting background (a light change, sensor noise and compression are not
motion; ``--motion-mask`` polygons are ignored), and besides motion the reasons that keep tracks,
lines and zones right through the gaps:

    start       the first frames of a stream, and after a gap (a reconnect)
    motion      the motion detector found change where no track is (perhaps a new object)
    tracks      tracked objects move (the motion is theirs): every ``TRACK_CHECK_S``, their
                boxes corrected; the Kalman filter predicts the frames between
    geometry    a moving track crosses a line or a zone's edge within a frame interval (the
                frames either side of the crossing are seen, not predicted)
    keyframe    ``--keyframe S`` passed since the last inferred frame (still objects, arrivals)
    interval    ``--gate interval:N``: every Nth frame (DeepStream's fixed skip, for comparison)
    rate        ``--target-fps N`` without a gate: N evenly spaced frames a second (with a gate,
                its frames are thinned to N a second; those left out are ``rate_skipped``)

A frame with none of these is skipped and counted: the tracker coasts (Kalman prediction at the
frame's real time), its results say they are predicted, and lines, zones and events go on as if
every frame had been seen. Device side: OpenCV's own operations, Python 3.8, numpy 1.x."""

from __future__ import annotations

import collections
import math
import threading

from edgert.runtime.tracking.hints import Hint

from .gate_options import (  # noqa: F401 - the gate's options, read from here as before
    GAP_S,
    POLICIES,
    REASONS,
    START_FRAMES,
    TRACK_CHECK_S,
    GateOptions,
    Policy,
    check_masks_in_frame,
    parse_mask,
)
from .motion import LOOKBACK_S, MotionDetector


def explained(region, tracks, t: float, memory_s: float) -> bool:
    """Whether a motion region is (mostly) the tracks' own objects moving: ``tracks`` are
    (box, velocity px/s, time of the box). Each box is moved on to ``t`` and swept back over
    ``memory_s`` (motion is change against a picture that long ago: where it just was),
    widened by a quarter of its size (the prediction's error, the region's dilation)."""
    x1, y1, x2, y2 = region
    area = max(1.0, (x2 - x1) * (y2 - y1))
    covered = 0.0
    for (bx1, by1, bx2, by2), (vx, vy), tb in tracks:
        now, then = t - tb, t - tb - memory_s
        mx, my = 0.25 * (bx2 - bx1) + 8, 0.25 * (by2 - by1) + 8
        lo_x, hi_x = sorted((vx * now, vx * then))
        lo_y, hi_y = sorted((vy * now, vy * then))
        w = min(x2, bx2 + hi_x + mx) - max(x1, bx1 + lo_x - mx)
        h = min(y2, by2 + hi_y + my) - max(y1, by1 + lo_y - my)
        if w > 0 and h > 0:
            covered += w * h
    return covered >= 0.7 * area


def _outruns(h: Hint) -> bool:
    """Whether a track goes further than its box's size between two track checks: fast enough
    that a turn or a stop between them leaves its predicted box. Slower ones stay matched
    (measured with MTCNN: faces of ~40 px turning at 128 px/s were counted right by the checks
    alone, at 180 px/s and up they were not)."""
    x1, y1, x2, y2 = h.box
    return math.hypot(*h.velocity) * TRACK_CHECK_S > max(x2 - x1, y2 - y1)


def _reach_px(h: Hint, age: float) -> float:
    """How near a line a moving track must be for its frames to be seen (see motion_reason):
    as far as it goes before the next track check and since the hints were made, and a quarter
    of its box (the detector's and the counter's margins)."""
    x1, y1, x2, y2 = h.box
    return 0.25 * max(x2 - x1, y2 - y1) + math.hypot(*h.velocity) * (TRACK_CHECK_S + age)


class StreamGate:
    """One stream's gate: ``decide(frame)`` gives the reason to infer it, or None to skip it.
    ``hints`` is what the output thread last saw of the stream's tracks (``{"t": time, "tracks":
    [Hint, ...]}``), read here without waiting.

    Motion that the tracks explain (it lies on their predicted boxes) is their objects moving:
    those are re-inferred every ``TRACK_CHECK_S`` (the Kalman filter predicts between), and on the
    frames either side of a predicted crossing of a line or a zone's edge. Motion anywhere else
    may be a new object: that frame is inferred at once."""

    def __init__(self, options: GateOptions, masks: list | None = None) -> None:
        self.options = options
        self.motion = MotionDetector(options.sensitivity, masks) if options.policy.motion else None
        self.counts: collections.Counter = collections.Counter()
        self.skipped = 0
        self.rate_skipped = 0  # frames the gate would infer that --target-fps left out
        self._last_t: float | None = None
        self._last_inferred: float | None = None
        self._start_left = START_FRAMES
        self.count = 0  # frames seen
        self._frame_s: float | None = None  # the stream's frame interval (smoothed)
        self.hints: dict = {"t": 0.0, "tracks": ()}
        self._due: float | None = None  # --target-fps: the next frame time a slot opens
        self._lock = threading.Lock()

    def decide(self, frame) -> str | None:
        t = frame.t_scene
        o = self.options
        if self._last_t is not None and t - self._last_t > GAP_S:
            self._start_left = START_FRAMES  # a reconnect, a camera that came back
        elif self._last_t is not None:
            dt = max(0.0, t - self._last_t)  # the first interval seeds it, then it is smoothed
            self._frame_s = (
                dt if self._frame_s is None else self._frame_s + 0.1 * (dt - self._frame_s)
            )
        self._last_t = t
        self.count += 1
        regions = (
            self.motion.regions(frame.image, frame.t_scene, frame.source_hw)
            if self.motion is not None
            else []
        )
        if o.policy.starts and self._start_left > 0:
            self._start_left -= 1
            reason = "start"
        else:
            reason = o.policy.decide(self, t, regions)
        if reason is not None and o.target_fps is not None and not self._slot(t):
            reason = None
            self.rate_skipped += 1
        with self._lock:
            if reason is None:
                self.skipped += 1
            else:
                self.counts[reason] += 1
                self._last_inferred = t
        return reason

    def _slot(self, t: float) -> bool:
        """--target-fps: whether a frame at ``t`` falls in an open slot (slots 1/N apart, a
        quarter of a frame interval early still counts, so 30 fps paced to 10 takes every third
        frame); a stream that fell a slot behind starts its slots again from this frame."""
        period = 1.0 / self.options.target_fps
        slack = 0.25 * (self._frame_s or 0.0)
        if self._due is not None and t + slack < self._due:
            return False
        if self._due is None or t - self._due > period:
            self._due = t
        self._due += period
        return True

    def motion_reason(self, t: float, regions: list) -> str | None:
        """``--gate motion``'s reason for the frame at ``t`` (``regions``: where it changed)."""
        hints = self.hints
        tracks = hints["tracks"]
        # (a millisecond's slack: 10 fps frames 0.3 s apart are 0.29999... apart in floats)
        since = math.inf if self._last_inferred is None else t - self._last_inferred + 1e-3
        known = [(h.box, h.velocity, hints["t"]) for h in tracks]
        if any(not explained(r, known, t, LOOKBACK_S) for r in regions):
            return "motion"  # change where no track is: perhaps a new object
        # a moving track crosses a line or a zone's edge (at hints' time + reach_s) within a frame
        # interval of this frame: the frames either side of the crossing are seen, not predicted
        # (the hints may be frames behind; the crossing's time does not depend on that)
        frame_s = 0.1 if self._frame_s is None else self._frame_s
        crossing = (hints["t"] + h.reach_s for h in tracks if h.moving)
        if any(t - frame_s < c <= t + frame_s for c in crossing):
            return "geometry"
        # a moving track within reach of a line or a zone's edge, whatever its direction: every
        # frame is seen while it is there. An object that turns between inferred frames leaves
        # its predicted box (a new track, its crossing back never counted), and one that stops
        # short of the line has predicted boxes that cross it (a crossing that never was);
        # within reach: where it could be by the next track check; only for tracks fast for
        # their size (measured: at walking pace the checks alone keep the counts exact)
        age = max(0.0, t - hints["t"])
        if any(h.moving and h.near_px <= _reach_px(h, age) and _outruns(h) for h in tracks):
            return "geometry"
        # moving tracks are re-inferred, and so are tracks the last inferred frame missed (a
        # detector's miss, an object that turned): found again before lost_seconds ends them
        if (any(h.moving for h in tracks) or hints.get("missing")) and since >= TRACK_CHECK_S:
            return "tracks"
        if since >= self.options.keyframe_s:
            return "keyframe"
        return None

    def report(self) -> dict:
        """Frames inferred per reason and skipped: they add up to the frames this gate saw."""
        with self._lock:
            inferred = sum(self.counts.values())
            seen = inferred + self.skipped
            out = {
                "mode": self.options.mode,
                "inferred": inferred,
                "skipped": self.skipped,
                "inferred_share": round(inferred / seen, 4) if seen else None,
                "reasons": dict(self.counts),
            }
            if self.options.target_fps is not None:
                out["target_fps"] = self.options.target_fps
                out["rate_skipped"] = self.rate_skipped
        if self.motion is not None:
            out["light_changes"] = self.motion.light_changes
        return out


def gates_for(options: GateOptions, streams: int) -> list[StreamGate] | None:
    """One gate per stream (its masks), or None when gating is off (and no --target-fps)."""
    if not options.on:
        return None
    options.check_streams(streams)
    masks = [parse_mask(m, streams) for m in options.masks]
    return [
        StreamGate(options.for_stream(i), [p for s, p in masks if s in (None, i)])
        for i in range(streams)
    ]
