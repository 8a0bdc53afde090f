"""CPU preprocessing driven by the bundle manifest, and the transform back to source pixels.

The manifest's ``preprocessing`` section is the single source of truth: export writes it, the
runtime, calibration and apps read it through :class:`Preprocessing`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .errors import BundleError, ShapeError

RESIZE_MODES = ("resize_crop", "stretch", "letterbox", "none")
CHANNEL_ORDERS = ("RGB", "BGR", "GRAY")
LAYOUTS = ("NCHW", "NHWC")
# "linear" averages (area) when shrinking, like PIL's antialiased bilinear; "bilinear" is exact
# bilinear sampling at pixel centres in float arithmetic, what the GPU kernel computes.
_INTERPOLATIONS = {
    "nearest": 6,
    "linear": 1,
    "cubic": 2,
    "area": 3,
    "bilinear": 1,
}  # 6: INTER_NEAREST_EXACT (pixel centres)


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
        if self.interpolation not in _INTERPOLATIONS:
            raise BundleError(f"unknown interpolation {self.interpolation!r}")
        if len(self.mean) != len(self.std) or any(s == 0 for s in self.std):
            raise BundleError("preprocessing mean and std must have one non-zero value per channel")

    @property
    def channels(self) -> int:
        return 1 if self.channel_order == "GRAY" else 3

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
            kwargs["size"] = tuple(int(v) for v in kwargs["size"])
            kwargs["mean"] = tuple(float(v) for v in kwargs.get("mean", (0.0,)))
            kwargs["std"] = tuple(float(v) for v in kwargs.get("std", (1.0,)))
            known = {f for f in cls.__dataclass_fields__ if f != "input_order"}
            return cls(**{k: v for k, v in kwargs.items() if k in known})
        except (KeyError, TypeError, ValueError) as exc:
            raise BundleError(f"the manifest's preprocessing section is invalid: {exc}") from exc

    def __call__(self, image: np.ndarray) -> tuple[np.ndarray, Transform]:
        return self.apply(image)

    def apply(self, image: np.ndarray) -> tuple[np.ndarray, Transform]:
        """One image (HxW or HxWxC, uint8 or float, in ``input_order``) -> (model tensor, transform).

        The tensor has no batch axis: CHW for NCHW, HWC for NHWC.
        """
        img = _to_channels(np.asarray(image), self.input_order, self.channel_order)
        resized, transform = self._geometry(img)
        out = resized.astype(np.float32) * np.float32(self.scale)
        mean = np.asarray(self.mean, np.float32)
        std = np.asarray(self.std, np.float32)
        out = (out - mean) / std
        if self.layout == "NCHW":
            out = out.transpose(2, 0, 1)
        return np.ascontiguousarray(out, dtype=self.dtype), transform

    def batch(self, images: list[np.ndarray]) -> tuple[np.ndarray, list[Transform]]:
        tensors, transforms = zip(*(self.apply(im) for im in images), strict=True)
        return np.stack(tensors), list(transforms)

    def geometry(self, hw: tuple[int, int]) -> Transform:
        """The transform for an image of ``hw`` (height, width), without touching pixels.

        Shared by the CPU path and the GPU kernel, so both place the image identically.
        """
        h, w = hw
        th, tw = self.size
        if self.resize == "none":
            if (h, w) != (th, tw):
                raise ShapeError(
                    f"image is {h}x{w} but the model takes {th}x{tw} and resize is 'none'"
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

    def _geometry(self, img: np.ndarray) -> tuple[np.ndarray, Transform]:
        import cv2

        t = self.geometry(img.shape[:2])
        if self.resize == "none":
            return img, t
        interp = _INTERPOLATIONS[self.interpolation]
        aa = self.interpolation == "linear"
        if self.interpolation == "bilinear":
            img = img.astype(np.float32)
        th, tw = self.size
        nw, nh = t.resized_wh
        out = _resize(cv2, img, nw, nh, interp, aa)
        if self.resize == "letterbox":
            top, left = int(t.oy), int(t.ox)
            canvas = np.full((th, tw, img.shape[2]), self.pad_value, dtype=out.dtype)
            canvas[top : top + nh, left : left + nw] = out
            return canvas, t
        top, left = int(-t.oy), int(-t.ox)
        return out[top : top + th, left : left + tw], t


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


def _to_channels(img: np.ndarray, have: str, want: str) -> np.ndarray:
    if img.ndim == 2:
        img = img[:, :, None]
    if img.ndim != 3 or img.shape[2] not in (1, 3, 4):
        raise ShapeError(
            f"expected an image of HxW or HxWxC (C = 1, 3 or 4), got shape {img.shape}"
        )
    if img.shape[2] == 4:
        img = img[:, :, :3]
    if want == "GRAY":
        if img.shape[2] == 1:
            return img
        rgb = img[:, :, ::-1] if have == "BGR" else img
        gray = rgb.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
        return gray[:, :, None]
    if img.shape[2] == 1:
        return np.repeat(img, 3, axis=2)
    return img[:, :, ::-1] if have != want else img


def _resize(cv2, img: np.ndarray, w: int, h: int, interp: int, antialias: bool) -> np.ndarray:
    if img.shape[1] == w and img.shape[0] == h:
        return img
    if antialias and (w < img.shape[1] or h < img.shape[0]):
        interp = _INTERPOLATIONS["area"]  # antialias when shrinking, as PIL's bilinear does
    src = img if img.dtype in (np.uint8, np.float32) else img.astype(np.float32)
    out = cv2.resize(src, (w, h), interpolation=interp)
    return out[:, :, None] if out.ndim == 2 else out
