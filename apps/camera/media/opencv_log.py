"""OpenCV's and FFmpeg's own log lines kept off the terminal (edgert says what went wrong in one
sentence); ``--debug`` keeps them. Used by sources (decoding) and sinks (encoding) alike."""

from __future__ import annotations

import contextlib
import logging
import os


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
