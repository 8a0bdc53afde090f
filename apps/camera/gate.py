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
import re
import threading
from dataclasses import dataclass

import numpy as np

from edgert.runtime.errors import SourceError
from edgert.runtime.tracking.hints import Hint

from .motion import LOOKBACK_S, MotionDetector

REASONS = ("start", "motion", "tracks", "geometry", "keyframe", "interval", "rate")
START_FRAMES = 3  # frames inferred when a stream starts or comes back
GAP_S = 1.0  # a capture-time gap this long is a restart (a reconnect, a camera that rebooted)
TRACK_CHECK_S = 0.3  # tracked objects moving steadily: re-inferred this often (predicted between)


class Policy:
    """One ``--gate`` mode: how it is written, whether it looks for motion (the motion detector
    and its options), whether a stream's first frames are inferred first, and for each frame
    the reason it is inferred, or None (it is skipped). A new mode is a class and a row of
    ``POLICIES``."""

    form = ""  # as --gate takes it
    help = ""  # which frames it infers, for --gate's help
    motion = False  # needs the motion detector (and --keyframe, --motion-mask, ...)
    starts = True  # a stream's first START_FRAMES frames (and after a gap) are inferred

    def parse(self, text: str) -> int | None:
        """This mode's interval when ``text`` names it (1 where it takes none), else None."""
        return 1 if text == self.form else None

    def decide(self, gate: StreamGate, t: float, regions: list) -> str | None:
        raise NotImplementedError

    def says(self, o: GateOptions) -> str:
        """Which frames it infers, for the start-up line."""
        raise NotImplementedError


class EveryFrame(Policy):
    form, starts = "off", False
    help = "every frame"

    def decide(self, gate: StreamGate, t: float, regions: list) -> str | None:
        return "rate" if gate.options.target_fps is not None else "always"

    def says(self, o: GateOptions) -> str:
        return f"{o.target_fps:g} evenly spaced frames a second (--target-fps)"


class Interval(Policy):
    form = "interval:N"
    help = "every Nth frame"

    def parse(self, text: str) -> int | None:
        m = re.fullmatch(r"interval:(\d+)", text)
        return int(m.group(1)) if m and int(m.group(1)) >= 1 else None

    def decide(self, gate: StreamGate, t: float, regions: list) -> str | None:
        return "interval" if (gate.count - 1) % gate.options.interval == 0 else None

    def says(self, o: GateOptions) -> str:
        return f"one frame in {o.interval}"


class Motion(Policy):
    form, motion = "motion", True
    help = (
        "the detector runs only on frames with new motion, moving tracks, tracks crossing a line "
        "or zone edge, a keyframe or a stream's start (skipped frames: the tracker predicts)"
    )

    def decide(self, gate: StreamGate, t: float, regions: list) -> str | None:
        return gate.motion_reason(t, regions)

    def says(self, o: GateOptions) -> str:
        return (
            "frames with motion, moving tracks or tracks at a line or zone, and one every "
            f"{o.keyframe_s:g} s"
        )


POLICIES = {"motion": Motion(), "interval": Interval(), "off": EveryFrame()}


@dataclass(frozen=True)
class GateOptions:
    """``--gate motion|interval:N|off``, ``--keyframe S``, ``--motion-mask``, ``--motion-sensitivity``."""

    mode: str = "off"
    interval: int = 1
    keyframe_s: float = 2.0
    masks: tuple = ()  # [STREAM:]x1,y1,x2,y2,x3,y3,... polygons in pixels or fractions
    sensitivity: float = 0.5  # 0..1: higher finds smaller and fainter changes
    target_fps: float | None = None  # --target-fps: at most this many inferred frames a second

    @property
    def on(self) -> bool:
        return self.mode != "off" or self.target_fps is not None

    @property
    def policy(self) -> Policy:
        return POLICIES[self.mode]

    @classmethod
    def parse(
        cls,
        gate: str,
        keyframe_s: float = 2.0,
        masks=(),
        sensitivity: float = 0.5,
        target_fps: float | None = None,
    ):
        text = ("off" if gate is None else gate).strip().lower()
        taken = ((name, p.parse(text)) for name, p in POLICIES.items())
        mode, n = next(((name, n) for name, n in taken if n is not None), (None, None))
        if mode is None:
            *first, last = [p.form for p in POLICIES.values()]
            raise SourceError(f"--gate {gate!r}: give {', '.join(first)} or {last}")
        if not (math.isfinite(keyframe_s) and keyframe_s > 0):
            raise SourceError(f"--keyframe must be a positive number of seconds, not {keyframe_s}")
        if not 0 <= sensitivity <= 1:
            raise SourceError(f"--motion-sensitivity must be from 0 to 1, not {sensitivity}")
        if target_fps is not None and not (math.isfinite(target_fps) and target_fps > 0):
            raise SourceError(f"--target-fps must be a positive number, not {target_fps}")
        return cls(mode, n, keyframe_s, tuple(masks), sensitivity, target_fps)

    @staticmethod
    def check_given(mode: str, keyframe, masks, sensitivity) -> None:
        """SourceError when motion options are given without ``--gate motion`` (they would do
        nothing)."""
        given = [
            flag
            for flag, value in (
                ("--keyframe", keyframe),
                ("--motion-mask", masks or None),
                ("--motion-sensitivity", sensitivity),
            )
            if value is not None
        ]
        if given and not POLICIES[mode].motion:
            raise SourceError(
                f"{' and '.join(given)} apply to --gate motion, and the gate is "
                f"{'off' if mode == 'off' else mode}: give --gate motion, or leave them out"
            )

    @staticmethod
    def add_arguments(parser) -> None:
        from edgert.apps.argtypes import fraction, positive_float

        g = parser.add_argument_group("event-gated inference")
        default = GateOptions.mode
        g.add_argument(
            "--gate",
            default=default,
            metavar="|".join(p.form for p in POLICIES.values()),
            help="; ".join(
                f"{p.form}{' (default)' if p.form == default else ''}: {p.help}"
                for p in POLICIES.values()
            ),
        )
        g.add_argument(
            "--target-fps",
            type=positive_float,
            metavar="N",
            help="infer at most N frames a second per stream, evenly spaced (the frames between: "
            "the tracker predicts, as for --gate); with --gate, of the frames it chooses",
        )
        g.add_argument(
            "--keyframe",
            type=positive_float,
            default=None,
            metavar="S",
            help="with --gate motion: a frame is inferred at least every S seconds (default 2)",
        )
        g.add_argument(
            "--motion-mask",
            action="append",
            default=[],
            metavar="[STREAM:]x1,y1,x2,y2,x3,y3,...",
            help="with --gate motion: a polygon whose changes are not motion (a tree, a clock "
            "overlay), in pixels or fractions of the frame, inside it; repeatable",
        )
        g.add_argument(
            "--motion-sensitivity",
            type=fraction,
            default=None,
            metavar="0-1",
            help="higher finds smaller and fainter motion (default 0.5)",
        )

    @classmethod
    def from_args(cls, args) -> GateOptions:
        options = cls.parse(
            args.gate,
            2.0 if args.keyframe is None else args.keyframe,
            args.motion_mask,
            0.5 if args.motion_sensitivity is None else args.motion_sensitivity,
            getattr(args, "target_fps", None),
        )
        cls.check_given(options.mode, args.keyframe, args.motion_mask, args.motion_sensitivity)
        return options


def parse_mask(spec: str, streams: int) -> tuple[int | None, np.ndarray]:
    """``[STREAM:]x1,y1,...`` -> (stream or None for all, points [N, 2])."""
    m = re.fullmatch(r"(?:(\d+):)?([-0-9.eE, ]+)", spec.strip())
    try:
        values = [float(v) for v in m.group(2).split(",")] if m else []
    except ValueError:
        values = []
    if not m or len(values) < 6 or len(values) % 2:
        raise SourceError(
            f"--motion-mask {spec}: give [STREAM:]x1,y1,x2,y2,x3,y3,... (at least three points)"
        )
    stream = int(m.group(1)) if m.group(1) is not None else None
    if stream is not None and stream >= streams:
        raise SourceError(f"--motion-mask {spec}: there is no stream {stream}")
    if not all(math.isfinite(v) for v in values):
        raise SourceError(f"--motion-mask {spec}: a coordinate is not a finite number")
    points = np.array(values, np.float64).reshape(-1, 2)
    from edgert.runtime.tracking.counting import first_self_crossing

    crossing = first_self_crossing(tuple(map(tuple, points)))
    if crossing is not None:
        i, j = crossing
        raise SourceError(
            f"--motion-mask {spec}: its edges {i + 1} and {j + 1} cross (give the corners in "
            "order around the polygon)"
        )
    return stream, points


def check_masks_in_frame(options: GateOptions, stream: int, size: tuple | None) -> None:
    """SourceError when a ``--motion-mask`` of stream ``stream`` has a point outside its frame
    (pixels: 0..width, 0..height; fractions: 0..1), as lines and zones are refused."""
    if size is None or not options.policy.motion:
        return
    w, h = size
    for spec in options.masks:
        which, pts = parse_mask(spec, stream + 1)
        if which not in (None, stream):
            continue
        fractions = pts.max() <= 1.0
        top = (1.0, 1.0) if fractions else (w, h)
        for x, y in pts:
            if not (0 <= x <= top[0] and 0 <= y <= top[1]):
                raise SourceError(
                    f"--motion-mask {spec} on stream {stream}: point ({x:g}, {y:g}) is outside "
                    f"the {w}x{h} frame" + (" (as fractions, 0 to 1)" if fractions else "")
                )


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
    masks = [parse_mask(m, streams) for m in options.masks]
    return [StreamGate(options, [p for s, p in masks if s in (None, i)]) for i in range(streams)]
