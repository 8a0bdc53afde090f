"""Nearest-neighbour resizing: the GPU kernel's index arithmetic (emulated in numpy, as the kernel
computes it) picks the same source pixel as the CPU path for every camera size, resize mode and
model size (issue: deployment, section 3). The old float32 formula did not."""

from __future__ import annotations

import numpy as np
import pytest

from edgert.runtime.cuda.preprocess_kernel import KERNEL_SOURCE, _nearest_args, kernel_nearest_index
from edgert.runtime.images.preprocess import Preprocessing

CAMERAS = [(720, 1280), (1080, 1920), (480, 640), (2160, 3840), (1232, 1640), (600, 800), (37, 53)]
MODELS = [(224, 224), (416, 416), (64, 64), (320, 640), (640, 640)]


def _index_image(h: int, w: int) -> np.ndarray:
    """Pixel (y, x) holds x % 256, x // 256 and y % 256 (BGR): the output says where it came from."""
    ys, xs = np.mgrid[0:h, 0:w]
    return np.stack([xs % 256, xs // 256, ys % 256], axis=2).astype(np.uint8)


@pytest.mark.parametrize("resize", ["stretch", "resize_crop", "letterbox"])
@pytest.mark.parametrize("camera", CAMERAS, ids=lambda c: f"{c[1]}x{c[0]}")
def test_kernel_arithmetic_matches_the_cpu_path(camera, resize):
    h, w = camera
    img = _index_image(h, w)
    for size in MODELS:
        pre = Preprocessing(
            size=size,
            resize=resize,
            interpolation="nearest",
            channel_order="BGR",
            layout="NHWC",
            scale=1.0,
            pad_value=0.0,
        )
        out, t = pre.apply(img)
        rw, rh, iox, ioy = _nearest_args(t)
        th, tw = size
        x0, x1 = (max(0, iox), min(tw, iox + rw)) if resize == "letterbox" else (0, tw)
        y0, y1 = (max(0, ioy), min(th, ioy + rh)) if resize == "letterbox" else (0, th)
        xs = kernel_nearest_index(np.arange(x0, x1), iox, w, rw)
        ys = kernel_nearest_index(np.arange(y0, y1), ioy, h, rh)
        cpu_x = out[y0, x0:x1, 0].astype(np.int64) + 256 * out[y0, x0:x1, 1].astype(np.int64)
        cpu_y = out[y0:y1, x0, 2].astype(np.int64)
        np.testing.assert_array_equal(cpu_x, xs, err_msg=f"{w}x{h} -> {size} {resize} columns")
        np.testing.assert_array_equal(cpu_y, ys % 256, err_msg=f"{w}x{h} -> {size} {resize} rows")


def test_the_old_float32_formula_picked_neighbours():
    """1920 -> 64 columns: floorf((x + 0.5f) / sx) in float32 against the exact pixel centres."""
    sx = np.float32(64 / 1920)
    x = np.arange(64, dtype=np.float32)
    old = np.floor((x + np.float32(0.5)) / sx).astype(np.int64)
    new = kernel_nearest_index(np.arange(64), 0, 1920, 64)
    assert (old != new).any()  # the defect: columns 14, 44, 74 ... against 15, 45, 75 ...
    assert new[0] == 15 and new[1] == 45


def test_kernel_source_uses_the_integer_formula():
    assert "(2 * i + 1) * src_w / (2LL * rw)" in KERNEL_SOURCE
    assert "floorf((x + 0.5f - ox) / sx)" not in KERNEL_SOURCE
