"""The CPU preprocessing as it was before issue 47 (main 8c34459), kept as the reference the new,
faster path is held to: float32 bilinear on the whole source frame, grey conversion on the whole
source frame in float32, then separate numpy passes for scale, mean, std and layout."""

from __future__ import annotations

import numpy as np

from edgert.runtime.images.resize import INTERPOLATIONS as _INTERPOLATIONS
from edgert.runtime.images.resize import nearest_index


def reference_apply(pre, image: np.ndarray):
    img = _to_channels(np.asarray(image), pre.input_order, pre.channel_order)
    resized, transform = _geometry(pre, img)
    out = resized.astype(np.float32) * np.float32(pre.scale)
    mean = np.asarray(pre.mean, np.float32)
    std = np.asarray(pre.std, np.float32)
    out = (out - mean) / std
    if pre.layout == "NCHW":
        out = out.transpose(2, 0, 1)
    return np.ascontiguousarray(out, dtype=pre.dtype), transform


def _geometry(pre, img):
    import cv2

    t = pre.geometry(img.shape[:2])
    if pre.resize == "none":
        return img, t
    interp = _INTERPOLATIONS[pre.interpolation]
    aa = pre.interpolation == "linear"
    if pre.interpolation == "bilinear":
        img = img.astype(np.float32)
    th, tw = pre.size
    nw, nh = t.resized_wh
    if pre.resize == "resize_crop" and nw * nh > max(4 * th * tw, img.shape[0] * img.shape[1]):
        return _sample_window(cv2, img, t, tw, th, pre.interpolation), t
    out = _resize(cv2, img, nw, nh, interp, aa)
    if pre.resize == "letterbox":
        top, left = int(t.oy), int(t.ox)
        canvas = np.full((th, tw, img.shape[2]), pre.pad_value, dtype=out.dtype)
        canvas[top : top + nh, left : left + nw] = out
        return canvas, t
    top, left = int(-t.oy), int(-t.ox)
    return out[top : top + th, left : left + tw], t


def _to_channels(img, have, want):
    if img.ndim == 2:
        img = img[:, :, None]
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


def _sample_window(cv2, img, t, tw, th, interp):
    h, w = img.shape[:2]
    xs = (np.arange(tw, dtype=np.float64) - t.ox + 0.5) / t.sx - 0.5
    ys = (np.arange(th, dtype=np.float64) - t.oy + 0.5) / t.sy - 0.5
    if interp == "nearest":
        nw, nh = t.resized_wh
        xi = nearest_index(np.arange(tw) - round(t.ox), w, nw)
        yi = nearest_index(np.arange(th) - round(t.oy), h, nh)
        return img[yi[:, None], xi[None, :]]
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


def _resize(cv2, img, w, h, interp, antialias):
    if img.shape[1] == w and img.shape[0] == h:
        return img
    if interp == _INTERPOLATIONS["nearest"]:
        xi = nearest_index(np.arange(w), img.shape[1], w)
        yi = nearest_index(np.arange(h), img.shape[0], h)
        return img[yi[:, None], xi[None, :]]
    if antialias and (w < img.shape[1] or h < img.shape[0]):
        interp = _INTERPOLATIONS["area"]
    src = img if img.dtype in (np.uint8, np.float32) else img.astype(np.float32)
    out = cv2.resize(src, (w, h), interpolation=interp)
    return out[:, :, None] if out.ndim == 2 else out
