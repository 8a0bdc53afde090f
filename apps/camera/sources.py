"""Frame sources by URI, like jetson-utils:

    csi://0                      Jetson CSI camera (GStreamer nvarguscamerasrc)
    v4l2:///dev/video0           USB / V4L2 camera (--width --height --fps --codec mjpeg|yuyv)
    rtsp://host:port/path        network stream (GStreamer or FFmpeg, --decoder), reconnected
    file://clip.mp4 or a path    a video, an image, a folder of images or a glob (--loop)
    synthetic://                 a deterministic moving scene built from the bundled photos

Every source yields (frame BGR uint8, capture time from time.monotonic()) and raises SourceError
with one sentence when it cannot open or stops delivering.
"""

from __future__ import annotations

import contextlib
import glob as globmod
import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgert.runtime.errors import SourceError
from edgert.runtime.images import IMAGE_SUFFIXES, check_pixels

from .gstreamer import Lost

log = logging.getLogger(__name__)

_SECRET_QUERY = re.compile(
    r"([?&;][^=&;#]*(?:pass|passwd|password|pwd|token|secret|key|auth)[^=&;#]*=)[^&;#]*", re.I
)


def redact(uri: str) -> str:
    """``uri`` as edgert prints, logs and serves it: a password in it (``user:pass@``, or a
    ``password=``/``token=`` query value) replaced by ``***``. Only the connection gets the real one."""
    scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", uri)
    if scheme is None:
        return uri
    rest = uri[scheme.end() :]
    # the credentials end at the last "@" (a password may hold "/", "?" or "@"); an "@" in a path
    # after a host without credentials makes this hide that part of the path: printing only
    end = rest.find("#") if "#" in rest else len(rest)
    at = rest.rfind("@", 0, end)
    if at >= 0 and ":" in rest[:at]:
        rest = rest[: rest.index(":")] + ":***" + rest[at:]
    return scheme.group(0) + _SECRET_QUERY.sub(r"\1***", rest)


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


def gstreamer_available() -> bool:
    import cv2

    info = cv2.getBuildInformation()
    for line in info.splitlines():
        if "GStreamer" in line:
            return "YES" in line.upper()
    return False


class CaptureSource(FrameSource):
    """cv2.VideoCapture for V4L2, CSI (GStreamer) and video files."""

    live = False  # a file: every frame is processed (LiveCapture overrides)

    def __init__(
        self,
        target,
        description: str,
        api=None,
        loop: bool = False,
        opts: SourceOptions | None = None,
    ) -> None:
        import cv2

        self.cv2 = cv2
        self.target, self.api, self.loop = target, api, loop
        self.description = description
        with quiet_opencv():
            self.cap = (
                cv2.VideoCapture(target, api) if api is not None else cv2.VideoCapture(target)
            )
        if not self.cap.isOpened():
            raise SourceError(f"cannot open {description}")
        if opts is not None:
            self._configure(opts)
        try:  # frames over the decoded-size limit, as the container or the camera says
            check_pixels(self.cap.get(cv2.CAP_PROP_FRAME_WIDTH),
                         self.cap.get(cv2.CAP_PROP_FRAME_HEIGHT), description)  # fmt: skip
        except SourceError:
            self.cap.release()
            raise
        fps = self.cap.get(cv2.CAP_PROP_FPS)
        self.fps = fps if fps and fps > 0 else None
        w, h = (int(self.cap.get(p)) for p in (cv2.CAP_PROP_FRAME_WIDTH, cv2.CAP_PROP_FRAME_HEIGHT))
        self.size = (w, h) if w > 0 and h > 0 else None

    def _configure(self, opts: SourceOptions) -> None:
        cv2 = self.cv2
        if opts.codec:
            self.cap.set(
                cv2.CAP_PROP_FOURCC,
                cv2.VideoWriter_fourcc(*{"mjpeg": "MJPG", "yuyv": "YUYV"}[opts.codec]),
            )
        if opts.width:
            self.cap.set(cv2.CAP_PROP_FRAME_WIDTH, opts.width)
        if opts.height:
            self.cap.set(cv2.CAP_PROP_FRAME_HEIGHT, opts.height)
        if opts.fps:
            self.cap.set(cv2.CAP_PROP_FPS, opts.fps)

    media_time: float | None = None  # the last frame's time in the video (seconds)
    _loop_offset = 0.0

    def read(self):
        ok, frame = self.cap.read()
        if not ok and self.loop:
            self._loop_offset = (self.media_time or 0.0) + 1.0 / (self.fps or 30.0)
            self.cap.set(self.cv2.CAP_PROP_POS_FRAMES, 0)
            ok, frame = self.cap.read()
        if not ok:
            return None
        if not self.live:  # a file: its own clock (a loop goes on from where it ended)
            ms = self.cap.get(self.cv2.CAP_PROP_POS_MSEC)
            t = self._loop_offset + ms / 1e3 if ms is not None and ms >= 0 else None
            last = self.media_time
            if t is None or (last is not None and t <= last):  # no timestamps (raw .h264): frames
                t = (last + 1.0 / (self.fps or 30.0)) if last is not None else 0.0  # at its rate
            self.media_time = t
        return frame, time.monotonic()

    def close(self) -> None:
        self.cap.release()


class LiveCapture(CaptureSource):
    """A camera: running out of frames means it was unplugged or stopped, not the end."""

    live = True

    def read(self):
        got = super().read()
        if got is None:
            raise SourceError(
                f"{self.description} stopped delivering frames (unplugged or taken by another process?)"
            )
        return got


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
        from . import gstreamer

        if self._have is None:
            self._have = gstreamer.elements()
        o = self.opts
        description = gstreamer.rtsp_source(
            self.url, o.rtsp_latency_ms, o.rtsp_transport, timeout_s
        )
        return gstreamer.GstConnection(description, True, self._have, timeout_s, self._cancel)

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
        from . import gstreamer

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
        from . import gstreamer

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
    from . import gstreamer

    return gstreamer.available()[0]


def choose_decoder(requested: str, kind: str) -> tuple[str, str | None]:
    """(gstreamer or ffmpeg, a note when auto falls back) for a source of ``kind`` (rtsp, file).
    auto: GStreamer for network streams whenever it is there (its jitter buffer, hardware
    decode, stall and end detection); for files only with a hardware decoder (elsewhere both
    decode with FFmpeg's own decoders, and OpenCV's is the proven path)."""
    from . import gstreamer

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


class ImageListSource(FrameSource):
    """Images one after another. A file that cannot be read is reported (a warning naming it,
    counted in ``failed``) and skipped; the stream goes on. Only when none can be read does it
    fail."""

    live = False

    def __init__(self, files: list[Path], description: str, loop: bool) -> None:
        self.files, self.loop, self.description = files, loop, description
        self.i = 0
        self.failed: dict[str, str] = {}  # file -> why, once per file however often it loops
        self.delivered = 0

    def read(self):
        from edgert.runtime.images import read_image

        tried = 0
        while True:
            if tried >= len(self.files):  # a whole pass without one image: they all fail now
                if self.delivered and not self.loop:
                    return None
                raise SourceError(f"none of the {len(self.files)} images of {self.description} can be read: "
                                  f"{next(iter(self.failed.values()))}")  # fmt: skip
            if self.i >= len(self.files):
                if not self.loop:
                    return None
                self.i = 0
            tried += 1
            path = self.files[self.i]
            self.i += 1
            try:
                image = read_image(path)
            except SourceError as exc:
                if str(path) not in self.failed:
                    self.failed[str(path)] = str(exc)
                    log.warning("skipped: %s", exc)
                continue
            self.delivered += 1
            return image, time.monotonic()


class SyntheticSource(FrameSource):
    """A deterministic moving scene: a window panning and zooming over the bundled photos, one
    photo every ``seconds_per_photo`` of frames. Frame i is always the same image."""

    def __init__(self, width: int = 640, height: int = 480, fps: float = 30.0, photos: tuple[str, ...] | None = None,
                 frames: int | None = None, realtime: bool = True) -> None:  # fmt: skip
        from edgert.runtime.sample_data import PHOTOS, load_photo

        self.images = [load_photo(p) for p in (photos or PHOTOS)]
        self.width, self.height, self.fps = width, height, fps
        self.size = (width, height)
        self.frames, self.realtime = frames, realtime
        self.live = realtime
        self.i = 0
        self.start: float | None = None  # the clock starts with the first frame read
        self.description = (
            f"synthetic:// ({width}x{height} @ {fps:g} fps, {len(self.images)} photos)"
        )

    def frame(self, i: int) -> np.ndarray:
        import cv2

        per_photo = int(self.fps * 3)
        img = self.images[(i // per_photo) % len(self.images)]
        phase = (i % per_photo) / per_photo  # 0..1 through this photo
        h, w = img.shape[:2]
        scale = 0.75 + 0.2 * np.sin(2 * np.pi * phase)
        cw, ch = int(w * scale), int(h * scale)
        x = int((w - cw) * (0.5 + 0.5 * np.sin(2 * np.pi * phase)))
        y = int((h - ch) * (0.5 + 0.5 * np.cos(2 * np.pi * phase)))
        return cv2.resize(
            img[y : y + ch, x : x + cw], (self.width, self.height), interpolation=cv2.INTER_AREA
        )

    def read(self):
        if self.frames is not None and self.i >= self.frames:
            return None
        if self.realtime:
            if self.start is None:
                self.start = time.monotonic()
            due = self.start + self.i / self.fps
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        frame = self.frame(self.i)
        self.i += 1
        return frame, time.monotonic()


def _image_files(path_text: str) -> tuple[list[Path], str] | None:
    """The images a glob, a folder or an image path names, and its description; None for
    anything else (a video, a missing path)."""
    if any(c in path_text for c in "*?["):
        files = sorted(
            Path(p) for p in globmod.glob(path_text) if Path(p).suffix.lower() in IMAGE_SUFFIXES
        )
        return files, f"{len(files)} images matching {path_text}"
    path = Path(path_text)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        return files, f"{len(files)} images in {path}"
    if path.suffix.lower() in IMAGE_SUFFIXES and path.exists():
        return [path], f"image {path}"
    return None


def source_files(uri: str) -> list[Path]:
    """The files a source URI reads (a video, an image, a folder's or a glob's images); none for
    cameras and streams."""
    if "://" in uri and not uri.startswith("file://"):
        return []
    path_text = uri[len("file://") :] if uri.startswith("file://") else uri
    images = _image_files(path_text)
    if images is not None:
        return images[0]
    return [Path(path_text)] if Path(path_text).is_file() else []


def open_source(uri: str, opts: SourceOptions | None = None) -> FrameSource:
    """A FrameSource for ``uri``; SourceError listing the supported forms when it is not one."""
    import cv2

    opts = opts or SourceOptions()
    if uri.startswith("synthetic://"):
        fps = opts.fps or 30.0
        return SyntheticSource(opts.width or 640, opts.height or 480, fps)
    if uri.startswith("csi://"):
        index = uri[len("csi://") :] or "0"
        if not index.isdigit():
            raise SourceError(f"{uri}: a CSI camera is csi://N with N a sensor number")
        if not gstreamer_available() and not _gst_ok():
            raise SourceError(
                "csi:// needs GStreamer: PyGObject (python3-gi) or OpenCV built with GStreamer "
                "(pip's opencv-python-headless has neither; use JetPack's python3-opencv)"
            )
        w, h, fps = opts.width or 1280, opts.height or 720, int(opts.fps or 30)
        from . import gstreamer

        if opts.decoder != "ffmpeg" and gstreamer.available()[0]:
            if "nvarguscamerasrc" not in gstreamer.elements():
                raise SourceError("csi:// needs JetPack's nvarguscamerasrc (a Jetson with a CSI "
                                  "camera); this machine's GStreamer has none")  # fmt: skip
            return GstCameraSource(f"CSI camera {index}",
                                   gstreamer.csi_pipeline(int(index), w, h, fps), opts.io_timeout)  # fmt: skip
        pipeline = (
            f"nvarguscamerasrc sensor-id={index} ! video/x-raw(memory:NVMM),width={w},height={h},framerate={fps}/1 ! "
            "nvvidconv ! video/x-raw,format=BGRx ! videoconvert ! video/x-raw,format=BGR ! appsink drop=true max-buffers=1"
        )
        return LiveCapture(pipeline, f"CSI camera {index}", api=cv2.CAP_GSTREAMER)
    if uri.startswith("v4l2://"):
        device = uri[len("v4l2://") :]
        if not Path(device).exists():
            raise SourceError(
                f"no such camera: {device} does not exist (is it plugged in? ls /dev/video*)"
            )
        if opts.decoder == "gstreamer":  # asked for: OpenCV's V4L2 back end is the default
            choose_decoder("gstreamer", "v4l2")  # a sentence when GStreamer is absent
            from . import gstreamer

            pipeline = gstreamer.v4l2_pipeline(
                device, opts.width, opts.height, opts.fps, opts.codec
            )
            return GstCameraSource(f"camera {device}", pipeline, opts.io_timeout)
        try:
            return LiveCapture(device, f"camera {device}", api=cv2.CAP_V4L2, opts=opts)
        except SourceError:
            raise SourceError(
                f"cannot open camera {device} (busy in another process, or not a capture device)"
            ) from None
    if uri.startswith(("rtsp://", "rtsps://")):
        decoder, note = choose_decoder(opts.decoder, "rtsp")
        if decoder == "ffmpeg":
            quiet_ffmpeg()  # here, on the thread that opens sources, before capture threads run
            if opts.rtsp_transport != "auto":  # read by FFmpeg when it opens the stream
                os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = (
                    f"rtsp_transport;{opts.rtsp_transport}"
                )
        return StreamSource(uri, opts, decoder, note)
    if re.fullmatch(r"/dev/video\d+", uri):  # a camera, not a video file (as jetson-utils does)
        return open_source(f"v4l2://{uri}", opts)
    if "://" in uri and not uri.startswith("file://"):
        raise SourceError(f"unsupported source {redact(uri)!r}; supported: {SUPPORTED}")
    path_text = uri[len("file://") :] if uri.startswith("file://") else uri
    images = _image_files(path_text)
    if images is not None:
        files, description = images
        if not files:
            raise SourceError(
                f"the glob {path_text} matches no images"
                if any(c in path_text for c in "*?[")
                else f"{path_text} holds no images"
            )
        return ImageListSource(files, description, opts.loop)
    path = Path(path_text)
    if not path.exists():
        raise SourceError(f"{path} does not exist; supported sources: {SUPPORTED}")
    if choose_decoder(opts.decoder, "file")[0] == "gstreamer":
        return GstFileSource(str(path), opts.loop)
    return CaptureSource(str(path), f"video {path}", loop=opts.loop)
