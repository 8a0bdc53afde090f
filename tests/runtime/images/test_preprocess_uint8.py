"""A model that takes uint8 pixels as they are (scale 1, mean 0, std 1: a bundle whose graph
normalises, ``edgert export --uint8-input``) gets them written straight into a uint8 tensor, with
the very values the float path computes; where a uint8 tensor cannot hold them (a fractional pad)
the float path and its cast stay."""

from __future__ import annotations

import itertools

import cv2
import numpy as np
import pytest

from edgert.runtime import Preprocessing
from edgert.runtime.images import preprocess as pp
from edgert.runtime.sample_data import load_photo

PHOTO = cv2.resize(load_photo("astronaut"), (400, 225))  # 16:9, as a camera's frame


@pytest.mark.parametrize(
    "resize,order,layout",
    list(
        itertools.product(
            ("letterbox", "stretch", "resize_crop"), ("RGB", "BGR", "GRAY"), ("NCHW", "NHWC")
        )
    ),
)
def test_uint8_pixels_go_in_as_the_float_path_computes_them(resize, order, layout, monkeypatch):
    pre = Preprocessing(
        size=(96, 128), resize=resize, channel_order=order, layout=layout, scale=1.0, dtype="uint8"
    )
    as_float = Preprocessing(
        size=(96, 128), resize=resize, channel_order=order, layout=layout, scale=1.0
    )
    want, _ = as_float.apply(PHOTO)
    out = np.full(pre.output_shape(PHOTO.shape[:2]), 7, np.uint8)  # one slot of a batch
    calls = []
    real_empty = np.empty

    def counted(shape, dtype=float, *args, **kwargs):
        calls.append(np.dtype(dtype))
        return real_empty(shape, dtype, *args, **kwargs)

    monkeypatch.setattr(pp.np, "empty", counted)
    got, _ = pre.apply(PHOTO, out=out)
    assert got is out and got.dtype == np.uint8
    assert np.float32 not in calls  # no float32 work buffer on the way
    np.testing.assert_array_equal(got.astype(np.float32), want)


def test_a_camera_frame_scaled_by_the_decoder_gives_the_same_tensor():
    pre = Preprocessing(size=(640, 640), resize="letterbox", scale=1.0, dtype="uint8")
    frame = cv2.resize(load_photo("chelsea"), (1280, 720))
    scaled = cv2.resize(frame, pre.decode_size(frame.shape[:2]), interpolation=cv2.INTER_AREA)
    got, t = pre.apply(scaled, source_hw=frame.shape[:2])
    want, _ = Preprocessing(size=(640, 640), resize="letterbox", scale=1.0).apply(
        scaled, source_hw=frame.shape[:2]
    )
    np.testing.assert_array_equal(got, want.astype(np.uint8))
    assert (got[:, :140] == 114).all() and (got[:, 500:] == 114).all()  # the letterbox's pad
    assert t.source_hw == (720, 1280)


@pytest.mark.parametrize("order", ["RGB", "BGR"])
def test_a_portrait_frame_s_planes_go_between_the_side_pads(order):
    """OpenCV splits the channels straight into the tensor's planes, here windows between the
    left and right pads (rows of the window are not contiguous): the same values as the float
    path, the pads untouched."""
    portrait = np.ascontiguousarray(PHOTO[:, 100:226])  # 126 x 225: taller than wide
    pre = Preprocessing(size=(96, 128), resize="letterbox", channel_order=order, scale=1.0)
    want, _ = pre.apply(portrait)
    got, _ = Preprocessing(
        size=(96, 128), resize="letterbox", channel_order=order, scale=1.0, dtype="uint8"
    ).apply(portrait)
    np.testing.assert_array_equal(got.astype(np.float32), want)
    assert (got[:, :, :5] == 114).all() and (got[:, :, -5:] == 114).all()


def test_a_fractional_pad_in_a_uint8_tensor_is_cast_as_before():
    pre = Preprocessing(
        size=(64, 64), resize="letterbox", scale=1.0, dtype="uint8", pad_value=114.7
    )
    x, _ = pre.apply(np.full((16, 64, 3), 200, np.uint8))
    assert x.dtype == np.uint8 and x[0, 0, 0] == 114 and (x[:, 24:40] == 200).all()


def test_normalising_models_are_not_taken_for_raw_ones():
    assert Preprocessing(size=(8, 8), scale=1.0, dtype="uint8").identity
    assert not Preprocessing(size=(8, 8), dtype="uint8").identity  # scale 1/255
    assert not Preprocessing(size=(8, 8), scale=1.0, mean=(1, 0, 0)).identity
    assert not Preprocessing(size=(8, 8), scale=1.0, std=(1, 2, 1)).identity
    # a uint8 model that still records a scale: the float path, then the cast (as before)
    pre = Preprocessing(size=(4, 4), resize="stretch", scale=0.5, dtype="uint8")
    x, _ = pre.apply(np.full((4, 4, 3), 201, np.uint8))
    assert (x == 100).all()


@pytest.mark.parametrize("order", ("RGB", "BGR"))
def test_channels_of_a_colour_nhwc_tensor_are_in_the_models_order(order):
    """Blue, green and red planes apart: each lands in its channel (the swap is OpenCV's)."""
    img = np.zeros((32, 48, 3), np.uint8)
    img[..., 0], img[..., 1], img[..., 2] = 10, 20, 30  # BGR
    for dtype, scale in (("uint8", 1.0), ("float32", 1.0)):
        pre = Preprocessing(
            size=(48, 48),
            resize="letterbox",
            layout="NHWC",
            channel_order=order,
            scale=scale,
            dtype=dtype,
        )
        x, _ = pre.apply(img)
        want = (10, 20, 30) if order == "BGR" else (30, 20, 10)
        assert tuple(x[24, 24]) == want and tuple(x[0, 0]) == (114, 114, 114)
