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

import glob as globmod
import logging
import os
import re
import time
from pathlib import Path

import numpy as np

from edgert.apps.uris import check_stream_uri
from edgert.runtime.errors import SourceError
from edgert.runtime.images import IMAGE_SUFFIXES, check_pixels

from . import gstreamer
from .source_base import (  # noqa: F401 - the names sources have always had
    SUPPORTED,
    FrameSource,
    SourceOptions,
    quiet_ffmpeg,
    quiet_opencv,
    redact,
)
from .streams import (  # noqa: F401
    GstCameraSource,
    GstFileSource,
    StreamSource,
    _gst_ok,
    choose_decoder,
)

log = logging.getLogger(__name__)


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

        if opts.decoder != "ffmpeg" and gstreamer.available()[0]:
            if "nvarguscamerasrc" not in gstreamer.elements():
                raise SourceError("csi:// needs JetPack's nvarguscamerasrc (a Jetson with a CSI "
                                  "camera); this machine's GStreamer has none")  # fmt: skip
            return GstCameraSource(f"CSI camera {index}",
                                   gstreamer.csi_pipeline(int(index), w, h, fps), opts.io_timeout)  # fmt: skip
        # OpenCV's GStreamer back end parses the text; it holds numbers and fixed names only
        pipeline = gstreamer.csi_pipeline(int(index), w, h, fps).text()
        return LiveCapture(pipeline, f"CSI camera {index}", api=cv2.CAP_GSTREAMER)
    if uri.startswith("v4l2://"):
        device = uri[len("v4l2://") :]
        if not Path(device).exists():
            raise SourceError(
                f"no such camera: {device} does not exist (is it plugged in? ls /dev/video*)"
            )
        if opts.decoder == "gstreamer":  # asked for: OpenCV's V4L2 back end is the default
            choose_decoder("gstreamer", "v4l2")  # a sentence when GStreamer is absent
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
        try:
            check_stream_uri(uri)
        except ValueError as exc:
            raise SourceError(str(exc)) from None
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
