"""A power sensor fault degrades to "power unavailable (why)" and never stops inference; junk
values never reach the governor (issue: reliability 14). Sysfs trees recreated on disk."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from edgert.runtime.engine import Engine
from edgert.runtime.errors import SensorError
from edgert.runtime.power.discovery import discover
from edgert.runtime.power.governor import CappedRunner, PowerGovernor
from edgert.runtime.power.meter import PowerMeter
from edgert.runtime.power.sensors import PowerSample, PowerSensor
from tests.conftest import assert_user_error, run_cli
from tests.runtime.test_power_sensors import ina3221_hwmon, write
from tests.tiny import matmul_model


@pytest.mark.subprocess
def test_non_utf8_bytes_in_a_sysfs_file_are_a_reason_not_a_crash(tmp_path):
    hw = ina3221_hwmon(tmp_path, "1-0040", 1, [("VDD_IN", 5000, 1000)])
    (hw / "in1_input").write_bytes(b"\xff\xfe\x80garbage")
    d = discover(tmp_path, nvml=False)
    assert d.sensor is None and "does not hold a number" in d.reason
    (hw / "in1_label").write_bytes(b"\xff\xfe")  # an undecodable label: the channel is skipped
    assert discover(tmp_path, nvml=False).sensor is None
    proc = run_cli("power", "--sysfs-root", tmp_path)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr
    assert "internal error" not in proc.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_readings_are_refused(tmp_path, value):
    hw = ina3221_hwmon(tmp_path, "1-0040", 1, [("VDD_IN", 5000, 1000)])
    write(hw / "curr1_input", value)
    d = discover(tmp_path, nvml=False)
    assert d.sensor is None and "finite" in d.reason


@pytest.mark.subprocess
def test_junk_rapl_range_means_power_unavailable(tmp_path):
    rapl = tmp_path / "sys/class/powercap/intel-rapl:0"
    write(rapl / "energy_uj", 1000)
    write(rapl / "name", "package-0")
    write(rapl / "max_energy_range_uj", "junk")
    d = discover(tmp_path, nvml=False)
    assert d.sensor is None and "does not hold a number" in d.reason
    proc = run_cli("power", "--sysfs-root", tmp_path, "--no-nvml")
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


class _Flaky(PowerSensor):
    source = "flaky"

    def __init__(self, fail_after: int, exc: Exception):
        self.n, self.fail_after, self.exc = 0, fail_after, exc

    def read(self):
        self.n += 1
        if self.n > self.fail_after:
            raise self.exc
        return PowerSample(time.monotonic(), 5.0)


@pytest.mark.parametrize(
    "exc",
    [UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"), ValueError("junk"), OSError(5, "EIO")],
)
def test_unexpected_sensor_errors_stop_the_meter_quietly(exc, capfd):
    meter = PowerMeter(_Flaky(3, exc), hz=200).start()
    time.sleep(0.2)
    meter.stop()
    assert meter.lost and type(exc).__name__ in meter.lost
    assert "Traceback" not in capfd.readouterr().err
    assert meter.average_w(meter.samples[0].t, meter.samples[-1].t) == pytest.approx(5.0)


def test_inference_goes_on_when_the_sensor_dies_under_a_cap(tmp_path):
    class Dying(_Flaky):
        def read(self):
            self.n += 1
            if self.n > 20:
                raise SensorError("/sys/.../in1_input vanished (sensor removed or driver unloaded)")
            return PowerSample(time.monotonic(), 3.0 + (0.5 if threading.active_count() else 0))

    meter = PowerMeter(Dying(0, None), hz=100).start()
    idle = meter.measure_idle(0.1)
    with Engine.load(matmul_model(tmp_path / "m.onnx")) as engine:
        runner = CappedRunner(engine, meter, 10.0, idle, period_s=0.02)
        x = np.ones((1, 4), np.float32)
        t_end = time.monotonic() + 0.6
        n = 0
        while time.monotonic() < t_end:
            runner.infer(x)
            n += 1
    meter.stop()
    assert meter.lost and "vanished" in meter.lost and n > 10


def test_no_idle_samples_and_bad_caps_are_sentences():
    with pytest.raises(SensorError, match="idle power could not be measured"):
        PowerGovernor(10.0, None)
    for cap in (math.nan, math.inf, -3.0, 0.0):
        with pytest.raises(SensorError, match="positive number of watts"):
            PowerGovernor(cap, 2.0)
    with pytest.raises(SensorError, match="idle"):
        PowerGovernor(10.0, math.nan)


@pytest.mark.subprocess
def test_bench_power_cap_nan_and_negative_idle_are_refused(tmp_path):
    model = matmul_model(tmp_path / "m.onnx")
    hw_root = tmp_path / "sys-root"
    ina3221_hwmon(hw_root, "1-0040", 1, [("VDD_IN", 5000, 1000)])
    for args, fragment in (
        (("--power-cap", "nan"), "--power-cap"),
        (("--power-cap", "-2"), "--power-cap"),
        (("--idle-seconds", "-1"), "--idle-seconds"),
    ):
        proc = run_cli("bench", model, "--iterations", "3", "--sysfs-root", hw_root, *args)
        assert_user_error(proc, fragment)
