"""Network streams (``rtsp://``, ``rtsps://``): one reconnecting :class:`StreamSource` through
GStreamer or OpenCV's FFmpeg, its reconnects, stalls and downtime counted."""

from __future__ import annotations

import logging
import os
import threading
import time

from edgert.apps.uris import check_stream_uri, encoded, redact
from edgert.runtime.errors import SourceError, StreamLost

from .. import media
from ..media.opencv_log import quiet_ffmpeg, quiet_opencv
from .base import FrameSource, SourceOptions
from .gst import choose_decoder
from .rtsp_ask import UNAUTHORIZED

log = logging.getLogger(__name__)


class _FfmpegConnection:
    """One RTSP connection through OpenCV's FFmpeg back end: its open timeout bounds the
    connection attempt, its read timeout (the stall timeout) a read."""

    decoder = "ffmpeg"
    media_time = None

    def __init__(self, url: str, timeout_s: float, stall_s: float) -> None:
        import cv2

        from .rtsp_ask import why_not

        params = [
            cv2.CAP_PROP_OPEN_TIMEOUT_MSEC,
            int(timeout_s * 1000),
            cv2.CAP_PROP_READ_TIMEOUT_MSEC,
            int(stall_s * 1000),
        ]
        with quiet_opencv():  # FFmpeg parses URIs strictly: the credentials percent-encoded
            self.cap = cv2.VideoCapture(encoded(url), cv2.CAP_FFMPEG, params)
        if not self.cap.isOpened():
            self.cap.release()
            raise StreamLost(why_not(url, timeout_s) or "no answer")
        self.stall_s = stall_s
        try:
            self.first = self.read(stall_s, None)
        except StreamLost:
            self.cap.release()
            raise StreamLost("opened but no frames") from None
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
                raise StreamLost(f"stalled: no frame for {self.stall_s:g} s", stalled=True)
            raise StreamLost("the stream ended or dropped")
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
    without frames are counted (:meth:`stats`). Backoff waits end at once on
    :meth:`cancel`."""

    @property
    def decodes(self) -> str:
        return self.decoder

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
        self.packet_tap = None

    def tap_packets(self):
        """The camera's own H.264/H.265 as it arrives (GStreamer only: FFmpeg's decoder gives
        no packets); kept across reconnects."""
        if self.decoder != "gstreamer":
            return None
        if self.packet_tap is None:
            self.packet_tap = media.PacketTap()
        return self.packet_tap

    def cancel(self) -> None:
        self._cancel.set()

    def _attempt(self, timeout_s: float):
        if self.decoder == "ffmpeg":
            return _FfmpegConnection(self.url, timeout_s, self.opts.stall_timeout)
        if self._have is None:
            self._have = media.elements()
        o = self.opts
        launch = media.rtsp_source(self.url, o.rtsp_latency_ms, o.rtsp_transport, timeout_s)
        return media.GstConnection(
            launch, True, self._have, timeout_s, self._cancel, self.packet_tap, o.fit
        )

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
            except StreamLost as exc:
                last = str(exc)
                if "Unauthorized" in last:  # both decoders say it alike (GStreamer's own word)
                    last = UNAUTHORIZED
            else:
                self.conn, self._first = conn, conn.first
                self.fps = conn.fps() or self.fps
                if self._down_since is not None:  # back after a loss
                    self.reconnects += 1
                    self.downtime_s += time.monotonic() - self._down_since
                    self._down_since = None
                    log.warning(
                        "%s: reconnected after %.1f s", self.description, time.monotonic() - start
                    )
                return
            self.last_error = last
            if self._cancel.is_set():
                break  # stopped during the attempt: no retry to announce
            no_time = deadline is not None and deadline - time.monotonic() <= delay
            if (not forever and attempt >= o.reconnect_tries) or no_time:
                break  # the error below says it
            log.warning(
                "%s: attempt %d%s failed (%s); retrying in %.1f s",
                self.description,
                attempt,
                tries,
                last,
                delay,
            )
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
                except StreamLost as exc:
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

    @property
    def scaled_from(self):
        """(height, width) of the camera's frame when the last frame came scaled (GStreamer)."""
        return getattr(self.conn, "scaled_from", None)

    @property
    def view(self):
        """The camera's full picture of the last frame, while a viewer watches (GStreamer)."""
        return getattr(self.conn, "view", None)

    def stats(self) -> dict:
        """The decoder, the connection's state, reconnects, stalls and time without frames."""
        down = self.downtime_s
        if self._down_since is not None:
            down += time.monotonic() - self._down_since
        state = (
            "up" if self.conn is not None else "reconnecting" if self._down_since else "connecting"
        )
        return {
            "decoder": getattr(self.conn, "decoder", None) or self.decoder,
            "connection": state,
            "reconnects": self.reconnects,
            "stalls": self.stalls,
            "downtime_s": round(down, 3),
            "last_error": self.last_error,
            # how many tries a (re)connection gets: "forever" waits for a camera that reboots
            "reconnect": "forever"
            if self.opts.reconnect_tries is None
            else self.opts.reconnect_tries,
        }

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


def open_uri(uri: str, opts: SourceOptions) -> StreamSource:
    try:
        check_stream_uri(uri)
    except ValueError as exc:
        raise SourceError(str(exc)) from None
    decoder, note = choose_decoder(opts.decoder, "rtsp")
    if decoder == "ffmpeg":
        quiet_ffmpeg()  # here, on the thread that opens sources, before capture threads run
        if opts.rtsp_transport != "auto":  # read by FFmpeg when it opens the stream
            os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = f"rtsp_transport;{opts.rtsp_transport}"
    return StreamSource(uri, opts, decoder, note)
