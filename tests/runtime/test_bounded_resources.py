"""Time and memory that do not grow without bound: latency statistics of long runs, the power
meter's history, absurd image shapes (issue: reliability 9-11)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import cv2
import numpy as np
import pytest

from edgert.runtime.errors import SourceError
from edgert.runtime.images import read_image
from edgert.runtime.images.preprocess import Preprocessing
from edgert.runtime.images.resize import nearest_index
from edgert.runtime.latency import LatencyRecorder
from edgert.runtime.power.meter import PowerMeter
from edgert.runtime.power.sensors import PowerSample, PowerSensor
from tests.conftest import ROOT


def test_latency_recorder_is_bounded_and_accurate():
    rng = np.random.default_rng(0)
    values = rng.lognormal(1.0, 0.5, 300_000)
    rec = LatencyRecorder(reservoir=20_000, window=1_000)
    for v in values:
        rec.add(float(v))
    assert rec.memory_values <= 21_000 and rec.count == len(values)
    whole = rec.summary()
    assert whole["min"] == values.min() and whole["max"] == values.max()
    assert whole["mean"] == pytest.approx(values.mean(), rel=1e-9)
    for q in (50, 90, 99):
        exact = np.percentile(values, q)
        assert whole[f"p{q}"] == pytest.approx(exact, rel=0.03)
    recent = rec.summary(recent=True)
    assert recent["count"] == 1_000
    assert recent["max"] == values[-1_000:].max()
    t0 = time.perf_counter()
    for _ in range(20):
        rec.summary(recent=True)
    assert time.perf_counter() - t0 < 1.0  # cheap, whatever the run's length


class _Steady(PowerSensor):
    source = "steady"

    def __init__(self):
        self.t = 0.0

    def read(self):
        self.t += 0.01
        return PowerSample(self.t, 5.0 + np.sin(self.t))


def test_power_meter_history_is_bounded_and_energy_stays_exact():
    sensor = _Steady()
    meter = PowerMeter(sensor, capacity=256)
    samples = [sensor.read() for _ in range(5000)]
    for s in samples:
        meter._append(s)
    assert len(meter.samples) <= 256
    t = np.array([s.t for s in samples])
    p = np.array([s.total_w for s in samples])
    exact = float(np.sum((p[1:] + p[:-1]) * np.diff(t)) / 2)
    assert meter.energy_j(t[0], t[-1], counter=False) == pytest.approx(exact, rel=1e-9)


def test_a_meter_keeps_the_old_exact_trapezoid_while_short():
    sensor = _Steady()
    meter = PowerMeter(sensor)
    for _ in range(50):
        meter._append(sensor.read())
    t = np.array([s.t for s in meter.samples])
    p = np.array([s.total_w for s in meter.samples])
    a, b = t[3] + 0.004, t[40] - 0.003
    grid = np.concatenate([[a], t[(t > a) & (t < b)], [b]])
    vals = np.interp(grid, t, p)
    expected = float(np.sum((vals[1:] + vals[:-1]) * np.diff(grid)) / 2)
    assert meter.energy_j(a, b, counter=False) == pytest.approx(expected, rel=1e-12)


@pytest.mark.subprocess
def test_extreme_aspect_ratio_image_stays_within_memory(tmp_path):
    """A 1x40000 PNG (25 KB) took 7.9 GB: the crop is now taken before scaling. The child
    process runs under a 1.5 GB address-space limit."""
    img = (np.arange(40000) % 251).astype(np.uint8)[None, :, None].repeat(3, axis=2)
    path = tmp_path / "strip.png"
    cv2.imwrite(str(path), img)
    code = textwrap.dedent(
        f"""
        import resource, sys
        sys.path.insert(0, {str(ROOT)!r})
        import numpy as np
        from edgert.runtime.images import read_image
        from edgert.runtime.images.preprocess import Preprocessing
        from edgert.runtime.images.resize import nearest_index
        img = read_image({str(path)!r})
        resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))
        for interp in ("linear", "bilinear", "nearest", "cubic"):
            x, t = Preprocessing(size=(224, 224), resize="resize_crop", resize_short=256,
                                 interpolation=interp).apply(img)
            assert x.shape == (3, 224, 224) and np.isfinite(x).all()
        print("ok")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@pytest.mark.parametrize("interp", ["nearest", "bilinear"])
def test_window_sampling_matches_full_scaling(interp):
    """The bounded path samples the same geometry as scaling the whole image then cropping."""
    rng = np.random.default_rng(1)
    img = rng.integers(0, 255, (3, 700, 3), dtype=np.uint8)
    pre = Preprocessing(size=(32, 32), resize="resize_crop", interpolation=interp)
    bounded, _ = pre.apply(img)  # 3x700 -> 32x7467 before the crop: the bounded path
    t = pre.geometry(img.shape[:2])
    nw, nh = t.resized_wh
    if interp == "nearest":
        full = img[nearest_index(np.arange(nh), 3, nh)][:, nearest_index(np.arange(nw), 700, nw)]
    else:
        full = cv2.resize(img.astype(np.float32), (nw, nh), interpolation=cv2.INTER_LINEAR)
    top, left = int(-t.oy), int(-t.ox)
    crop = full[top : top + 32, left : left + 32][:, :, ::-1].astype(np.float32) / 255
    # remap places samples at 1/32 pixel: on noise (neighbours 255 apart) up to ~4/255 off
    tol = 0 if interp == "nearest" else 5.0 / 255
    np.testing.assert_allclose(bounded.transpose(1, 2, 0), crop, atol=tol + 1e-6)


def test_absurd_image_sizes_are_refused_before_decoding(tmp_path):
    # a PNG whose header claims 100000 x 100000 pixels (30 GB decoded)
    small = cv2.imencode(".png", np.zeros((2, 2, 3), np.uint8))[1].tobytes()
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    bomb = small[:8] + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))
    bomb += small[33:]
    (tmp_path / "bomb.png").write_bytes(bomb)
    with pytest.raises(SourceError, match="more than the"):
        read_image(tmp_path / "bomb.png")


def test_header_sizes_agree_with_decoding():
    from edgert.runtime.images import header_size
    from edgert.runtime.sample_data import ALL_PHOTOS, photo_path

    for name in ALL_PHOTOS:
        h, w = cv2.imread(str(photo_path(name))).shape[:2]
        assert header_size(photo_path(name).read_bytes()) == (w, h)
    img = np.zeros((37, 53, 3), np.uint8)
    for ext in (".png", ".jpg", ".bmp"):
        data = cv2.imencode(ext, img)[1].tobytes()
        assert header_size(data) == (53, 37), ext
    jpeg = cv2.imencode(".jpg", img)[1].tobytes()
    assert header_size(jpeg[:2] + b"\xff\xff" + jpeg[2:]) == (53, 37)  # fill bytes
    assert header_size(b"not an image") is None
