"""Frame sources by URI, like jetson-utils' ``videoSource``, chosen through one table
(:data:`SCHEMES`): the scheme names the module that opens it and, for sources that read files,
the function that says which. ``open_source`` and ``source_files`` (the same-file guard) both
use the table, so a new scheme cannot escape the guard; the camera's help lists its rows.

Every source is a :class:`FrameSource`: it yields (frame BGR uint8, capture time from
time.monotonic()) and raises SourceError with one sentence when it cannot open or stops
delivering. A new kind of source is one module with an ``open_uri(uri, opts)`` and one row here.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path

from edgert.apps.lazy import lazy_names
from edgert.apps.uris import redact
from edgert.runtime.errors import SourceError

from .base import FrameSource, NoSuchPath, SourceOptions


@dataclass(frozen=True)
class Scheme:
    """One row of the table: the form shown to users, the module (imported when a source of
    this scheme opens), its opener ``(uri, opts) -> FrameSource``, for a source that reads
    files its ``(uri) -> [Path]``, and what it is (the help)."""

    form: str
    module: str
    opener: str = "open_uri"
    files: str | None = None
    says: str = ""


SCHEMES: dict[str, Scheme] = {
    "csi": Scheme(
        "csi://N",
        "edgert.apps.camera.sources.cameras",
        "open_csi",
        says="a Jetson CSI camera (GStreamer nvarguscamerasrc)",
    ),
    "v4l2": Scheme(
        "v4l2:///dev/videoN",
        "edgert.apps.camera.sources.cameras",
        "open_v4l2",
        says="a USB / V4L2 camera, or /dev/videoN (--width --height --fps --codec)",
    ),
    "rtsp": Scheme(
        "rtsp://...",
        "edgert.apps.camera.sources.rtsp",
        says="a network stream (GStreamer or FFmpeg, --decoder), reconnected",
    ),
    "rtsps": Scheme("rtsps://...", "edgert.apps.camera.sources.rtsp", says="the same over TLS"),
    "file": Scheme(
        "file://PATH (video, image, folder or glob), a bare path",
        "edgert.apps.camera.sources.files",
        files="files_read",
        says="played once, or again and again with --loop",
    ),
    "synthetic": Scheme(
        "synthetic://",
        "edgert.apps.camera.sources.synthetic",
        says="a deterministic moving scene built from the bundled photos",
    ),
}
_DEVICE = re.compile(r"/dev/video\d+")


def supported() -> str:
    return ", ".join(s.form for s in SCHEMES.values())


def forms() -> list[str]:
    """Each row as the help shows it: its form and what it is."""
    return [f"{s.form}: {s.says}" if s.says else s.form for s in SCHEMES.values()]


def resolve(uri: str) -> tuple[str, str]:
    """(scheme, URI as its opener takes it): a bare path is a file, except /dev/videoN, which is
    a camera (as jetson-utils does)."""
    if _DEVICE.fullmatch(uri):
        return "v4l2", f"v4l2://{uri}"
    scheme, sep, _ = uri.partition("://")
    if not sep:
        return "file", uri
    return scheme.lower(), uri


def _entry(uri: str) -> tuple[Scheme, str]:
    scheme, uri = resolve(uri)
    if scheme not in SCHEMES:
        raise SourceError(f"unsupported source {redact(uri)!r}; supported: {supported()}")
    return SCHEMES[scheme], uri


def open_source(uri: str, opts: SourceOptions | None = None) -> FrameSource:
    """A FrameSource for ``uri``; SourceError listing the supported forms when it is not one."""
    entry, uri = _entry(uri)
    opener = getattr(importlib.import_module(entry.module), entry.opener)
    try:
        return opener(uri, opts or SourceOptions())
    except NoSuchPath as exc:
        raise SourceError(f"{exc}; supported sources: {supported()}") from None


def source_files(uri: str) -> list[Path]:
    """The files a source URI reads (a video, an image, a folder's or a glob's images); none for
    cameras and streams, or a URI no source takes (opening it says so)."""
    try:
        entry, uri = _entry(uri)
    except SourceError:
        return []
    if entry.files is None:
        return []
    return getattr(importlib.import_module(entry.module), entry.files)(uri)


_CLASSES = {
    "CaptureSource": "opencv",
    "LiveCapture": "opencv",
    "ImageListSource": "images",
    "SyntheticSource": "synthetic",
    "StreamSource": "rtsp",
    "GstCameraSource": "gst",
    "GstFileSource": "gst",
    "choose_decoder": "gst",
}
__getattr__ = lazy_names(__name__, _CLASSES)  # the source classes, imported when first used

__all__ = [
    "SCHEMES",
    "FrameSource",
    "Scheme",
    "SourceOptions",
    "open_source",
    "resolve",
    "forms",
    "source_files",
    "supported",
    *_CLASSES,
]
