"""Reading image files into OpenCV BGR arrays, with one-sentence errors."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from .errors import SourceError

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"})
DEFAULT_MAX_PIXELS = 120_000_000  # a 120-megapixel image decodes to 360 MB of BGR


def max_pixels() -> int:
    """The decoded-size limit: ``EDGERT_MAX_IMAGE_PIXELS`` or 120 megapixels."""
    try:
        return max(1, int(os.environ.get("EDGERT_MAX_IMAGE_PIXELS", DEFAULT_MAX_PIXELS)))
    except ValueError:
        return DEFAULT_MAX_PIXELS


def header_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, JPEG, BMP or GIF header without decoding, or None."""
    try:
        if data[:8] == b"\x89PNG\r\n\x1a\n":
            return struct.unpack(">II", data[16:24])
        if data[:2] == b"BM":
            w, h = struct.unpack("<ii", data[18:26])
            return abs(w), abs(h)
        if data[:6] in (b"GIF87a", b"GIF89a"):
            return struct.unpack("<HH", data[6:10])
        if data[:2] == b"\xff\xd8":
            i = 2
            while i + 9 < len(data):
                if data[i] != 0xFF:
                    return None
                if data[i + 1] == 0xFF:  # fill bytes before a marker
                    i += 1
                    continue
                marker = data[i + 1]
                length = struct.unpack(">H", data[i + 2 : i + 4])[0]
                if marker in (
                    0xC0,
                    0xC1,
                    0xC2,
                    0xC3,
                    0xC5,
                    0xC6,
                    0xC7,
                    0xC9,
                    0xCA,
                    0xCB,
                    0xCD,
                    0xCE,
                    0xCF,
                ):
                    h, w = struct.unpack(">HH", data[i + 5 : i + 9])
                    return w, h
                i += 2 + length
    except struct.error:
        return None
    return None


def decode_image(data: bytes | np.ndarray, what: str) -> np.ndarray:
    """Encoded image bytes -> BGR uint8; SourceError for undecodable or absurdly large images."""
    import cv2

    buf = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray)) else data
    size = header_size(buf[: 1 << 16].tobytes())
    limit = max_pixels()
    if size is not None and size[0] * size[1] > limit:
        raise SourceError(
            f"{what} is {size[0]}x{size[1]} pixels, more than the {limit} that edgert decodes "
            "(raise EDGERT_MAX_IMAGE_PIXELS if you mean it)"
        )
    img = cv2.imdecode(buf, cv2.IMREAD_COLOR) if buf.size else None
    if img is None:
        raise SourceError(f"{what} is not an image OpenCV can decode")
    if img.shape[0] * img.shape[1] > limit:
        raise SourceError(
            f"{what} is {img.shape[1]}x{img.shape[0]} pixels, more than the {limit} that edgert "
            "decodes (raise EDGERT_MAX_IMAGE_PIXELS if you mean it)"
        )
    return img


def read_image(path: str | Path) -> np.ndarray:
    path = Path(path)
    if not path.is_file():
        raise SourceError(f"image {path} does not exist")
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise SourceError(f"cannot read image {path}: {exc.strerror}") from exc
    return decode_image(data, str(path))
