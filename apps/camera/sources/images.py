"""Images one after another: a folder, a glob or one image file."""

from __future__ import annotations

import glob as globmod
import logging
import time
from pathlib import Path

from edgert.runtime.errors import SourceError
from edgert.runtime.images import IMAGE_SUFFIXES

from .base import FrameSource

log = logging.getLogger(__name__)


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
                raise SourceError(
                    f"none of the {len(self.files)} images of {self.description} can be read: "
                    f"{next(iter(self.failed.values()))}"
                )
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

    def stats(self) -> dict:
        """The files skipped because they could not be read (named, at most 20)."""
        if not self.failed:
            return {}
        return {"images_failed": len(self.failed), "images_failed_files": sorted(self.failed)[:20]}


def image_files(path_text: str) -> tuple[list[Path], str] | None:
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
