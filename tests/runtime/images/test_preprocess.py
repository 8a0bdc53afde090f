"""Preprocessing geometry and normalisation, and mapping boxes back to the source image."""

from __future__ import annotations

import numpy as np
import pytest

from edgert.runtime import BundleError, Preprocessing, ShapeError


def test_resize_crop_normalises_and_orders_channels():
    img = np.zeros((300, 400, 3), np.uint8)
    img[:, :, 0] = 255  # blue in OpenCV's BGR
    pre = Preprocessing(
        size=(224, 224),
        resize="resize_crop",
        resize_short=256,
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
    )
    x, t = pre.apply(img)
    assert x.shape == (3, 224, 224) and x.dtype == np.float32
    # RGB order: channel 2 (blue) is +1, red and green are -1
    np.testing.assert_allclose(x[:, 100, 100], [-1.0, -1.0, 1.0], atol=1e-6)
    assert (
        t.sy == pytest.approx(256 / 300)
        and t.sx == pytest.approx(341 / 400)
        and t.ox == -((round(400 * 256 / 300) - 224) // 2)
    )


def test_letterbox_box_round_trip():
    pre = Preprocessing(size=(320, 320), resize="letterbox", layout="NHWC")
    img = np.full((240, 640, 3), 7, np.uint8)
    x, t = pre.apply(img)
    assert x.shape == (320, 320, 3)
    # scale 0.5, image 120 rows tall centred: 100 rows of padding on top
    assert (t.sx, t.sy, t.ox, t.oy) == (0.5, 0.5, 0.0, 100.0)
    assert x[0, 0, 0] == pytest.approx(114 / 255) and x[160, 160, 0] == pytest.approx(7 / 255)
    src = np.array([[10.0, 20.0, 630.0, 230.0]])
    model_box = src * 0.5 + np.array([0, 100, 0, 100])
    np.testing.assert_allclose(t.to_source(model_box), src, atol=1e-4)


def test_stretch_and_gray():
    pre = Preprocessing(
        size=(8, 8), resize="stretch", channel_order="GRAY", mean=(0.0,), std=(1.0,), scale=1.0
    )
    x, t = pre.apply(np.full((16, 32, 3), 100, np.uint8))
    assert x.shape == (1, 8, 8)
    np.testing.assert_allclose(x, 100.0, atol=0.5)
    np.testing.assert_allclose(t.to_source(np.array([[0, 0, 8, 8]])), [[0, 0, 32, 16]])


def test_round_trip_through_dict_and_errors():
    pre = Preprocessing(size=(224, 224), resize="letterbox", mean=(1, 2, 3), std=(4, 5, 6))
    assert Preprocessing.from_dict(pre.to_dict()) == pre
    with pytest.raises(BundleError):
        Preprocessing(size=(1, 1), resize="zoom")
    with pytest.raises(BundleError):
        Preprocessing.from_dict({"resize": "stretch"})
    with pytest.raises(ShapeError):
        Preprocessing(size=(4, 4), resize="none").apply(np.zeros((5, 5, 3), np.uint8))


def test_any_size_side_takes_the_image_as_it_is():
    """-1: a fully convolutional model takes any size on that side (resize 'none' only)."""
    img = np.random.default_rng(0).integers(0, 255, (37, 51, 3), dtype=np.uint8)
    pre = Preprocessing(
        size=(-1, -1), resize="none", channel_order="BGR", scale=1.0, mean=(0, 0, 0), std=(1, 1, 1)
    )
    x, t = pre.apply(img)
    assert x.shape == (3, 37, 51) and (t.sx, t.sy, t.ox, t.oy) == (1.0, 1.0, 0.0, 0.0)
    np.testing.assert_array_equal(x.transpose(1, 2, 0), img.astype(np.float32))
    assert Preprocessing(size=(-1, 51), resize="none").apply(img)[0].shape == (3, 37, 51)
    with pytest.raises(ShapeError, match="37x50 but the model takes any height x 51"):
        Preprocessing(size=(-1, 51), resize="none").apply(img[:, :50])
    with pytest.raises(BundleError):
        Preprocessing(size=(-1, -1), resize="stretch")


def test_gpu_preprocessing_refuses_an_any_size_model_before_touching_cuda():
    from edgert.runtime.cuda.preprocess_kernel import GpuPreprocessor

    with pytest.raises(ShapeError, match="takes images of any size"):
        GpuPreprocessor(Preprocessing(size=(-1, -1), resize="none"))
