"""OpenCV's capture (``cv2.VideoCapture``): V4L2 cameras, CSI cameras through OpenCV's GStreamer
back end, and video files through its FFmpeg back end."""

from __future__ import annotations

import time

from edgert.runtime.errors import SourceError
from edgert.runtime.images import check_pixels

from ..media.opencv_log import quiet_opencv
from .base import FrameSource, SourceOptions


def opencv_has_gstreamer() -> bool:
    """Whether this OpenCV was built with its GStreamer back end (JetPack's is; pip's is not)."""
    import cv2

    for line in cv2.getBuildInformation().splitlines():
        if "GStreamer" in line:
            return "YES" in line.upper()
    return False


class CaptureSource(FrameSource):
    """cv2.VideoCapture for V4L2, CSI (GStreamer) and video files."""

    live = False  # a file: every frame is processed (LiveCapture overrides)
    decodes = "ffmpeg"  # OpenCV's back end (a CSI pipeline's GStreamer: not scaled by edgert)

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
            check_pixels(
                self.cap.get(cv2.CAP_PROP_FRAME_WIDTH),
                self.cap.get(cv2.CAP_PROP_FRAME_HEIGHT),
                description,
            )
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
