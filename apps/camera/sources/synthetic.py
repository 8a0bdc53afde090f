"""``synthetic://``: a deterministic moving scene built from the bundled photos (no camera
needed: the demo, the tests, a pipeline check on a bench)."""

from __future__ import annotations

import time

import numpy as np

from .base import FrameSource, SourceOptions


class SyntheticSource(FrameSource):
    """A deterministic moving scene: a window panning and zooming over the bundled photos, one
    photo every ``seconds_per_photo`` of frames. Frame i is always the same image."""

    def __init__(
        self,
        width: int = 640,
        height: int = 480,
        fps: float = 30.0,
        photos: tuple[str, ...] | None = None,
        frames: int | None = None,
        realtime: bool = True,
    ) -> None:
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


def open_uri(uri: str, opts: SourceOptions) -> SyntheticSource:
    return SyntheticSource(opts.width or 640, opts.height or 480, opts.fps or 30.0)
