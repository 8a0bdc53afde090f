"""CPU preprocessing driven by the bundle manifest, and the transform back to source pixels.

The manifest's ``preprocessing`` section is the single source of truth: export writes it, the
runtime, calibration and apps read it through :class:`Preprocessing`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import BundleError, ShapeError
from .resize import (
    GRAY_CODES,
    INTERPOLATIONS,
    Transform,
    as_hwc,
    channels,
    resize,
    sample_window,
)

MAX_SIZE = 8192  # model input side, pixels
RESIZE_MODES = ("resize_crop", "stretch", "letterbox", "none")
CHANNEL_ORDERS = ("RGB", "BGR", "GRAY")
LAYOUTS = ("NCHW", "NHWC")


@dataclass(frozen=True)
class Preprocessing:
    """How a raw image becomes the model input.

    Pixels are first multiplied by ``scale``, then normalised as ``(x - mean) / std`` per channel.
    ``size`` is the model input (height, width). ``resize_crop`` resizes the shorter side to
    ``resize_short`` and centre-crops ``size``; ``letterbox`` keeps the aspect ratio and pads with
    ``pad_value``; ``stretch`` resizes to ``size``; ``none`` requires the image to be ``size``.
    """

    size: tuple[int, int]
    resize: str = "stretch"
    resize_short: int | None = None
    interpolation: str = "linear"
    channel_order: str = "RGB"
    layout: str = "NCHW"
    scale: float = 1.0 / 255.0
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    std: tuple[float, ...] = (1.0, 1.0, 1.0)
    dtype: str = "float32"
    pad_value: float = 114.0
    input_order: str = field(default="BGR", compare=False)  # order of images handed to apply()

    def __post_init__(self) -> None:
        if self.resize not in RESIZE_MODES:
            raise BundleError(
                f"unknown resize mode {self.resize!r}; expected one of {RESIZE_MODES}"
            )
        if self.channel_order not in CHANNEL_ORDERS:
            raise BundleError(f"unknown channel order {self.channel_order!r}")
        if self.layout not in LAYOUTS:
            raise BundleError(f"unknown layout {self.layout!r}; expected NCHW or NHWC")
        if self.interpolation not in INTERPOLATIONS:
            raise BundleError(f"unknown interpolation {self.interpolation!r}")
        if len(self.mean) != len(self.std) or any(s == 0 for s in self.std):
            raise BundleError("preprocessing mean and std must have one non-zero value per channel")
        any_size = self.resize == "none"  # -1: the model takes any size (MTCNN's P-Net)
        if len(self.size) != 2 or not all(
            1 <= d <= MAX_SIZE or (any_size and d == -1) for d in self.size
        ):
            raise BundleError(
                f"preprocessing size {'x'.join(map(str, self.size))} must be HxW with each side "
                f"from 1 to {MAX_SIZE}"
            )
        if self.resize_short is not None and not 1 <= self.resize_short <= MAX_SIZE:
            raise BundleError(f"preprocessing resize_short must be from 1 to {MAX_SIZE}")
        numbers = (self.scale, self.pad_value, *self.mean, *self.std)
        if not all(math.isfinite(v) for v in numbers) or len(self.mean) not in (1, 3):
            raise BundleError(
                "preprocessing scale, pad_value, mean and std must be finite numbers (1 or 3 "
                "mean/std values)"
            )
        if self.dtype not in ("float32", "float16", "uint8"):
            raise BundleError(
                f"preprocessing dtype {self.dtype!r} must be float32, float16 or uint8"
            )

    @property
    def channels(self) -> int:
        return 1 if self.channel_order == "GRAY" else 3

    @property
    def identity(self) -> bool:
        """No arithmetic: the model takes the pixels as they are (scale 1, mean 0, std 1), as a
        bundle whose graph normalises its uint8 input does (``edgert export --uint8-input``)."""
        return self.scale == 1 and not any(self.mean) and all(s == 1 for s in self.std)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("input_order")
        data["size"] = list(self.size)
        data["mean"] = list(self.mean)
        data["std"] = list(self.std)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Preprocessing:
        try:
            kwargs = dict(data)
            kwargs["size"] = tuple(_int(v) for v in kwargs["size"])
            kwargs["mean"] = tuple(float(v) for v in kwargs.get("mean", (0.0,)))
            kwargs["std"] = tuple(float(v) for v in kwargs.get("std", (1.0,)))
            for key in ("scale", "pad_value"):
                if key in kwargs:
                    kwargs[key] = float(kwargs[key])
            if kwargs.get("resize_short") is not None:
                kwargs["resize_short"] = _int(kwargs["resize_short"])
            for key in ("resize", "interpolation", "channel_order", "layout", "dtype"):
                if key in kwargs and not isinstance(kwargs[key], str):
                    raise TypeError(f"{key} must be a string")
            known = {f for f in cls.__dataclass_fields__ if f != "input_order"}
            return cls(**{k: v for k, v in kwargs.items() if k in known})
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise BundleError(f"the manifest's preprocessing section is invalid: {exc}") from exc

    def __call__(self, image: np.ndarray) -> tuple[np.ndarray, Transform]:
        return self.apply(image)

    def output_shape(self, hw: tuple[int, int]) -> tuple[int, int, int]:
        """The tensor shape (no batch axis) for an image of ``hw`` (height, width)."""
        h, w = hw if self.resize == "none" else self.size
        return (self.channels, h, w) if self.layout == "NCHW" else (h, w, self.channels)

    def decode_size(self, hw: tuple[int, int]) -> tuple[int, int] | None:
        """(width, height) that a source of ``hw`` (height, width) is resized to before a
        letterbox's padding or a crop: what a decoder can scale frames to, so that :meth:`apply`
        (given ``source_hw``) has nothing left to resize. None where that would not shrink the
        frame (then the decoder gives full frames) or resize is 'none'."""
        if self.resize == "none":
            return None
        h, w = hw
        nw, nh = self.geometry(hw).resized_wh
        if nw > w or nh > h or (nw, nh) == (w, h):
            return None
        return nw, nh

    def apply(
        self,
        image: np.ndarray,
        out: np.ndarray | None = None,
        source_hw: tuple[int, int] | None = None,
    ) -> tuple[np.ndarray, Transform]:
        """One image (HxW or HxWxC, uint8 or float, in ``input_order``) -> (model tensor, transform).

        The tensor has no batch axis: CHW for NCHW, HWC for NHWC. ``out`` (that shape and
        ``dtype``, e.g. one slot of a batch) is written in place and returned. ``source_hw``:
        the image is a frame of that size scaled already (by the decoder, to
        :meth:`decode_size`); the transform maps to the source's pixels, and an image of another
        size is resized as usual.

        The work is done at the resized size: the source is resized in its own dtype (uint8 from
        a camera: OpenCV's fixed-point kernels), then channel order, grey, scale, mean, std,
        layout and padding are written in one set of passes straight into the output.
        """
        img = as_hwc(np.asarray(image))
        if self.resize == "none":
            source_hw = None  # no geometry to keep: the model takes the image as it is
        t = self.geometry(tuple(source_hw) if source_hw else img.shape[:2])
        shape = self.output_shape(img.shape[:2])
        if out is None:
            out = np.empty(shape, self.dtype)
        elif out.shape != shape or out.dtype != np.dtype(self.dtype):
            raise ShapeError(
                f"the output buffer is {out.shape} {out.dtype}; this image needs {shape} "
                f"{self.dtype}"
            )
        pixels, (top, left) = self._resized(img, t)
        # uint8 pixels that go in as they are: written straight into a uint8 tensor (a quarter
        # of a float32 tensor's bytes, no arithmetic); anything else through float32
        raw = (
            self.identity
            and pixels.dtype == out.dtype == np.uint8
            and is_pixel_value(self.pad_value)
        )
        work = out if raw or out.dtype == np.float32 else np.empty(shape, np.float32)
        self._normalise(pixels, work, top, left)
        if work is not out:
            np.copyto(out, work, casting="unsafe")
        return out, t

    def batch(self, images: list[np.ndarray]) -> tuple[np.ndarray, list[Transform]]:
        """Several images -> one batch tensor (written in place, no stacking) and transforms."""
        arrays = [as_hwc(np.asarray(im)) for im in images]
        if not arrays:
            raise ShapeError("a batch needs at least one image")
        shapes = {self.output_shape(a.shape[:2]) for a in arrays}
        if len(shapes) > 1:
            raise ShapeError(
                "images in one batch must give one tensor shape; with resize 'none' they give "
                + ", ".join(sorted(map(str, shapes)))
            )
        out = np.empty((len(arrays), *shapes.pop()), self.dtype)
        transforms = [self.apply(a, out=out[i])[1] for i, a in enumerate(arrays)]
        return out, transforms

    def geometry(self, hw: tuple[int, int]) -> Transform:
        """The transform for an image of ``hw`` (height, width), without touching pixels.

        Shared by the CPU path and the GPU kernel, so both place the image identically.
        """
        h, w = hw
        th, tw = self.size
        if self.resize == "none":  # -1: any size on that side (a fully convolutional model)
            if (th != -1 and h != th) or (tw != -1 and w != tw):
                want = f"{'any height' if th == -1 else th} x {'any width' if tw == -1 else tw}"
                raise ShapeError(
                    f"image is {h}x{w} but the model takes {want} and resize is 'none'"
                )
            return Transform(1.0, 1.0, 0.0, 0.0, (h, w))
        if self.resize == "stretch":
            return Transform(tw / w, th / h, 0.0, 0.0, (h, w))
        if self.resize == "resize_crop":
            s = (self.resize_short or min(th, tw)) / min(h, w)
            nw, nh = max(tw, round(w * s)), max(th, round(h * s))
            return Transform(nw / w, nh / h, -float((nw - tw) // 2), -float((nh - th) // 2), (h, w))
        s = min(th / h, tw / w)
        nw, nh = round(w * s), round(h * s)
        return Transform(nw / w, nh / h, float((tw - nw) // 2), float((th - nh) // 2), (h, w))

    def _resized(self, img: np.ndarray, t: Transform) -> tuple[np.ndarray, tuple[int, int]]:
        """The source's pixels at model scale (its own channels, uint8 stays uint8) and where
        their top-left corner goes in the model input (a letterbox's padding)."""
        import cv2

        if self.resize == "none":
            return img, (0, 0)
        th, tw = self.size
        nw, nh = t.resized_wh
        if (
            self.resize == "resize_crop"
            and img.shape[:2] == tuple(t.source_hw)  # not scaled by a decoder already
            and nw * nh > max(4 * th * tw, img.shape[0] * img.shape[1])
        ):
            # an extreme aspect ratio (1x40000): scaling the whole image first would take
            # gigabytes; sample only the crop window (same geometry, bounded by the output size)
            return sample_window(cv2, img, t, tw, th, self.interpolation), (0, 0)
        interp = INTERPOLATIONS[self.interpolation]
        if (
            self.channel_order == "GRAY"
            and img.shape[2] > 1
            and img.dtype == np.uint8
            and self.interpolation not in ("nearest", "bilinear")
        ):
            # averaging and cubic kernels cost per source pixel and channel: one grey channel
            # first (OpenCV's BT.601 weights, rounded to uint8); nearest and bilinear sample the
            # few pixels they need and take grey from the resized colour pixels
            img = cv2.cvtColor(img, GRAY_CODES[self.input_order, img.shape[2]])[:, :, None]
        out = resize(cv2, img, nw, nh, interp, self.interpolation == "linear")
        if self.resize == "letterbox":
            return out, (int(t.oy), int(t.ox))
        top, left = int(-t.oy), int(-t.ox)
        return out[top : top + th, left : left + tw], (0, 0)

    def _normalise(self, pixels: np.ndarray, out: np.ndarray, top: int, left: int) -> None:
        """``(pixels * scale - mean) / std`` in float32 (the same operations, in the same order,
        as a plain numpy expression), in the model's channel order and layout, into ``out``; a
        letterbox's padding is ``pad_value`` normalised the same way."""
        src = channels(pixels, self.input_order, self.channel_order)
        h, w = src.shape[:2]
        chw = self.layout == "NCHW"
        if chw:
            window = out[:, top : top + h, left : left + w]
            _planes(src, window)
        else:
            window = out[top : top + h, left : left + w]
            window[...] = _in_order(src)
        mean = np.asarray(self.mean, np.float32)
        std = np.asarray(self.std, np.float32)
        if not self.identity:
            self._arithmetic(window, mean, std, chw)
        oh, ow = out.shape[1:] if chw else out.shape[:2]
        if (h, w) == (oh, ow):
            return
        if self.identity:  # the pixel value itself (uint8: exact, see is_pixel_value)
            pad = np.full(self.channels, self.pad_value, np.float32).astype(out.dtype)
        else:
            pad = (np.float32(self.pad_value) * np.float32(self.scale) - mean) / std
        pad = np.broadcast_to(pad, (self.channels,))
        for rows, cols in (
            (slice(0, top), slice(None)),
            (slice(top + h, None), slice(None)),
            (slice(top, top + h), slice(0, left)),
            (slice(top, top + h), slice(left + w, None)),
        ):
            if chw:
                out[:, rows, cols] = pad[:, None, None]
            else:  # one padded row, then rows of it (a 3-value broadcast goes value by value)
                region = out[rows, cols]
                region[...] = np.ascontiguousarray(np.broadcast_to(pad, region.shape[1:]))

    def _arithmetic(self, window: np.ndarray, mean: np.ndarray, std: np.ndarray, chw: bool):
        """``(window * scale - mean) / std`` in place (float32)."""
        # float32(pixel) * float32(scale): what one mixed-type multiply gave, its cast apart
        # (numpy's uint8-to-float multiply casts in small buffers: ~1.6x the time)
        np.multiply(window, np.float32(self.scale), out=window)
        per_channel = (-1, 1, 1) if chw else (-1,)
        if mean.any():
            np.subtract(window, mean.reshape(per_channel), out=window)
        if (std != 1).any():
            np.divide(window, std.reshape(per_channel), out=window)


def is_pixel_value(value: float) -> bool:
    """Whether a value (a letterbox's pad) is a uint8 pixel value: a uint8 tensor holds it
    exactly."""
    return float(value).is_integer() and 0 <= value <= 255


def _in_order(src: np.ndarray) -> np.ndarray:
    """``src``, a view of three uint8 channels in the other order made contiguous by OpenCV's
    channel swap (numpy's copy of a reversed view moves a byte at a time: ~10x the time)."""
    if src.dtype != np.uint8 or src.shape[2] != 3 or src.strides[2] != -1:
        return src
    import cv2

    return cv2.cvtColor(np.ascontiguousarray(src[:, :, ::-1]), cv2.COLOR_BGR2RGB)


def _planes(src: np.ndarray, window: np.ndarray) -> None:
    """``src`` (HxWxC) into ``window`` (CxHxW: float32, or uint8 as it is) plane by plane.
    Three uint8 channels are split by OpenCV first: each plane is then one contiguous cast (a
    strided read of every third byte costs more than the split)."""
    if src.dtype == np.uint8 and src.shape[2] == 3 and src.strides[2] in (1, -1):
        import cv2

        reversed_ = src.strides[2] < 0  # a view in the other channel order: split its base
        order = (2, 1, 0) if reversed_ else (0, 1, 2)
        base = np.ascontiguousarray(src[:, :, ::-1] if reversed_ else src)
        if window.dtype == np.uint8:  # split straight into the tensor's planes (a third the time)
            planes = cv2.split(base, [window[c] for c in order])
        else:
            planes = cv2.split(base)
        for c in range(3):
            plane = planes[order[c]]
            if plane.ctypes.data != window[c].ctypes.data:  # not written in place: copied in
                window[c] = plane
        return
    window[...] = src.transpose(2, 0, 1)


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise TypeError(f"{value!r} is not a whole number")
    return int(value)
