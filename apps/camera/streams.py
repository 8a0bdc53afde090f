"""Network streams and GStreamer sources: one reconnecting :class:`StreamSource` for RTSP through
GStreamer or OpenCV's FFmpeg (reconnects, stalls and downtime counted), video files and cameras
through GStreamer, and the choice of decoder (``--decoder``)."""

from __future__ import annotations

import logging
import threading
import time

from edgert.runtime.errors import SourceError
from edgert.runtime.images import check_pixels

from . import gstreamer
from .gstreamer import Lost
from .source_base import FrameSource, SourceOptions, quiet_opencv, redact

log = logging.getLogger(__name__)


class _FfmpegConnection:
    """One RTSP connection through OpenCV's FFmpeg back end: its open timeout bounds the
    connection attempt, its read timeout (the stall timeout) a read."""

    decoder = "ffmpeg"
    media_time = None

    def __init__(self, url: str, timeout_s: float, stall_s: float) -> None:
        import cv2

        params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, int(timeout_s * 1000),
                  cv2.CAP_PROP_READ_TIMEOUT_MSEC, int(stall_s * 1000)]  # fmt: skip
        with quiet_opencv():
            self.cap = cv2.VideoCapture(url, cv2.CAP_FFMPEG, params)
        if not self.cap.isOpened():
            self.cap.release()
            raise Lost("no answer")
        self.stall_s = stall_s
        try:
            self.first = self.read(stall_s, None)
        except Lost:
            self.cap.release()
            raise Lost("opened but no frames") from None
        fps = self.cap.get(cv2.CAP_PROP_FPS)
        self._fps = fps if fps and fps > 0 else None

    def fps(self):
        return self._fps

    def read(self, timeout_s: float, cancel):
        t0 = time.monotonic()
        with quiet_opencv():
            ok, frame = self.cap.read()
        if not ok:
            if time.monotonic() - t0 >= 0.9 * self.stall_s:
                raise Lost(f"stalled: no frame for {self.stall_s:g} s", stalled=True)
            raise Lost("the stream ended or dropped")
        return frame, time.monotonic()

    def close(self) -> None:
        self.cap.release()


class StreamSource(FrameSource):
    """A network stream (RTSP) through GStreamer or FFmpeg, opened and reconnected on the capture
    thread (the first read), so Ctrl-C is never stuck behind a connection attempt.

    Each attempt is bounded by ``io_timeout``; with a number of tries, all attempts of one
    (re)connection by ``connect_deadline``; ``reconnect_tries=None`` tries for ever (a camera
    that reboots), backing off up to ``max_backoff``. A stream that ends, fails, or sends nothing
    for ``stall_timeout`` while connected is reconnected; reconnections, stalls and the time
    without frames are counted (:meth:`connection_stats`). Backoff waits end at once on
    :meth:`cancel`."""

    def __init__(self, url: str, opts: SourceOptions, decoder: str = "ffmpeg", note=None) -> None:
        self.url, self.opts, self.decoder = url, opts, decoder
        self.note = note
        self.description = f"RTSP stream {redact(url)}"
        self.conn = None
        self._first = None
        self._cancel = threading.Event()
        self._busy = threading.Lock()  # held while a call uses self.conn
        self.reconnects = 0
        self.stalls = 0
        self.downtime_s = 0.0
        self.last_error: str | None = None
        self._down_since: float | None = None
        self._have: set | None = None

    def cancel(self) -> None:
        self._cancel.set()

    def _attempt(self, timeout_s: float):
        if self.decoder == "ffmpeg":
            return _FfmpegConnection(self.url, timeout_s, self.opts.stall_timeout)
        if self._have is None:
            self._have = gstreamer.elements()
        o = self.opts
        launch = gstreamer.rtsp_source(self.url, o.rtsp_latency_ms, o.rtsp_transport, timeout_s)
        return gstreamer.GstConnection(launch, True, self._have, timeout_s, self._cancel)

    def _connect(self) -> None:
        o = self.opts
        delay = o.reconnect_backoff
        start = time.monotonic()
        forever = o.reconnect_tries is None
        deadline = None if forever else start + o.connect_deadline
        last = "no answer"
        attempt = 0
        tries = "" if forever else f"/{o.reconnect_tries}"
        while forever or attempt < o.reconnect_tries:
            attempt += 1
            left = o.io_timeout if deadline is None else deadline - time.monotonic()
            if self._cancel.is_set() or left <= 0:
                break
            try:
                conn = self._attempt(min(o.io_timeout, left))
            except Lost as exc:
                last = str(exc)
            else:
                self.conn, self._first = conn, conn.first
                self.fps = conn.fps() or self.fps
                if self._down_since is not None:  # back after a loss
                    self.reconnects += 1
                    self.downtime_s += time.monotonic() - self._down_since
                    self._down_since = None
                    log.warning("%s: reconnected after %.1f s", self.description,
                                time.monotonic() - start)  # fmt: skip
                return
            self.last_error = last
            no_time = deadline is not None and deadline - time.monotonic() <= delay
            if (not forever and attempt >= o.reconnect_tries) or no_time:
                break  # the error below says it
            log.warning("%s: attempt %d%s failed (%s); retrying in %.1f s", self.description,
                        attempt, tries, last, delay)  # fmt: skip
            if self._cancel.wait(delay):
                break
            delay = min(delay * 2, o.max_backoff)
        if self._cancel.is_set():
            raise SourceError(f"{self.description}: stopped while connecting")
        raise SourceError(
            f"cannot reach {self.description} after {attempt} tries in "
            f"{time.monotonic() - start:.1f} s ({last})"
        )

    def read(self):
        with self._busy:
            if self.conn is None:
                self._connect()
            if self._first is None:
                try:
                    self._first = self.conn.read(self.opts.stall_timeout, self._cancel)
                except Lost as exc:
                    if self._cancel.is_set():
                        raise SourceError(f"{self.description}: stopped") from None
                    self.stalls += exc.stalled
                    self.last_error = str(exc)
                    log.warning("%s: %s; reconnecting", self.description, exc)
                    self.conn.close()
                    self.conn = None
                    self._down_since = time.monotonic()
                    self._connect()
            got, self._first = self._first, None
            return got

    def connection_stats(self) -> dict:
        down = self.downtime_s
        if self._down_since is not None:
            down += time.monotonic() - self._down_since
        state = (
            "up" if self.conn is not None else "reconnecting" if self._down_since else "connecting"
        )
        return {"decoder": getattr(self.conn, "decoder", None) or self.decoder,
                "connection": state, "reconnects": self.reconnects, "stalls": self.stalls,
                "downtime_s": round(down, 3), "last_error": self.last_error}  # fmt: skip

    def close(self) -> None:
        self._cancel.set()
        # a capture thread still inside a native call keeps the connection; it goes with it
        if self._busy.acquire(timeout=0.2):
            try:
                if self.conn is not None:
                    self.conn.close()
                    self.conn = None
            finally:
                self._busy.release()


class GstCameraSource(FrameSource):
    """A CSI or V4L2 camera through a GStreamer pipeline ending in an appsink."""

    def __init__(self, description: str, pipeline: str, timeout_s: float) -> None:
        self.description = description
        self._cancel = threading.Event()
        try:
            self.conn = gstreamer.GstConnection(pipeline, True, set(), timeout_s, self._cancel)
        except Lost as exc:
            raise SourceError(f"cannot open {description}: {exc}") from None
        self.decoder = "gstreamer"
        self._first = self.conn.first
        h, w = self._first[0].shape[:2]
        self.size, self.fps = (w, h), self.conn.fps()

    def read(self):
        got, self._first = self._first, None
        if got is not None:
            return got
        try:
            return self.conn.read(5.0, self._cancel)
        except Lost as exc:
            raise SourceError(f"{self.description} stopped delivering frames ({exc})") from None

    def cancel(self) -> None:
        self._cancel.set()

    def close(self) -> None:
        self.conn.close()


class GstFileSource(FrameSource):
    """A video file decoded by GStreamer (NVDEC on a Jetson): every frame, its media time from
    the buffer's PTS; the first frame is decoded on opening, so the size is known."""

    live = False

    def __init__(self, path: str, loop: bool = False) -> None:
        self.description = f"video {path} (GStreamer)"
        self.loop = loop
        self._cancel = threading.Event()
        have = gstreamer.elements()
        try:
            self.conn = gstreamer.GstConnection(gstreamer.file_pipeline(path, have), False, have,
                                                30.0, self._cancel)  # fmt: skip
        except Lost as exc:
            raise SourceError(f"cannot decode {path} with GStreamer: {exc}") from None
        self.decoder = self.conn.decoder
        self._first = self.conn.first
        if self._first is None:
            self.conn.close()
            raise SourceError(f"{path} holds no video frames")
        h, w = self._first[0].shape[:2]
        check_pixels(w, h, self.description)
        self.size, self.fps = (w, h), self.conn.fps()
        self.media_time = None
        self._offset = 0.0

    def read(self):
        got, self._first = self._first, None
        if got is None:
            try:
                got = self.conn.read(30.0, self._cancel)
            except Lost as exc:
                raise SourceError(f"{self.description}: {exc}") from None
            if got is None and self.loop and self.conn.rewind():
                self._offset = (self.media_time or 0.0) + 1.0 / (self.fps or 30.0)
                got = self.conn.read(30.0, self._cancel)
            if got is None:
                return None
        if self.conn.media_time is not None:
            self.media_time = self._offset + self.conn.media_time
        return got

    def cancel(self) -> None:
        self._cancel.set()

    def close(self) -> None:
        self.conn.close()


def _gst_ok() -> bool:
    return gstreamer.available()[0]


def choose_decoder(requested: str, kind: str) -> tuple[str, str | None]:
    """(gstreamer or ffmpeg, a note when auto falls back) for a source of ``kind`` (rtsp, file).
    auto: GStreamer for network streams whenever it is there (its jitter buffer, hardware
    decode, stall and end detection); for files only with a hardware decoder (elsewhere both
    decode with FFmpeg's own decoders, and OpenCV's is the proven path)."""
    if requested == "ffmpeg":
        return "ffmpeg", None
    ok, why = gstreamer.available()
    if requested == "gstreamer":
        if not ok:
            raise SourceError(f"--decoder gstreamer: {why}; {gstreamer.INSTALL}")
        return "gstreamer", None
    if kind == "file":
        return (
            "gstreamer" if ok and gstreamer.hardware_decoder(gstreamer.elements()) else "ffmpeg"
        ), None
    if ok:
        return "gstreamer", None
    return "ffmpeg", (f"{why}: RTSP is decoded by OpenCV's FFmpeg on the CPU; for hardware "
                      f"decode and low latency {gstreamer.INSTALL}")  # fmt: skip
