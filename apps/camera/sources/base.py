"""What every frame source shares: its options (:class:`SourceOptions`) and its contract
(:class:`FrameSource`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edgert.runtime.errors import SourceError

TIMEOUT_MAX_S = 86400.0


@dataclass
class SourceOptions:
    """How sources open and decode: the camera format, looping, reconnection and the decoder.
    ``add_arguments`` declares their flags on a parser and ``from_args`` reads them back."""

    width: int | None = None
    height: int | None = None
    fps: float | None = None
    codec: str | None = None  # mjpeg | yuyv (V4L2)
    loop: bool = False
    reconnect_tries: int | None = 5  # per (re)connection; None: for ever (--reconnect forever)
    reconnect_backoff: float = 0.5  # seconds, doubled per try
    max_backoff: float = 10.0  # seconds: the longest wait between two tries
    connect_deadline: float = 20.0  # seconds for all attempts of one (re)connection (not forever)
    io_timeout: float = 5.0  # seconds: one connection attempt
    stall_timeout: float = 5.0  # seconds without a frame while connected: a stall, reconnected
    decoder: str = "auto"  # auto | gstreamer | ffmpeg (network streams and video files)
    rtsp_latency_ms: int = 100  # GStreamer's jitter buffer
    rtsp_transport: str = "auto"  # tcp | udp | auto
    decoder_scale: str = "auto"  # auto: GStreamer scales to the model when no sink needs frames
    fit: object = None  # media.Fit: set by the camera run where decoder_scale allows it

    def __post_init__(self) -> None:
        for name in ("width", "height"):
            value = getattr(self, name)
            if value is not None and not 1 <= value <= 16384:
                raise SourceError(f"--{name} must be from 1 to 16384 pixels, not {value}")
        if self.fps is not None and not (math.isfinite(self.fps) and 0 < self.fps <= 1000):
            raise SourceError(f"--fps must be a positive number up to 1000, not {self.fps}")
        for flag, name in (("--stall-timeout", "stall_timeout"), ("io_timeout", "io_timeout")):
            value = getattr(
                self, name
            )  # OpenCV takes them as int milliseconds (2^31 ms: 24.8 days)
            if not (math.isfinite(value) and value > 0):
                raise SourceError(f"{flag} must be a positive number of seconds, not {value}")
            if value > TIMEOUT_MAX_S:
                raise SourceError(
                    f"{flag} must be at most {TIMEOUT_MAX_S:g} s (a day: OpenCV takes "
                    f"it in int milliseconds), not {value:g}"
                )
        for name, allowed in (
            ("decoder", ("auto", "gstreamer", "ffmpeg")),
            ("rtsp_transport", ("auto", "tcp", "udp")),
            ("decoder_scale", ("auto", "off")),
        ):
            if getattr(self, name) not in allowed:
                raise SourceError(
                    f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}"
                )

    @staticmethod
    def add_arguments(parser) -> None:
        """The sources' flags: camera format and looping, and a network stream's group."""
        from edgert.apps.argtypes import nonneg_int, positive_float, positive_int

        parser.add_argument("--width", type=positive_int)
        parser.add_argument("--height", type=positive_int)
        parser.add_argument("--fps", type=positive_float)
        parser.add_argument("--codec", choices=["mjpeg", "yuyv"])
        parser.add_argument("--loop", action="store_true", help="loop files, folders and globs")
        n = parser.add_argument_group("network streams (rtsp://)")
        n.add_argument(
            "--decoder",
            choices=["auto", "gstreamer", "ffmpeg"],
            default="auto",
            help="auto (default): GStreamer for streams when PyGObject is there (NVDEC on a "
            "Jetson), and for files when there is a hardware decoder; else OpenCV's FFmpeg",
        )
        n.add_argument(
            "--decoder-scale",
            choices=["auto", "off"],
            default="auto",
            help="auto (default): GStreamer scales frames to the model's input (videoscale; "
            "nvvidconv on a Jetson) when no output needs full frames; off: full frames always",
        )
        n.add_argument(
            "--reconnect",
            type=_tries,
            default=5,
            metavar="N|forever",
            help="tries per (re)connection of a stream that drops (default 5; forever for "
            "cameras that reboot)",
        )
        n.add_argument(
            "--stall-timeout",
            type=positive_float,
            default=5.0,
            metavar="S",
            help="a connected stream without a frame this long is a stall, reconnected (default 5)",
        )
        n.add_argument(
            "--rtsp-latency",
            type=nonneg_int,
            default=100,
            metavar="MS",
            help="GStreamer's RTSP jitter buffer (default 100; GStreamer's own is 2000)",
        )
        n.add_argument(
            "--rtsp-transport",
            choices=["auto", "tcp", "udp"],
            default="auto",
            help="RTP over TCP or UDP (default auto: UDP, then TCP)",
        )

    @classmethod
    def from_args(cls, args) -> SourceOptions:
        return cls(
            width=args.width,
            height=args.height,
            fps=args.fps,
            codec=args.codec,
            loop=args.loop,
            decoder=args.decoder,
            decoder_scale=args.decoder_scale,
            reconnect_tries=args.reconnect,
            stall_timeout=args.stall_timeout,
            rtsp_latency_ms=args.rtsp_latency,
            rtsp_transport=args.rtsp_transport,
        )


class NoSuchPath(SourceError):
    """A source named a path that is not there (the table's user adds the forms it knows)."""


def _tries(text: str):
    """--reconnect: a count of tries, or forever (None)."""
    from edgert.apps.argtypes import positive_int

    if text.strip().lower() in ("forever", "inf", "always"):
        return None
    return positive_int(text)


class FrameSource:
    """The contract of a source: ``read`` the next frame, ``close``, ``cancel`` a waiting read,
    and what it knows before the first frame (``description``, ``fps``, ``size``, ``live``, a
    ``note`` to show). ``stats`` adds its own numbers to its stream's statistics (a network
    stream's connection, the images a folder could not read); the pipeline, the summary and the
    metrics read them there and ask nothing else of a source."""

    description = "source"
    fps: float | None = None
    live = True  # a camera or stream: when inference is slower, old frames are dropped
    size: tuple[int, int] | None = None  # (width, height) when known before the first frame
    note: str | None = None  # said once when it opens (a decoder fallback)
    decodes: str | None = None  # who decodes its video: "gstreamer", "ffmpeg" (None: no video)
    # (height, width) of the camera's frame when the last frame read came scaled by the decoder
    scaled_from: tuple[int, int] | None = None
    # the camera's full picture of the last frame read, when it came scaled and a viewer watches
    view = None

    def read(self) -> tuple[np.ndarray, float] | None:
        """The next frame and its capture time, or None at the end of a finite source."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def cancel(self) -> None:
        """Ask a read that waits (a reconnect backoff) to give up soon; called on Ctrl-C."""

    def stats(self) -> dict:
        """This source's own numbers for its stream's statistics; none by default."""
        return {}

    def tap_packets(self):
        """A :class:`~edgert.apps.camera.media.PacketTap` that will hold the source's encoded
        video as it arrives, for a sink that keeps it (clips), asked before the first read;
        None where the source has no encoded video to give (the default)."""
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def stats_of(source) -> dict:
    """A source's own numbers; none for an object that only reads (``run_streams`` takes any
    object with ``read()``, as it always has)."""
    return source.stats() if isinstance(source, FrameSource) else {}
