"""The gate's options (``--gate``, ``--target-fps``, ``--keyframe``, ``--motion-mask``,
``--motion-sensitivity``, and a camera's own ``--stream-gate`` / ``--stream-target-fps``) and its
modes (:data:`POLICIES`); the gate itself is :mod:`.gate`. Device side: Python 3.8, numpy 1.x."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

import numpy as np

from edgert.runtime.errors import SourceError

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

    def decide(self, gate, t: float, regions: list) -> str | None:
        raise NotImplementedError

    def says(self, o: GateOptions) -> str:
        """Which frames it infers, for the start-up line."""
        raise NotImplementedError


class EveryFrame(Policy):
    form, starts = "off", False
    help = "every frame"

    def decide(self, gate, t: float, regions: list) -> str | None:
        return "rate" if gate.options.target_fps is not None else "always"

    def says(self, o: GateOptions) -> str:
        return f"{o.target_fps:g} evenly spaced frames a second (--target-fps)"


class Interval(Policy):
    form = "interval:N"
    help = "every Nth frame"

    def parse(self, text: str) -> int | None:
        m = re.fullmatch(r"interval:(\d+)", text)
        return int(m.group(1)) if m and int(m.group(1)) >= 1 else None

    def decide(self, gate, t: float, regions: list) -> str | None:
        return "interval" if (gate.count - 1) % gate.options.interval == 0 else None

    def says(self, o: GateOptions) -> str:
        return f"one frame in {o.interval}"


class Motion(Policy):
    form, motion = "motion", True
    help = (
        "the detector runs only on frames with new motion, moving tracks, tracks crossing a line "
        "or zone edge, a keyframe or a stream's start (skipped frames: the tracker predicts)"
    )

    def decide(self, gate, t: float, regions: list) -> str | None:
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
    streams: tuple = ()  # a camera's own mode: STREAM:MODE (--stream-gate)
    stream_rates: tuple = ()  # a camera's own rate: STREAM:N (--stream-target-fps)

    @property
    def on(self) -> bool:
        """Gates are made (a stream's own mode or rate turns them on for the run)."""
        own = any(_mode(f)[0] != "off" for f in self.streams) or bool(self.stream_rates)
        return self.mode != "off" or self.target_fps is not None or own

    @property
    def policy(self) -> Policy:
        return POLICIES[self.mode]

    @property
    def motion_anywhere(self) -> bool:
        """Some stream's gate looks for motion (its frames are scaled for it)."""
        return self.policy.motion or any(POLICIES[_mode(f)[0]].motion for f in self.streams)

    def for_stream(self, i: int) -> GateOptions:
        """Stream ``i``'s options: the run's, with the camera's own mode and rate where given."""
        mode, interval, rate = self.mode, self.interval, self.target_fps
        for form in self.streams:
            if split_stream(form)[0] == i:
                mode, interval = _mode(form)
        for form in self.stream_rates:
            if split_stream(form)[0] == i:
                rate = float(split_stream(form)[1])
        return dataclasses.replace(
            self, mode=mode, interval=interval, target_fps=rate, streams=(), stream_rates=()
        )

    def check_streams(self, streams: int) -> None:
        """SourceError when a camera's own mode or rate names a stream the run does not have."""
        for flag, forms in (
            ("--stream-gate", self.streams),
            ("--stream-target-fps", self.stream_rates),
        ):
            for form in forms:
                if split_stream(form)[0] >= streams:
                    raise SourceError(f"{flag} {form}: there is no stream {split_stream(form)[0]}")

    @classmethod
    def parse(
        cls,
        gate: str,
        keyframe_s: float = 2.0,
        masks=(),
        sensitivity: float = 0.5,
        target_fps: float | None = None,
        streams=(),
        stream_rates=(),
    ):
        mode, n = gate_mode(gate, "--gate")
        if not (math.isfinite(keyframe_s) and keyframe_s > 0):
            raise SourceError(f"--keyframe must be a positive number of seconds, not {keyframe_s}")
        if not 0 <= sensitivity <= 1:
            raise SourceError(f"--motion-sensitivity must be from 0 to 1, not {sensitivity}")
        if target_fps is not None and not (math.isfinite(target_fps) and target_fps > 0):
            raise SourceError(f"--target-fps must be a positive number, not {target_fps}")
        for form in streams:
            _mode(form)
        for form in stream_rates:
            stream, text = split_stream(form, "--stream-target-fps")
            try:
                ok = math.isfinite(float(text)) and float(text) > 0
            except ValueError:
                ok = False
            if not ok:
                raise SourceError(f"--stream-target-fps {form}: give STREAM:N, N above 0")
        return cls(
            mode,
            n,
            keyframe_s,
            tuple(masks),
            sensitivity,
            target_fps,
            *map(tuple, (streams, stream_rates)),
        )

    @staticmethod
    def check_given(options: GateOptions, keyframe, masks, sensitivity) -> None:
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
        if given and not options.motion_anywhere:
            mode = options.mode
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
            "--stream-gate",
            action="append",
            default=[],
            metavar="STREAM:MODE",
            help="one stream's own --gate (a camera's gate in a site file); repeatable",
        )
        g.add_argument(
            "--stream-target-fps",
            action="append",
            default=[],
            metavar="STREAM:N",
            help="one stream's own --target-fps (a camera's target_fps in a site file); repeatable",
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
            getattr(args, "stream_gate", None) or (),
            getattr(args, "stream_target_fps", None) or (),
        )
        cls.check_given(options, args.keyframe, args.motion_mask, args.motion_sensitivity)
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


def gate_mode(text, flag: str) -> tuple:
    """(mode, interval) of a ``--gate`` word; SourceError naming ``flag`` otherwise."""
    word = ("off" if text is None else text).strip().lower()
    taken = ((name, p.parse(word)) for name, p in POLICIES.items())
    mode, n = next(((name, n) for name, n in taken if n is not None), (None, None))
    if mode is None:
        *first, last = [p.form for p in POLICIES.values()]
        raise SourceError(f"{flag} {text!r}: give {', '.join(first)} or {last}")
    return mode, n


def split_stream(form: str, flag: str = "--stream-gate") -> tuple:
    """``STREAM:VALUE`` -> (stream, value); SourceError otherwise."""
    head, colon, value = str(form).partition(":")
    if not (colon and head.isascii() and head.isdigit() and value):
        raise SourceError(f"{flag} {form}: give STREAM:VALUE (a stream's number, then its own)")
    return int(head), value


def _mode(form: str) -> tuple:
    """(mode, interval) of a ``--stream-gate STREAM:MODE``."""
    return gate_mode(split_stream(form)[1], f"--stream-gate {form}:")
