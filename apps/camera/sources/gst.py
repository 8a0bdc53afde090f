"""GStreamer's own sources: CSI and V4L2 cameras and video files (NVDEC on a Jetson) through a
pipeline ending in an appsink, and the choice of decoder (``--decoder``) for streams and files."""

from __future__ import annotations

import threading

from edgert.runtime.errors import SourceError, StreamLost
from edgert.runtime.images import check_pixels

from .. import media
from .base import FrameSource


class _GstSource(FrameSource):
    """What a source that reads a :class:`media.GstConnection` (``conn``) forwards from it."""

    decodes = "gstreamer"

    conn = None
    _cancel: threading.Event

    @property
    def scaled_from(self):
        return self.conn.scaled_from

    @property
    def view(self):
        return self.conn.view

    def cancel(self) -> None:
        self._cancel.set()

    def close(self) -> None:
        self.conn.close()


class GstCameraSource(_GstSource):
    """A CSI or V4L2 camera through a GStreamer pipeline ending in an appsink; its frames scaled
    to the model's size on the way when ``fit`` says so (then ``size`` is the camera's)."""

    def __init__(self, description: str, pipeline, timeout_s: float, fit=None) -> None:
        self.description = description
        self._cancel = threading.Event()
        try:
            self.conn = media.GstConnection(
                pipeline, True, media.elements(), timeout_s, self._cancel, fit=fit
            )
        except StreamLost as exc:
            raise SourceError(f"cannot open {description}: {exc}") from None
        self.decoder = "gstreamer"
        self._first = self.conn.first
        h, w = self.conn.scaled_from or self._first[0].shape[:2]
        self.size, self.fps = (w, h), self.conn.fps()

    def read(self):
        got, self._first = self._first, None
        if got is not None:
            return got
        try:
            return self.conn.read(5.0, self._cancel)
        except StreamLost as exc:
            raise SourceError(f"{self.description} stopped delivering frames ({exc})") from None


class GstFileSource(_GstSource):
    """A video file decoded by GStreamer (NVDEC on a Jetson): every frame, its media time from
    the buffer's PTS; the first frame is decoded on opening, so the size is known."""

    live = False

    def __init__(self, path: str, loop: bool = False, fit=None) -> None:
        self.description = f"video {path} (GStreamer)"
        self.loop = loop
        self._cancel = threading.Event()
        have = media.elements()
        try:
            self.conn = media.GstConnection(
                media.file_pipeline(path, have, fit), False, have, 30.0, self._cancel, fit=fit
            )
        except StreamLost as exc:
            raise SourceError(f"cannot decode {path} with GStreamer: {exc}") from None
        self.decoder = self.conn.decoder
        self._first = self.conn.first
        if self._first is None:
            self.conn.close()
            raise SourceError(f"{path} holds no video frames")
        h, w = self.conn.scaled_from or self._first[0].shape[:2]
        check_pixels(w, h, self.description)
        self.size, self.fps = (w, h), self.conn.fps()
        self.media_time = None
        self._offset = 0.0

    def read(self):
        got, self._first = self._first, None
        if got is None:
            try:
                got = self.conn.read(30.0, self._cancel)
            except StreamLost as exc:
                raise SourceError(f"{self.description}: {exc}") from None
            if got is None and self.loop and self.conn.rewind():
                self._offset = (self.media_time or 0.0) + 1.0 / (self.fps or 30.0)
                got = self.conn.read(30.0, self._cancel)
            if got is None:
                return None
        if self.conn.media_time is not None:
            self.media_time = self._offset + self.conn.media_time
        return got


def choose_decoder(requested: str, kind: str) -> tuple[str, str | None]:
    """(gstreamer or ffmpeg, a note when auto falls back) for a source of ``kind`` (rtsp, file).
    auto: GStreamer for network streams whenever it is there (its jitter buffer, hardware
    decode, stall and end detection); for files only with a hardware decoder (elsewhere both
    decode with FFmpeg's own decoders, and OpenCV's is the proven path)."""
    if requested == "ffmpeg":
        return "ffmpeg", None
    ok, why = media.available()
    if requested == "gstreamer":
        if not ok:
            raise SourceError(f"--decoder gstreamer: {why}; {media.INSTALL}")
        return "gstreamer", None
    if kind == "file":
        return ("gstreamer" if ok and media.hardware_decoder(media.elements()) else "ffmpeg"), None
    if ok:
        return "gstreamer", None
    return "ffmpeg", (
        f"{why}: RTSP is decoded by OpenCV's FFmpeg on the CPU; for hardware "
        f"decode and low latency {media.INSTALL}"
    )
