"""``file://PATH`` or a bare path: a video (OpenCV's FFmpeg, or GStreamer with a hardware
decoder), one image, a folder of images or a glob."""

from __future__ import annotations

from pathlib import Path

from edgert.runtime.errors import SourceError

from .base import FrameSource, NoSuchPath, SourceOptions
from .gst import GstFileSource, choose_decoder
from .images import ImageListSource, image_files
from .opencv import CaptureSource


def _path_text(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def open_uri(uri: str, opts: SourceOptions) -> FrameSource:
    path_text = _path_text(uri)
    images = image_files(path_text)
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
        raise NoSuchPath(f"{path} does not exist")
    if choose_decoder(opts.decoder, "file")[0] == "gstreamer":
        return GstFileSource(str(path), opts.loop, opts.fit)
    return CaptureSource(str(path), f"video {path}", loop=opts.loop)


def files_read(uri: str) -> list[Path]:
    """The files a file source reads: a video, an image, a folder's or a glob's images."""
    path_text = _path_text(uri)
    images = image_files(path_text)
    if images is not None:
        return images[0]
    return [Path(path_text)] if Path(path_text).is_file() else []
