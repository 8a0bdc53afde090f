"""What every frame source shares: the options, the interface, how a URI is shown (passwords
hidden) and keeping OpenCV's and FFmpeg's own log lines off the terminal."""

from __future__ import annotations

import contextlib
import logging
import math
import os
from dataclasses import dataclass

import numpy as np

from edgert.apps.uris import redact  # noqa: F401 - sources print URIs through it
from edgert.runtime.errors import SourceError

log = logging.getLogger(__name__)

TIMEOUT_MAX_S = 86400.0

SUPPORTED = "csi://N, v4l2:///dev/videoN, rtsp://..., file://PATH (video, image, folder or glob), a bare path, synthetic://"


@dataclass
class SourceOptions:
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
                raise SourceError(f"{flag} must be at most {TIMEOUT_MAX_S:g} s (a day: OpenCV takes "
                                  f"it in int milliseconds), not {value:g}")  # fmt: skip
        for name, allowed in (("decoder", ("auto", "gstreamer", "ffmpeg")),
                              ("rtsp_transport", ("auto", "tcp", "udp"))):  # fmt: skip
            if getattr(self, name) not in allowed:
                raise SourceError(
                    f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}"
                )


class FrameSource:
    description = "source"
    fps: float | None = None
    live = True  # a camera or stream: when inference is slower, old frames are dropped
    size: tuple[int, int] | None = None  # (width, height) when known before the first frame

    def read(self) -> tuple[np.ndarray, float] | None:
        """The next frame and its capture time, or None at the end of a finite source."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def cancel(self) -> None:
        """Ask a read that waits (a reconnect backoff) to give up soon; called on Ctrl-C."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def quiet_ffmpeg() -> None:
    """FFmpeg's own lines ("[tcp @ 0x...] Connection to tcp://... failed") go to stderr below
    OpenCV's logging; OpenCV reads this once, when its FFmpeg back end first opens something.
    ``--debug`` keeps them."""
    if not logging.getLogger("edgert").isEnabledFor(logging.DEBUG):
        os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # AV_LOG_QUIET


@contextlib.contextmanager
def quiet_opencv():
    """OpenCV's and FFmpeg's own log lines (timeouts, probing) stay off the terminal: edgert says
    what went wrong in one sentence. ``--debug`` keeps them."""
    import cv2

    if logging.getLogger("edgert").isEnabledFor(logging.DEBUG):
        yield
        return
    quiet_ffmpeg()
    try:
        previous = cv2.utils.logging.getLogLevel()
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
    except AttributeError:  # an OpenCV without the logging module
        yield
        return
    try:
        yield
    finally:
        cv2.utils.logging.setLogLevel(previous)
