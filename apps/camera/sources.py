"""Frame sources by URI, like jetson-utils:

    csi://0                      Jetson CSI camera (GStreamer nvarguscamerasrc through OpenCV)
    v4l2:///dev/video0           USB / V4L2 camera (--width --height --fps --codec mjpeg|yuyv)
    rtsp://host:port/path        network stream, reconnecting with backoff when it drops
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
    reconnect_tries: int = 5
    reconnect_backoff: float = 0.5  # seconds, doubled per try
    connect_deadline: float = 20.0  # seconds for all attempts of one (re)connection
    io_timeout: float = 5.0  # seconds: OpenCV's open and read timeouts per attempt

    def __post_init__(self) -> None:
        for name in ("width", "height"):
            value = getattr(self, name)
            if value is not None and not 1 <= value <= 16384:
                raise SourceError(f"--{name} must be from 1 to 16384 pixels, not {value}")
        if self.fps is not None and not (math.isfinite(self.fps) and 0 < self.fps <= 1000):
            raise SourceError(f"--fps must be a positive number up to 1000, not {self.fps}")


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


class RtspSource(FrameSource):
    """RTSP, opened and reconnected on the capture thread (the first read), so Ctrl-C is never
    stuck behind a connection attempt. Each attempt is bounded by OpenCV's open/read timeouts, all
    attempts together by ``connect_deadline``; backoff waits end at once on :meth:`cancel`."""

    def __init__(self, url: str, opts: SourceOptions) -> None:
        self.url, self.opts = url, opts
        self.description = f"RTSP stream {redact(url)}"
        self.cap = None
        self._first = None
        self._cancel = threading.Event()
        self._busy = threading.Lock()  # held while a native call uses self.cap

    def cancel(self) -> None:
        self._cancel.set()

    def _open(self, timeout_ms: int):
        import cv2

        params = [
            cv2.CAP_PROP_OPEN_TIMEOUT_MSEC,
            timeout_ms,
            cv2.CAP_PROP_READ_TIMEOUT_MSEC,
            timeout_ms,
        ]
        with quiet_opencv():
            return cv2.VideoCapture(self.url, cv2.CAP_FFMPEG, params)

    def _connect(self) -> None:
        import cv2

        delay = self.opts.reconnect_backoff
        start = time.monotonic()
        deadline = start + self.opts.connect_deadline
        last = "no answer"
        tries = self.opts.reconnect_tries
        attempts = 0
        for attempt in range(1, tries + 1):
            attempts = attempt
            left = deadline - time.monotonic()
            if self._cancel.is_set() or left <= 0:
                break
            cap = self._open(int(min(self.opts.io_timeout, left) * 1000))
            if cap.isOpened():
                with quiet_opencv():
                    ok, frame = cap.read()
                if ok:
                    self.cap, self._first = cap, frame
                    fps = cap.get(cv2.CAP_PROP_FPS)
                    self.fps = fps if fps and fps > 0 else None
                    return
                last = "opened but no frames"
            else:
                last = "no answer"
            cap.release()
            if attempt == tries or deadline - time.monotonic() <= delay:
                log.warning("%s: attempt %d/%d failed (%s)", self.description, attempt, tries, last)
                break
            log.warning(
                "%s: attempt %d/%d failed (%s); retrying in %.1f s",
                self.description,
                attempt,
                tries,
                last,
                delay,
            )
            if self._cancel.wait(delay):
                break
            delay *= 2
        if self._cancel.is_set():
            raise SourceError(f"{self.description}: stopped while connecting")
        raise SourceError(
            f"cannot reach {self.description} after {attempts} tries in "
            f"{time.monotonic() - start:.1f} s ({last})"
        )

    def read(self):
        with self._busy:
            if self.cap is None:
                self._connect()
            if self._first is not None:
                frame, self._first = self._first, None
                return frame, time.monotonic()
            with quiet_opencv():
                ok, frame = self.cap.read()
            if not ok:
                log.warning("%s dropped; reconnecting", self.description)
                self.cap.release()
                self.cap = None
                self._connect()
                frame, self._first = self._first, None
            return frame, time.monotonic()

    def close(self) -> None:
        self._cancel.set()
        # a capture thread still inside a native call keeps the capture; it is dropped with it
        if self._busy.acquire(timeout=0.2):
            try:
                if self.cap is not None:
                    self.cap.release()
                    self.cap = None
            finally:
                self._busy.release()


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
        if not gstreamer_available():
            raise SourceError(
                "csi:// needs OpenCV with GStreamer (pip's opencv-python-headless has none; use JetPack's python3-opencv)"
            )
        w, h, fps = opts.width or 1280, opts.height or 720, int(opts.fps or 30)
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
        try:
            return LiveCapture(device, f"camera {device}", api=cv2.CAP_V4L2, opts=opts)
        except SourceError:
            raise SourceError(
                f"cannot open camera {device} (busy in another process, or not a capture device)"
            ) from None
    if uri.startswith(("rtsp://", "rtsps://")):
        quiet_ffmpeg()  # here, on the thread that opens sources, before capture threads run
        return RtspSource(uri, opts)
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
    return CaptureSource(str(path), f"video {path}", loop=opts.loop)
