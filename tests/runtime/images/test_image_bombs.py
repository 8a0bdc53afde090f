"""Decompression bombs: small files whose header claims a huge picture are refused from the header,
before OpenCV allocates it, for every format OpenCV decodes (issue 28.1)."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import zlib

import cv2
import numpy as np
import pytest

from edgert.runtime.errors import SourceError
from edgert.runtime.images import decode_image, header_size

BIG = 12000  # 144 megapixels: 432 MB of BGR, over the default 120-megapixel limit


def _encode(ext: str, img: np.ndarray, params=()) -> bytes:
    ok, buf = cv2.imencode(ext, img, list(params))
    assert ok, ext
    return buf.tobytes()


def _png() -> bytes:
    small = _encode(".png", np.zeros((2, 2, 3), np.uint8))
    chunk = b"IHDR" + struct.pack(">IIBBBBB", BIG, BIG, 8, 2, 0, 0, 0)
    return (
        small[:8]
        + struct.pack(">I", 13)
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
        + small[33:]
    )


def _jpeg_after_app_segment() -> bytes:
    # SOF after one 64 KB APP segment: outside the first 64 KiB that the old check read
    small = _encode(".jpg", np.zeros((8, 8, 3), np.uint8))
    app = b"\xff\xe9" + struct.pack(">H", 65533) + bytes(65531)
    data = bytearray(small[:2] + app + small[2:])
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", BIG, BIG)
    return bytes(data)


def _webp_lossless() -> bytes:
    data = bytearray(
        _encode(".webp", np.zeros((8, 8, 3), np.uint8), [cv2.IMWRITE_WEBP_QUALITY, 101])
    )
    assert data[12:16] == b"VP8L"
    bits = struct.unpack("<I", data[21:25])[0]
    bits = (bits & ~((1 << 28) - 1)) | (BIG - 1) | ((BIG - 1) << 14)
    data[21:25] = struct.pack("<I", bits)
    return bytes(data)


def _webp_lossy() -> bytes:
    data = bytearray(
        _encode(".webp", np.zeros((8, 8, 3), np.uint8), [cv2.IMWRITE_WEBP_QUALITY, 90])
    )
    assert data[12:16] == b"VP8 "
    data[26:30] = struct.pack("<HH", BIG, BIG)
    return bytes(data)


def _tiff() -> bytes:
    # a classic little-endian TIFF, 8-bit grey, one strip: the sizes are SHORT entries
    entries = [
        (256, 3, 1, BIG),
        (257, 3, 1, BIG),
        (258, 3, 1, 8),
        (259, 3, 1, 1),
        (262, 3, 1, 1),
        (273, 4, 1, 8),
        (277, 3, 1, 1),
        (278, 3, 1, BIG),
        (279, 4, 1, 16),
    ]
    ifd_at = 8 + 16
    ifd = struct.pack("<H", len(entries))
    for tag, kind, count, value in entries:
        packed = struct.pack("<H", value) + b"\0\0" if kind == 3 else struct.pack("<I", value)
        ifd += struct.pack("<HHI", tag, kind, count) + packed
    return b"II*\0" + struct.pack("<I", ifd_at) + bytes(16) + ifd + b"\0\0\0\0"


# a 1x1 GIF written by hand (OpenCV before 4.11 has no GIF encoder)
GIF_1X1 = (
    b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00"
    b"\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"
)


def _gif() -> bytes:
    data = bytearray(GIF_1X1)
    data[6:10] = struct.pack("<HH", BIG, BIG)
    return bytes(data)


def _bmp() -> bytes:
    data = bytearray(_encode(".bmp", np.zeros((8, 8, 3), np.uint8)))
    data[18:26] = struct.pack("<ii", BIG, -BIG)
    return bytes(data)


def _pnm() -> bytes:
    return b"P6\n# a comment\n%d %d\n255\n" % (BIG, BIG) + bytes(12)


def _pam() -> bytes:
    return b"P7\nWIDTH %d\nHEIGHT %d\nDEPTH 3\nMAXVAL 255\nTUPLTYPE RGB\nENDHDR\n" % (BIG, BIG)


def _hdr() -> bytes:
    return b"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y %d +X %d\n" % (BIG, BIG) + bytes(16)


def _sun() -> bytes:
    return b"\x59\xa6\x6a\x95" + struct.pack(">IIIIIII", BIG, BIG, 24, 0, 1, 0, 0)


BOMBS = {
    "png": _png,
    "jpeg after a 64 KB APP segment": _jpeg_after_app_segment,
    "webp lossless": _webp_lossless,
    "webp lossy": _webp_lossy,
    "tiff": _tiff,
    "gif": _gif,
    "bmp": _bmp,
    "ppm": _pnm,
    "pam": _pam,
    "radiance hdr": _hdr,
    "sun raster": _sun,
}


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_bombs_are_refused_from_their_header(kind):
    data = BOMBS[kind]()
    assert len(data) < 70_000
    assert header_size(data) == (BIG, BIG)
    with pytest.raises(SourceError, match=f"is {BIG}x{BIG} pixels, more than the"):
        decode_image(data, "upload")


def test_every_format_opencv_writes_has_its_size_read():
    """The header readers agree with OpenCV's decoder on every format this OpenCV encodes."""
    img = np.zeros((37, 53, 3), np.uint8)
    cases = {
        ".png": img,
        ".jpg": img,
        ".bmp": img,
        ".gif": img,
        ".tiff": img,
        ".ppm": img,
        ".pgm": img[:, :, 0],
        ".pbm": img[:, :, 0],
        ".pam": img,
        ".pfm": img.astype(np.float32),
        ".hdr": img.astype(np.float32),
        ".ras": img,
        ".jp2": img,
        ".avif": img,
    }
    read = []
    for ext, a in cases.items():
        try:
            ok, buf = cv2.imencode(ext, a)
        except cv2.error:
            continue  # this OpenCV build has no encoder for it
        if not ok:
            continue
        data = buf.tobytes()
        assert header_size(data) == (53, 37), ext
        assert decode_image(data, ext).shape == (37, 53, 3), ext
        read.append(ext)
    for q in (90, 101):  # lossy and lossless WebP
        data = _encode(".webp", img, [cv2.IMWRITE_WEBP_QUALITY, q])
        assert header_size(data) == (53, 37)
    assert {".png", ".jpg", ".bmp", ".tiff", ".ppm", ".hdr", ".ras"} <= set(read)


def test_headers_built_to_fool_the_readers():
    """Review findings: a fake frame header after a segment ending in 0xFF (libjpeg skips to the
    next 0xFF), a TIFF with a second, smaller size (libtiff takes the first), 3000 nested JPEG
    2000 boxes (no recursion), an AVIF whose major brand is mif1."""
    big = _encode(".jpg", np.zeros((100, 100, 3), np.uint8))
    fake_sof = b"\xc0\x00\x11\x08\x00\x0a\x00\x0a"
    app = b"\xff\xe9" + struct.pack(">H", 6) + b"abc\xff"
    assert header_size(big[:2] + app + fake_sof + big[2:]) == (100, 100)
    tiff = bytearray(_tiff())
    n = struct.unpack("<H", tiff[24:26])[0]
    entry = struct.pack("<HHI", 256, 3, 1) + struct.pack("<H", 10) + b"\0\0"
    tiff[24:26] = struct.pack("<H", n + 1)
    tiff = bytes(tiff[: 26 + 12 * n]) + entry + bytes(tiff[26 + 12 * n :])
    assert header_size(tiff) == (BIG, BIG)
    nested = b"\xff\x4f\xff\x51"
    for _ in range(3000):
        nested = struct.pack(">I", len(nested) + 8) + b"jp2c" + nested
    jp2 = b"\0\0\0\x0cjP  \r\n\x87\n" + nested
    assert header_size(jp2) is None
    with pytest.raises(SourceError, match="not a readable JPEG 2000"):
        decode_image(jp2, "upload")
    ok, avif = (
        cv2.imencode(".avif", np.zeros((37, 53, 3), np.uint8))
        if hasattr(cv2, "IMWRITE_AVIF_QUALITY")
        else (False, None)
    )
    if ok:
        data = bytearray(avif.tobytes())
        assert data[8:12] == b"avif"
        data[8:12] = b"mif1"  # major brand; avif stays among the compatible brands
        assert header_size(bytes(data)) == (53, 37)


def test_unknown_and_truncated_files_get_a_sentence():
    with pytest.raises(SourceError, match="not an image OpenCV can decode"):
        decode_image(b"hello, world, not an image", "upload")
    truncated = _encode(".png", np.zeros((8, 8, 3), np.uint8))[:20]
    with pytest.raises(SourceError, match="not a readable PNG image"):
        decode_image(truncated, "upload")


def _real_bomb(kind: str) -> bytes:
    black = np.zeros((4000, 4000, 3), np.uint8)
    if kind == "webp":  # 678 bytes
        return _encode(".webp", black, [cv2.IMWRITE_WEBP_QUALITY, 101])
    jpeg = _encode(".jpg", black)  # its frame header after a 64 KB APP segment
    return jpeg[:2] + b"\xff\xe9" + struct.pack(">H", 65533) + bytes(65531) + jpeg[2:]


@pytest.mark.subprocess
@pytest.mark.parametrize("kind", ["webp", "jpeg"])
def test_a_real_bomb_is_refused_without_allocating_it(tmp_path, kind):
    """A real image of 16 megapixels in a fresh process with the limit at 1 megapixel: refusing it
    must not allocate the 48 MB it decodes to."""
    bomb = tmp_path / f"bomb.{kind}"
    bomb.write_bytes(_real_bomb(kind))
    code = textwrap.dedent(
        f"""
        import os
        def peak_kb():  # VmHWM: this image's peak (ru_maxrss keeps the parent's from before exec)
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        os.environ["EDGERT_MAX_IMAGE_PIXELS"] = "1000000"
        import cv2, numpy
        from edgert.runtime.errors import SourceError
        from edgert.runtime.images import read_image
        cv2.imdecode(cv2.imencode(".png", numpy.zeros((8, 8, 3), numpy.uint8))[1], 1)  # warm up
        before = peak_kb()
        try:
            read_image({str(bomb)!r})
        except SourceError as exc:
            print(exc)
        print((peak_kb() - before) // 1024)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    message, grew_mb = proc.stdout.strip().splitlines()
    assert "is 4000x4000 pixels, more than the 1000000" in message
    assert int(grew_mb) < 16, f"refusing the bomb allocated {grew_mb} MB"
