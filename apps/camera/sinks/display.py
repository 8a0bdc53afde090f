"""``display://0``: a window (one per stream when there are several: "edgert [i]"), or one
mosaic of the streams (``--mosaic``)."""

from __future__ import annotations

import os

from edgert.runtime.errors import OutputError

from .base import Sink, SinkContext, stream_of
from .mosaic import MosaicOutput


class DisplayOutput(Sink):
    """A window (one per stream when there are several: "edgert [i]")."""

    def __init__(self, name: str = "edgert", streams: int = 1) -> None:
        import cv2

        if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
            raise OutputError(
                "display:// needs a display (DISPLAY is not set); use --output http://127.0.0.1:8080 or --headless"
            )
        try:
            cv2.namedWindow(name, cv2.WINDOW_NORMAL)
        except cv2.error as exc:
            raise OutputError(
                "this OpenCV has no GUI support (opencv-python-headless); use --output http://127.0.0.1:8080"
            ) from exc
        self.name = name
        self.streams = streams

    def write(self, frame, overlay_image, record: dict) -> None:
        import cv2

        name = (
            self.name
            if frame is None or not stream_of(frame)
            else f"{self.name} [{stream_of(frame)}]"
        )
        cv2.imshow(name, overlay_image)
        cv2.waitKey(1)

    def close(self) -> None:
        import cv2

        cv2.destroyAllWindows()


def open_uri(uri: str, ctx: SinkContext) -> Sink:
    n = len(ctx.streams)
    if ctx.options.mosaic and n > 1:
        return MosaicOutput(DisplayOutput(), n)
    return DisplayOutput(streams=n)
