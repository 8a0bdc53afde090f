"""The streams tiled into one picture, for a sink that shows one (a video file, a window)."""

from __future__ import annotations

import math

import numpy as np

from .base import Sink, grid_columns, stream_of


class MosaicOutput(Sink):
    """The streams tiled into one picture (letterboxed, at most 1920 pixels wide), one picture
    per round of the streams: written when a stream's tile is about to be replaced a second time,
    so a dead stream (its tile stays black, or its last frame) never holds the others up."""

    MAX_WIDTH = 1920

    def __init__(self, target: Sink, streams: int) -> None:
        self.target = target
        self.cols = grid_columns(streams)
        self.rows = math.ceil(streams / self.cols)
        self.tiles: list = [None] * streams
        self.fresh: set[int] = set()
        self.tile_size: tuple[int, int] | None = None

    @property
    def takes_frames(self) -> bool:
        return self.target.takes_frames  # the web viewer: only while it is watched

    def write(self, frame, overlay_image, record: dict) -> None:
        if getattr(frame, "source_hw", None) is not None:
            return  # at the model's size (the decoder opening to full frames): the last tile stays
        i = stream_of(frame)
        if i in self.fresh:
            self._emit()
        if self.tile_size is None:
            h, w = overlay_image.shape[:2]
            scale = min(1.0, self.MAX_WIDTH / (w * self.cols))
            self.tile_size = (max(2, int(w * scale)) // 2 * 2, max(2, int(h * scale)) // 2 * 2)
        self.tiles[i] = letterbox(overlay_image, self.tile_size)
        self.fresh.add(i)

    def _emit(self) -> None:
        tw, th = self.tile_size
        mosaic = np.zeros((th * self.rows, tw * self.cols, 3), np.uint8)
        for i, tile in enumerate(self.tiles):
            if tile is not None:
                r, c = divmod(i, self.cols)
                mosaic[r * th : (r + 1) * th, c * tw : (c + 1) * tw] = tile
        self.target.write(None, mosaic, {})
        self.fresh.clear()

    def close(self) -> None:
        try:
            if self.fresh:
                self._emit()
        finally:
            self.target.close()

    def report(self):
        return self.target.report()

    def wrote(self) -> list:
        return self.target.wrote()


def letterbox(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    import cv2

    tw, th = size
    h, w = image.shape[:2]
    scale = min(tw / w, th / h)
    nw, nh = max(1, int(w * scale)), max(1, int(h * scale))
    out = np.zeros((th, tw, 3), np.uint8)
    y, x = (th - nh) // 2, (tw - nw) // 2
    out[y : y + nh, x : x + nw] = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_AREA)
    return out
