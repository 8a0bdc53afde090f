"""Cameras on the board: ``csi://N`` (a Jetson CSI sensor through nvarguscamerasrc) and
``v4l2:///dev/videoN`` (USB / V4L2), each opened through GStreamer or OpenCV's capture."""

from __future__ import annotations

from pathlib import Path

from edgert.runtime.errors import SourceError

from .. import media
from .base import FrameSource, SourceOptions
from .gst import GstCameraSource, choose_decoder
from .opencv import LiveCapture, opencv_has_gstreamer


def open_csi(uri: str, opts: SourceOptions) -> FrameSource:
    import cv2

    index = uri[len("csi://") :] or "0"
    if not index.isdigit():
        raise SourceError(f"{uri}: a CSI camera is csi://N with N a sensor number")
    pygobject = media.available()[0]
    if not pygobject and not opencv_has_gstreamer():
        raise SourceError(
            "csi:// needs GStreamer: PyGObject (python3-gi) or OpenCV built with GStreamer "
            "(pip's opencv-python-headless has neither; use JetPack's python3-opencv)"
        )
    w, h, fps = opts.width or 1280, opts.height or 720, int(opts.fps or 30)
    if opts.decoder != "ffmpeg" and pygobject:
        have = media.elements()
        if "nvarguscamerasrc" not in have:
            raise SourceError(
                "csi:// needs JetPack's nvarguscamerasrc (a Jetson with a CSI camera); this "
                "machine's GStreamer has none"
            )
        launch = media.csi_pipeline(int(index), w, h, fps, opts.fit, have)
        return GstCameraSource(f"CSI camera {index}", launch, opts.io_timeout, opts.fit)
    # OpenCV's GStreamer back end parses the text (numbers and fixed names only): full frames
    launch = media.csi_pipeline(int(index), w, h, fps)
    return LiveCapture(launch.text(), f"CSI camera {index}", api=cv2.CAP_GSTREAMER)


def open_v4l2(uri: str, opts: SourceOptions) -> FrameSource:
    import cv2

    device = uri[len("v4l2://") :]
    if not Path(device).exists():
        raise SourceError(
            f"no such camera: {device} does not exist (is it plugged in? ls /dev/video*)"
        )
    if opts.decoder == "gstreamer":  # asked for: OpenCV's V4L2 back end is the default
        choose_decoder("gstreamer", "v4l2")  # a sentence when GStreamer is absent
        launch = media.v4l2_pipeline(
            device, opts.width, opts.height, opts.fps, opts.codec, opts.fit, media.elements()
        )
        return GstCameraSource(f"camera {device}", launch, opts.io_timeout, opts.fit)
    try:
        return LiveCapture(device, f"camera {device}", api=cv2.CAP_V4L2, opts=opts)
    except SourceError:
        raise SourceError(
            f"cannot open camera {device} (busy in another process, or not a capture device)"
        ) from None
