"""Reading image files into OpenCV BGR arrays, with one-sentence errors.

An image's size is read from its header before anything is decoded, for every format OpenCV's
``imdecode`` decodes (it picks the decoder by the same signatures), so a small file that claims a
huge picture (a decompression bomb) is refused without allocating it. A file none of those
signatures fits is refused too: OpenCV would not decode it either.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import numpy as np

from ..errors import SourceError

IMAGE_SUFFIXES = frozenset(
    {
        ".jpg",
        ".jpeg",
        ".png",
        ".bmp",
        ".webp",
        ".tif",
        ".tiff",
        ".gif",
        ".pgm",
        ".ppm",
        ".pbm",
        ".pnm",
        ".pam",
        ".pfm",
        ".hdr",
        ".pic",
        ".ras",
        ".sr",
        ".jp2",
        ".j2k",
        ".avif",
        ".exr",
    }
)
DEFAULT_MAX_PIXELS = 120_000_000  # a 120-megapixel image decodes to 360 MB of BGR
FORMATS = "JPEG, PNG, BMP, GIF, WebP, TIFF, PNM/PAM/PFM, Radiance HDR, Sun raster, JPEG 2000, AVIF, OpenEXR"


def max_pixels() -> int:
    """The decoded-size limit: ``EDGERT_MAX_IMAGE_PIXELS`` or 120 megapixels."""
    try:
        return max(1, int(os.environ.get("EDGERT_MAX_IMAGE_PIXELS", DEFAULT_MAX_PIXELS)))
    except ValueError:
        return DEFAULT_MAX_PIXELS


class _Unreadable(Exception):
    """The header is truncated or inconsistent."""


def _unpack(fmt: str, data: bytes, offset: int) -> tuple:
    try:
        return struct.unpack_from(fmt, data, offset)
    except struct.error:
        raise _Unreadable() from None


# JPEG start-of-frame markers (SOF0-SOF15 less DHT C4, JPG C8 and DAC CC)
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM, RSTn: no length field


def _jpeg(data: bytes) -> tuple[int, int]:
    """The frame header's size, found the way libjpeg finds markers: bytes up to the next 0xFF
    are skipped, fill bytes (0xFF 0xFF) and stuffed zeros (0xFF 0x00) are not markers."""
    i = 2  # after SOI; the frame header may follow any number of APP segments of 64 KiB each
    while True:
        i = data.find(b"\xff", i)
        if i < 0:
            raise _Unreadable()
        while i < len(data) and data[i] == 0xFF:  # fill bytes before a marker
            i += 1
        if i >= len(data):
            raise _Unreadable()
        marker = data[i]
        i += 1
        if marker == 0x00 or marker in _STANDALONE:
            continue
        if marker in (0xD9, 0xDA):  # end of image or start of scan before any frame header
            raise _Unreadable()
        (length,) = _unpack(">H", data, i)
        if marker in _SOF:
            h, w = _unpack(">HH", data, i + 3)
            return w, h
        i += length


def _png(data: bytes) -> tuple[int, int]:
    if data[12:16] != b"IHDR":
        raise _Unreadable()
    return _unpack(">II", data, 16)


def _bmp(data: bytes) -> tuple[int, int]:
    (header,) = _unpack("<I", data, 14)
    if header == 12:  # OS/2 BITMAPCOREHEADER: 16-bit sizes
        return _unpack("<HH", data, 18)
    w, h = _unpack("<ii", data, 18)
    return abs(w), abs(h)


def _gif(data: bytes) -> tuple[int, int]:
    # the logical screen; OpenCV decodes every frame into a picture of this size
    return _unpack("<HH", data, 6)


def _webp(data: bytes) -> tuple[int, int]:
    chunk = data[12:16]
    if chunk == b"VP8X":  # extended: the canvas, 24-bit sizes minus one
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        if len(data) < 30:
            raise _Unreadable()
        return w, h
    if chunk == b"VP8L":  # lossless: 14-bit sizes minus one after the 0x2f signature
        (bits,) = _unpack("<I", data, 21)
        if data[20:21] != b"\x2f":
            raise _Unreadable()
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":  # lossy: the key frame's 14-bit sizes after its start code
        if data[23:26] != b"\x9d\x01\x2a":
            raise _Unreadable()
        w, h = _unpack("<HH", data, 26)
        return w & 0x3FFF, h & 0x3FFF
    raise _Unreadable()


_TIFF_TYPES = {3: ("H", 2), 4: ("I", 4), 16: ("Q", 8)}  # SHORT, LONG, LONG8


def _tiff(data: bytes) -> tuple[int, int]:
    end = "<" if data[:2] == b"II" else ">"
    (magic,) = _unpack(end + "H", data, 2)
    big = magic == 43
    if big:  # BigTIFF: 8-byte offsets and counts, 20-byte entries
        (offset,) = _unpack(end + "Q", data, 8)
        (count,) = _unpack(end + "Q", data, offset)
        first, entry = offset + 8, 20
    else:
        (offset,) = _unpack(end + "I", data, 4)
        (count,) = _unpack(end + "H", data, offset)
        first, entry = offset + 2, 12
    found: dict[int, int] = {}
    for k in range(min(count, 4096)):  # the first page: the one imdecode decodes
        at = first + k * entry
        tag, kind = _unpack(end + "HH", data, at)
        if tag in (256, 257) and kind in _TIFF_TYPES:
            code, _ = _TIFF_TYPES[kind]
            (value,) = _unpack(end + code, data, at + (12 if big else 8))
            found.setdefault(tag, value)  # libtiff takes the first of duplicate tags
    if 256 not in found or 257 not in found:
        raise _Unreadable()
    return found[256], found[257]


_TOKEN = re.compile(rb"(?:\s|#[^\n]*\n?)*(\S+)")


def _pnm(data: bytes) -> tuple[int, int]:
    # P1-P6 and PF/Pf: magic, width, height as text with comments between
    head, pos, values = data[:4096], 2, []
    while len(values) < 2:
        m = _TOKEN.match(head, pos)
        if m is None or not m.group(1).isdigit():
            raise _Unreadable()
        values.append(int(m.group(1)))
        pos = m.end()
    return values[0], values[1]


def _pam(data: bytes) -> tuple[int, int]:
    head = data[: 1 << 16].split(b"ENDHDR", 1)[0]
    w = re.search(rb"^\s*WIDTH\s+(\d+)", head, re.M)
    h = re.search(rb"^\s*HEIGHT\s+(\d+)", head, re.M)
    if not (w and h):
        raise _Unreadable()
    return int(w.group(1)), int(h.group(1))


def _hdr(data: bytes) -> tuple[int, int]:
    # Radiance: header lines, a blank line, then "-Y H +X W" (or another orientation)
    m = re.search(rb"\n\n([-+][XY])\s+(\d+)\s+([-+][XY])\s+(\d+)", data[: 1 << 16])
    if m is None:
        raise _Unreadable()
    sizes = {m.group(1)[1:]: int(m.group(2)), m.group(3)[1:]: int(m.group(4))}
    if set(sizes) != {b"X", b"Y"}:
        raise _Unreadable()
    return sizes[b"X"], sizes[b"Y"]


def _sun(data: bytes) -> tuple[int, int]:
    return _unpack(">II", data, 4)


def _boxes(data: bytes, start: int, end: int):
    """ISO base media boxes (JPEG 2000's JP2, AVIF's HEIF) between two offsets: (type, body
    start, body end)."""
    i = start
    while i + 8 <= end:
        size, kind = _unpack(">I4s", data, i)
        head = 8
        if size == 1:
            (size,) = _unpack(">Q", data, i + 8)
            head = 16
        elif size == 0:
            size = end - i
        if size < head or i + size > end:
            raise _Unreadable()
        yield kind, i + head, i + size
        i += size


def _jp2(data: bytes) -> tuple[int, int]:
    if data[:4] == b"\xff\x4f\xff\x51":  # a bare codestream: its SIZ segment
        xs, ys, xo, yo = _unpack(">IIII", data, 8)
        return xs - xo, ys - yo
    for kind, a, b in _boxes(data, 0, len(data)):
        if kind == b"jp2h":
            for sub, sa, _ in _boxes(data, a, b):
                if sub == b"ihdr":
                    h, w = _unpack(">II", data, sa)
                    return w, h
        if kind == b"jp2c":  # the codestream box, at the top level: its SIZ segment
            if data[a : a + 4] != b"\xff\x4f\xff\x51":
                raise _Unreadable()
            xs, ys, xo, yo = _unpack(">IIII", data, a + 8)
            return xs - xo, ys - yo
    raise _Unreadable()


def _avif(data: bytes) -> tuple[int, int]:
    # the largest image spatial extent ('ispe') among the item properties: a grid image's or a tile's
    best = None
    for kind, a, b in _boxes(data, 0, len(data)):
        if kind != b"meta":
            continue
        for sub, sa, sb in _boxes(data, a + 4, b):  # meta is a full box: version and flags first
            if sub != b"iprp":
                continue
            for prop, pa, pb in _boxes(data, sa, sb):
                if prop != b"ipco":
                    continue
                for item, ia, _ in _boxes(data, pa, pb):
                    if item == b"ispe":
                        w, h = _unpack(">II", data, ia + 4)
                        if best is None or w * h > best[0] * best[1]:
                            best = (w, h)
    if best is None:
        raise _Unreadable()
    return best


def _exr(data: bytes) -> tuple[int, int]:
    i = 8  # magic and version; then attributes (name, type, size, value) up to an empty name
    while i < len(data) and data[i] != 0:
        name_end = data.index(b"\0", i)
        type_end = data.index(b"\0", name_end + 1)
        (size,) = _unpack("<I", data, type_end + 1)
        value = type_end + 5
        if data[i:name_end] == b"dataWindow":
            x0, y0, x1, y1 = _unpack("<iiii", data, value)
            return x1 - x0 + 1, y1 - y0 + 1
        i = value + size
    raise _Unreadable()


def _is_avif(data: bytes) -> bool:
    if data[4:8] != b"ftyp":
        return False
    (size,) = struct.unpack(">I", data[:4]) if len(data) >= 4 else (0,)
    brands = data[8:12] + data[16 : min(size, 256)]
    return any(brands[k : k + 4] in (b"avif", b"avis") for k in range(0, len(brands), 4))


def _format(data: bytes):
    """(format name, size reader) for the signature ``data`` starts with, or None."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "PNG", _png
    if data[:3] == b"\xff\xd8\xff":
        return "JPEG", _jpeg
    if data[:2] == b"BM":
        return "BMP", _bmp
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF", _gif
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP", _webp
    if data[:4] in (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+"):
        return "TIFF", _tiff
    if len(data) > 2 and data[:1] == b"P" and data[2:3].isspace():
        if data[1:2] in b"123456" or data[1:2] in (b"F", b"f"):
            return "PNM", _pnm
        if data[1:2] == b"7":
            return "PAM", _pam
    if data[:6] == b"#?RGBE" or data[:10] == b"#?RADIANCE":
        return "Radiance HDR", _hdr
    if data[:4] == b"\x59\xa6\x6a\x95":
        return "Sun raster", _sun
    if data[:12] == b"\0\0\0\x0cjP  \r\n\x87\n" or data[:4] == b"\xff\x4f\xff\x51":
        return "JPEG 2000", _jp2
    if data[:4] == b"\x76\x2f\x31\x01":
        return "OpenEXR", _exr
    if _is_avif(data):
        return "AVIF", _avif
    return None


def _header(data: bytes) -> tuple[str, tuple[int, int] | None] | None:
    """(format name, (width, height) or None when its header cannot be read) for any format
    OpenCV decodes; None when ``data`` starts with none of their signatures."""
    found = _format(data[:256])
    if found is None:
        return None
    try:
        return found[0], found[1](data)
    except Exception:  # noqa: BLE001 - _Unreadable, or a header built to break the reader
        return found[0], None


def header_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the header of any image format OpenCV decodes, without decoding; None
    when ``data`` is no such image or its header is truncated."""
    found = _header(bytes(data))
    return found[1] if found else None


def _too_large(what: str, w: int, h: int, limit: int) -> SourceError:
    return SourceError(
        f"{what} is {w}x{h} pixels, more than the {limit} that edgert decodes "
        "(raise EDGERT_MAX_IMAGE_PIXELS if you mean it)"
    )


def check_pixels(width: float, height: float, what: str) -> None:
    """SourceError when a picture of ``width`` x ``height`` (a video's frame size as its container
    says) is over the decoded-size limit."""
    w, h, limit = int(width or 0), int(height or 0), max_pixels()
    if w * h > limit:
        raise _too_large(what, w, h, limit)


def decode_image(data: bytes | np.ndarray, what: str) -> np.ndarray:
    """Encoded image bytes -> BGR uint8; SourceError for undecodable or absurdly large images,
    refused from the header before anything is decoded."""
    import cv2

    buf = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray)) else data
    found = _header(buf.tobytes())
    if found is None:
        raise SourceError(f"{what} is not an image OpenCV can decode (formats: {FORMATS})")
    if found[1] is None:
        raise SourceError(f"{what} is not a readable {found[0]} image (its header is damaged)")
    check_pixels(*found[1], what)
    limit = max_pixels()
    try:
        img = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    except cv2.error:
        img = None
    if img is None:
        raise SourceError(f"{what} is not an image OpenCV can decode")
    if img.shape[0] * img.shape[1] > limit:  # a format whose frames outgrow its header
        raise _too_large(what, img.shape[1], img.shape[0], limit)
    return img


def read_image(path: str | Path) -> np.ndarray:
    path = Path(path)
    if path.is_dir():
        raise SourceError(f"{path} is a folder, not an image")
    if not path.is_file():
        raise SourceError(f"image {path} does not exist")
    try:
        with open(path, "rb") as fh:  # the header first: a huge file is not read in to refuse it
            head = fh.read(1 << 20)
            size = header_size(head)
            if size is not None:
                check_pixels(size[0], size[1], str(path))
            data = np.frombuffer(head + fh.read(), dtype=np.uint8)
    except OSError as exc:
        raise SourceError(f"cannot read image {path}: {exc.strerror}") from exc
    return decode_image(data, str(path))
