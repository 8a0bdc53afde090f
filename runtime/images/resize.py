"""The pixel work of preprocessing, on OpenCV and numpy: an image as HxWxC, its channels in the
model's order (grey by ITU-R BT.601), a resize by each interpolation, and the window of an
upscaled image sampled straight from the source. :class:`~.preprocess.Preprocessing` composes
them; the GPU kernel computes the same formulas (``nearest_index`` is shared by both)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError

# "linear" averages (area) when shrinking, like PIL's antialiased bilinear; "bilinear" is plain
# bilinear sampling at pixel centres (OpenCV's fixed-point kernel on uint8 frames, within one
# level, 0.81 measured, of the float arithmetic the GPU kernel computes: docs/design.md,
# "Preprocessing on the CPU").
INTERPOLATIONS = {
    "nearest": 6,
    "linear": 1,
    "cubic": 2,
    "area": 3,
    "bilinear": 1,
}  # 6: INTER_NEAREST_EXACT (pixel centres)


@dataclass(frozen=True)
class Transform:
    """Maps source pixels to model-input pixels: ``x_model = x_src * sx + ox`` (same for y)."""

    sx: float
    sy: float
    ox: float
    oy: float
    source_hw: tuple[int, int]

    @property
    def resized_wh(self) -> tuple[int, int]:
        """(width, height) of the source after scaling, before crop or padding."""
        h, w = self.source_hw
        return round(w * self.sx), round(h * self.sy)

    def to_source(self, boxes: np.ndarray) -> np.ndarray:
        """Boxes [..., 4] (x1, y1, x2, y2) in model pixels -> source pixels, clipped to the image."""
        b = np.asarray(boxes, dtype=np.float32).copy()
        b[..., [0, 2]] = (b[..., [0, 2]] - self.ox) / self.sx
        b[..., [1, 3]] = (b[..., [1, 3]] - self.oy) / self.sy
        h, w = self.source_hw
        b[..., [0, 2]] = b[..., [0, 2]].clip(0, w)
        b[..., [1, 3]] = b[..., [1, 3]].clip(0, h)
        return b

    def points_to_source(self, points: np.ndarray) -> np.ndarray:
        """Points [..., D] (x, y in model pixels first; the rest, e.g. a visibility, kept) ->
        source pixels, clipped to the image (float64: keypoints and outlines)."""
        p = np.array(points, dtype=np.float64)
        h, w = self.source_hw
        p[..., 0] = ((p[..., 0] - self.ox) / self.sx).clip(0, w)
        p[..., 1] = ((p[..., 1] - self.oy) / self.sy).clip(0, h)
        return p


def as_hwc(img: np.ndarray) -> np.ndarray:
    if img.ndim == 2:
        img = img[:, :, None]
    if img.ndim != 3 or img.shape[2] not in (1, 3, 4):
        raise ShapeError(
            f"expected an image of HxW or HxWxC (C = 1, 3 or 4), got shape {img.shape}"
        )
    return img


_GRAY_WEIGHTS = np.array([0.299, 0.587, 0.114], np.float32)  # ITU-R BT.601, R G B
GRAY_CODES = {  # cv2.COLOR_*2GRAY by (input order, channels)
    ("BGR", 3): 6,  # COLOR_BGR2GRAY
    ("RGB", 3): 7,  # COLOR_RGB2GRAY
    ("BGR", 4): 10,  # COLOR_BGRA2GRAY
    ("RGB", 4): 11,  # COLOR_RGBA2GRAY
}


def channels(img: np.ndarray, have: str, want: str) -> np.ndarray:
    """A view of ``img`` (HxWxC, C = 1, 3 or 4 in order ``have``) in order ``want``; grey is
    computed (float32) from the resized pixels, alpha is dropped."""
    if want == "GRAY":
        if img.shape[2] == 1:
            return img
        rgb = img[:, :, 2::-1] if have == "BGR" else img[:, :, :3]
        return (rgb.astype(np.float32) @ _GRAY_WEIGHTS)[:, :, None]
    if img.shape[2] == 1:
        return np.broadcast_to(img, (*img.shape[:2], 3))
    return img[:, :, 2::-1] if have != want else img[:, :, :3]


def sample_window(cv2, img: np.ndarray, t: Transform, tw: int, th: int, interp: str) -> np.ndarray:
    """The ``tw`` x ``th`` crop of the scaled image, sampled straight from the source (only used
    when scaling up, so no area averaging is involved). Nearest is exact (pixel centres, as
    INTER_NEAREST_EXACT); bilinear and cubic use OpenCV's remap (1/32-pixel positions)."""
    h, w = img.shape[:2]
    xs = (np.arange(tw, dtype=np.float64) - t.ox + 0.5) / t.sx - 0.5
    ys = (np.arange(th, dtype=np.float64) - t.oy + 0.5) / t.sy - 0.5
    if interp == "nearest":
        nw, nh = t.resized_wh
        xi = nearest_index(np.arange(tw) - round(t.ox), w, nw)
        yi = nearest_index(np.arange(th) - round(t.oy), h, nh)
        return img[yi[:, None], xi[None, :]]
    # only the source window the samples touch (remap also needs sides under 32767)
    x0, y0 = max(0, int(np.floor(xs.min())) - 2), max(0, int(np.floor(ys.min())) - 2)
    x1, y1 = min(w, int(np.ceil(xs.max())) + 3), min(h, int(np.ceil(ys.max())) + 3)
    src = img[y0:y1, x0:x1]
    src = src if src.dtype in (np.uint8, np.float32) else src.astype(np.float32)
    map_x = np.broadcast_to((xs - x0).astype(np.float32)[None, :], (th, tw))
    map_y = np.broadcast_to((ys - y0).astype(np.float32)[:, None], (th, tw))
    mode = cv2.INTER_CUBIC if interp == "cubic" else cv2.INTER_LINEAR
    out = cv2.remap(
        src,
        np.ascontiguousarray(map_x),
        np.ascontiguousarray(map_y),
        mode,
        borderMode=cv2.BORDER_REPLICATE,
    )
    return out[:, :, None] if out.ndim == 2 else out


def nearest_index(i: np.ndarray, src_len: int, scaled_len: int) -> np.ndarray:
    """Nearest-neighbour source index of pixel ``i`` of a ``src_len`` -> ``scaled_len`` resize,
    sampled at pixel centres: ``floor((i + 0.5) * src_len / scaled_len)``, in exact integer
    arithmetic ``((2i + 1) * src_len) // (2 * scaled_len)`` so that the CPU path and the GPU
    kernel (which computes the same expression in 64-bit integers) pick the same pixel for every
    camera size. Clamped to the image."""
    i = np.asarray(i, dtype=np.int64)
    return np.clip(((2 * i + 1) * src_len) // (2 * scaled_len), 0, src_len - 1).astype(np.intp)


def resize(cv2, img: np.ndarray, w: int, h: int, interp: int, antialias: bool) -> np.ndarray:
    if img.shape[1] == w and img.shape[0] == h:
        return img
    if interp == INTERPOLATIONS["nearest"]:
        # OpenCV's INTER_NEAREST_EXACT differs between versions and fast paths (OpenCV 5 takes a
        # rational shortcut for some ratios); ours is one formula, shared with the GPU kernel
        if opencv_picks_ours(img.shape, img.dtype.str, w, h):
            out = cv2.resize(img, (w, h), interpolation=cv2.INTER_NEAREST_EXACT)
            return out[:, :, None] if out.ndim == 2 else out
        xi = nearest_index(np.arange(w), img.shape[1], w)
        yi = nearest_index(np.arange(h), img.shape[0], h)
        return np.take(np.take(img, yi, axis=0), xi, axis=1)
    if antialias and (w < img.shape[1] or h < img.shape[0]):
        interp = INTERPOLATIONS["area"]  # antialias when shrinking, as PIL's bilinear does
    src = img if img.dtype in (np.uint8, np.float32) else img.astype(np.float32)
    out = cv2.resize(src, (w, h), interpolation=interp)
    return out[:, :, None] if out.ndim == 2 else out


@functools.lru_cache(maxsize=64)
def opencv_picks_ours(shape: tuple, dtype: str, w: int, h: int) -> bool:
    """Whether OpenCV's INTER_NEAREST_EXACT picks the pixels :func:`nearest_index` picks for this
    frame size, type and output size (it is 4x faster than a numpy gather, but its formula differs
    between versions and fast paths). Asked once per size: a frame of the same shape and type
    whose pixels encode their own column (then row) index in base 256 is resized, the indices
    read back and compared. Only for uint8 frames of 3 or 4 channels (two bytes for an index)."""
    import cv2

    if dtype != "|u1" or len(shape) != 3 or shape[2] not in (3, 4) or max(shape[:2]) > 65535:
        return False
    rows, cols = shape[:2]
    want = {1: nearest_index(np.arange(w), cols, w), 0: nearest_index(np.arange(h), rows, h)}
    for axis, n in ((1, cols), (0, rows)):
        index = np.arange(n, dtype=np.uint16).reshape((1, n) if axis else (n, 1))
        probe = np.zeros(shape, np.uint8)
        probe[:, :, 0] = index & 255
        probe[:, :, 1] = index >> 8
        out = cv2.resize(probe, (w, h), interpolation=cv2.INTER_NEAREST_EXACT).astype(np.int64)
        got = out[:, :, 0] + 256 * out[:, :, 1]
        line = want[axis][None, :] if axis else want[axis][:, None]
        if not np.array_equal(got, np.broadcast_to(line, got.shape)):
            return False
    return True
