"""Event-gated inference (``--gate``): per stream, before inference, decide whether a frame goes to
the detector, and why. Frigate's idea, kept exact: motion found on a small grey copy of the frame
against a slowly adapting background (a light change, sensor noise and compression are not
motion; ``--motion-mask`` polygons are ignored), and besides motion the reasons that keep tracks,
lines and zones right through the gaps:

    start       the first frames of a stream, and after a gap (a reconnect)
    motion      the motion detector found change
    tracks      live tracks are moving (their boxes keep being corrected)
    geometry    a track is near a line or inside a zone (its next position is confirmed)
    keyframe    ``--keyframe S`` passed since the last inferred frame (still objects, arrivals)
    interval    ``--gate interval:N``: every Nth frame (DeepStream's fixed skip, for comparison)

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

REASONS = ("start", "motion", "tracks", "geometry", "keyframe", "interval")
START_FRAMES = 3  # frames inferred when a stream starts or comes back
GAP_S = 1.0  # a capture-time gap this long is a restart (a reconnect, a camera that rebooted)
WIDTH = 320  # the motion detector's grey copy, pixels wide
LIGHT_CHANGE = 0.4  # a share of changed pixels this large at once is the light, not an object


@dataclass(frozen=True)
class GateOptions:
    """``--gate motion|interval:N|off``, ``--keyframe S``, ``--motion-mask``, ``--motion-sensitivity``."""

    mode: str = "off"
    interval: int = 1
    keyframe_s: float = 2.0
    masks: tuple = ()  # [STREAM:]x1,y1,x2,y2,x3,y3,... polygons in pixels or fractions
    sensitivity: float = 0.5  # 0..1: higher finds smaller and fainter changes

    @classmethod
    def parse(cls, gate: str, keyframe_s: float = 2.0, masks=(), sensitivity: float = 0.5):
        text = (gate or "off").strip().lower()
        if text in ("off", "motion"):
            mode, n = text, 1
        else:
            m = re.fullmatch(r"interval:(\d+)", text)
            if not m or int(m.group(1)) < 1:
                raise SourceError(f"--gate {gate!r}: give motion, interval:N (N >= 1) or off")
            mode, n = "interval", int(m.group(1))
        if not (math.isfinite(keyframe_s) and keyframe_s > 0):
            raise SourceError(f"--keyframe must be a positive number of seconds, not {keyframe_s}")
        if not 0 <= sensitivity <= 1:
            raise SourceError(f"--motion-sensitivity must be from 0 to 1, not {sensitivity}")
        return cls(mode, n, keyframe_s, tuple(masks), sensitivity)

    @staticmethod
    def add_arguments(parser) -> None:
        from edgert.apps.argtypes import fraction, positive_float

        g = parser.add_argument_group("event-gated inference")
        g.add_argument(
            "--gate",
            default="off",
            metavar="motion|interval:N|off",
            help="motion: the detector runs only on frames with motion, moving tracks, tracks at a "
            "line or zone, a keyframe or a stream's start (skipped frames: the tracker predicts); "
            "interval:N: every Nth frame; off (default): every frame",
        )
        g.add_argument(
            "--keyframe",
            type=positive_float,
            default=2.0,
            metavar="S",
            help="with --gate: a frame is inferred at least every S seconds (default 2)",
        )
        g.add_argument(
            "--motion-mask",
            action="append",
            default=[],
            metavar="[STREAM:]x1,y1,x2,y2,x3,y3,...",
            help="a polygon whose changes are not motion (a tree, a clock overlay); repeatable",
        )
        g.add_argument(
            "--motion-sensitivity",
            type=fraction,
            default=0.5,
            metavar="0-1",
            help="higher finds smaller and fainter motion (default 0.5)",
        )

    @classmethod
    def from_args(cls, args) -> GateOptions:
        return cls.parse(args.gate, args.keyframe, args.motion_mask, args.motion_sensitivity)


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
    return stream, np.array(values, np.float64).reshape(-1, 2)


class MotionDetector:
    """Motion on a small grey copy against a slowly adapting background (OpenCV: resize, blur,
    accumulateWeighted, absdiff, threshold, dilate, contours). A change over ``LIGHT_CHANGE`` of
    the picture at once is a light change: the background is re-based to it, no motion."""

    def __init__(self, sensitivity: float = 0.5, masks: list | None = None) -> None:
        self.threshold = int(round(45 - 35 * sensitivity))  # grey levels: 45 .. 10
        self.min_area = 0.002 * (1.0 - 0.9 * sensitivity)  # share of the picture: 0.2 % .. 0.02 %
        self.masks = list(masks or [])  # point arrays, pixels or fractions of the frame
        self.background = None
        self.mask = None
        self.size = None
        self.light_changes = 0

    def _prepare(self, frame: np.ndarray):
        import cv2

        h, w = frame.shape[:2]
        size = (WIDTH, max(1, round(h * WIDTH / w)))
        grey = frame if frame.ndim == 2 else cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
        small = cv2.GaussianBlur(cv2.resize(grey, size, interpolation=cv2.INTER_AREA), (5, 5), 0)
        if size != self.size:
            self.size, self.background = size, None
            self.mask = None
            if self.masks:
                self.mask = np.zeros((size[1], size[0]), np.uint8)
                for pts in self.masks:
                    scale = (size[0], size[1]) if pts.max() <= 1.0 else (size[0] / w, size[1] / h)
                    poly = np.round(pts * np.array(scale)).astype(np.int32)
                    cv2.fillPoly(self.mask, [poly], 255)
        return small

    def __call__(self, frame: np.ndarray) -> bool:
        """Whether ``frame`` holds motion."""
        import cv2

        small = self._prepare(frame)
        if self.background is None:
            self.background = small.astype(np.float32)
            return False
        diff = cv2.absdiff(small, cv2.convertScaleAbs(self.background))
        _, changed = cv2.threshold(diff, self.threshold, 255, cv2.THRESH_BINARY)
        if self.mask is not None:
            changed[self.mask > 0] = 0
        share = cv2.countNonZero(changed) / changed.size
        if share > LIGHT_CHANGE:
            self.background = small.astype(np.float32)  # the light changed: re-base
            self.light_changes += 1
            return False
        cv2.accumulateWeighted(small, self.background, 0.05)
        if share * 1.0 < self.min_area:
            return False
        changed = cv2.dilate(changed, None, iterations=2)
        contours, _ = cv2.findContours(changed, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        area = changed.size * self.min_area
        return any(cv2.contourArea(c) >= area for c in contours)


class StreamGate:
    """One stream's gate: ``decide(frame)`` gives the reason to infer it, or None to skip it.
    ``hints`` is what the output thread last saw of the stream's tracks (moving ones, ones at a
    line or in a zone), read here without waiting."""

    def __init__(self, options: GateOptions, masks: list | None = None) -> None:
        self.options = options
        self.motion = (
            MotionDetector(options.sensitivity, masks) if options.mode == "motion" else None
        )
        self.counts: collections.Counter = collections.Counter()
        self.skipped = 0
        self._last_t: float | None = None
        self._last_inferred: float | None = None
        self._start_left = START_FRAMES
        self._n = 0
        self.hints = {"tracks": False, "geometry": False}
        self._lock = threading.Lock()

    def decide(self, frame) -> str | None:
        t = frame.t_scene
        o = self.options
        if self._last_t is not None and t - self._last_t > GAP_S:
            self._start_left = START_FRAMES  # a reconnect, a camera that came back
        self._last_t = t
        self._n += 1
        moved = self.motion(frame.image) if self.motion is not None else False
        if o.mode == "off":
            reason = "always"
        elif self._start_left > 0:
            self._start_left -= 1
            reason = "start"
        elif o.mode == "interval":
            reason = "interval" if (self._n - 1) % o.interval == 0 else None
        elif moved:
            reason = "motion"
        elif self.hints["tracks"]:
            reason = "tracks"
        elif self.hints["geometry"]:
            reason = "geometry"
        elif self._last_inferred is None or t - self._last_inferred >= o.keyframe_s:
            reason = "keyframe"
        else:
            reason = None
        with self._lock:
            if reason is None:
                self.skipped += 1
            else:
                self.counts[reason] += 1
                self._last_inferred = t
        return reason

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
        if self.motion is not None:
            out["light_changes"] = self.motion.light_changes
        return out


def gates_for(options: GateOptions, streams: int) -> list[StreamGate] | None:
    """One gate per stream (its masks), or None when gating is off."""
    if options.mode == "off":
        return None
    masks = [parse_mask(m, streams) for m in options.masks]
    return [StreamGate(options, [p for s, p in masks if s in (None, i)]) for i in range(streams)]
