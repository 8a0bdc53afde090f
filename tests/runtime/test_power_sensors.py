"""Power sensors on sysfs trees recreated on disk (real file names and units), RAPL wraparound,
and the meter integrating a file-backed sensor whose values change on a known schedule."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from edgert.runtime.errors import SensorError
from edgert.runtime.power import nvpmodel
from edgert.runtime.power.discovery import discover
from edgert.runtime.power.meter import PowerMeter
from edgert.runtime.power.sensors import counter_delta, rapl
from tests.conftest import run_cli, unprivileged


def write(path: Path, value) -> None:
    """Replace a sysfs file's value atomically, as the kernel does (a reader never sees it empty)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(f"{value}\n")
    os.replace(tmp, path)


def ina3221_hwmon(root: Path, addr: str, hwmon: int, channels: list[tuple[str, int, int]]) -> Path:
    """JetPack 5/6: .../ina3221/<bus-addr>/hwmon/hwmonN/in{n}_label, in{n}_input (mV), curr{n}_input (mA)."""
    hw = root / f"sys/bus/i2c/drivers/ina3221/{addr}/hwmon/hwmon{hwmon}"
    for n, (label, mv, ma) in enumerate(channels, start=1):
        write(hw / f"in{n}_label", label)
        write(hw / f"in{n}_input", mv)
        write(hw / f"curr{n}_input", ma)
    write(hw / "in7_label", "sum of shunt voltages")
    write(hw / "in7_input", 40)
    return hw


def ina238_hwmon(
    root: Path,
    addr: str,
    hwmon: int,
    microwatts: int,
    millivolts: int = 19_000,
    label: str | None = None,
) -> Path:
    """The kernel's ina238 hwmon driver (Documentation/hwmon/ina238.rst): ``name``, in0_input
    (shunt mV), in1_input (bus mV), curr1_input (mA), power1_input (uW), temp1_input (m°C), and no
    label files. ``label``: the hwmon core's device-wide ``label`` attribute, which it writes only
    when the firmware gives the chip a label property (Documentation/hwmon/sysfs-interface.rst)."""
    hw = root / f"sys/bus/i2c/drivers/ina238/{addr}/hwmon/hwmon{hwmon}"
    ma = round(microwatts / millivolts)
    for name, value in (
        ("name", "ina238"),
        ("in0_input", round(ma * 0.002)),
        ("in1_input", millivolts),
        ("curr1_input", ma),
        ("power1_input", microwatts),
        ("temp1_input", 41_250),
    ):
        write(hw / name, value)
    if label is not None:
        write(hw / "label", label)
    return hw


def test_orin_nx_jetpack6_uses_vdd_in(tmp_path):
    ina3221_hwmon(
        tmp_path,
        "1-0040",
        3,
        [("VDD_IN", 5000, 1600), ("VDD_CPU_GPU_CV", 5000, 500), ("VDD_SOC", 5000, 300)],
    )
    d = discover(tmp_path, nvml=False)
    s = d.sensor.read()
    assert s.rails == pytest.approx({"VDD_IN": 8.0, "VDD_CPU_GPU_CV": 2.5, "VDD_SOC": 1.5})
    assert s.total_w == pytest.approx(8.0)  # the input rail, not the sum (that would count twice)
    assert "input rail VDD_IN" in d.sensor.describe()


def test_agx_orin_sums_rails_and_skips_nc(tmp_path):
    ina3221_hwmon(
        tmp_path,
        "1-0040",
        1,
        [("VDD_GPU_SOC", 5000, 2000), ("VDD_CPU_CV", 5000, 1000), ("VIN_SYS_5V0", 5000, 600)],
    )
    ina3221_hwmon(
        tmp_path, "1-0041", 2, [("NC", 0, 0), ("VDDQ_VDD2_1V8AO", 5000, 200), ("NC", 0, 0)]
    )
    s = discover(tmp_path, nvml=False).sensor.read()
    assert set(s.rails) == {"VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"}
    assert s.total_w == pytest.approx(10.0 + 5.0 + 3.0 + 1.0)


def test_nano_jetpack4_iio_milliwatts(tmp_path):
    dev = tmp_path / "sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0"
    for n, (name, mw) in enumerate(
        [("POM_5V_IN", 4200), ("POM_5V_GPU", 900), ("POM_5V_CPU", 1100)]
    ):
        write(dev / f"rail_name_{n}", name)
        write(dev / f"in_power{n}_input", mw)
    d = discover(tmp_path, nvml=False)
    assert d.sensor.source == "INA3221 (iio)"
    s = d.sensor.read()
    assert s.total_w == pytest.approx(4.2) and s.rails["POM_5V_GPU"] == pytest.approx(0.9)


def test_labelled_ina238_microwatts(tmp_path):
    for addr, label, uw in (("2-0040", "VDD_IN", 41_500_000), ("2-0041", "VDD_GPU", 17_250_000)):
        ina238_hwmon(tmp_path, addr, int(addr[-1]), uw, label=label)
    s = discover(tmp_path, nvml=False).sensor.read()
    assert s.rails == pytest.approx({"VDD_IN": 41.5, "VDD_GPU": 17.25})
    assert s.total_w == pytest.approx(41.5)


@pytest.mark.subprocess
def test_permission_denied_rail_says_what_to_do(tmp_path):
    hw = ina3221_hwmon(tmp_path, "1-0040", 1, [("VDD_IN", 5000, 1000)])
    os.chmod(hw / "curr1_input", 0)
    prefix = unprivileged()
    proc = run_cli("power", "--json", "--sysfs-root", tmp_path, "--no-nvml", prefix=prefix)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["total_w"] is None
    assert (
        "permission denied on" in facts["reason"]
        and "curr1_input" in facts["reason"]
        and "udev" in facts["reason"]
    )


def test_nothing_found_says_so(tmp_path):
    d = discover(tmp_path, nvml=False)
    assert d.sensor is None and "no power sensor found" in d.reason


def test_rapl_wraparound(tmp_path):
    assert counter_delta(100, 250, 1000) == 150
    assert counter_delta(900, 50, 1000) == 150  # wrapped past max_energy_range_uj
    pkg = tmp_path / "sys/class/powercap/intel-rapl:0"
    write(pkg / "name", "package-0")
    write(pkg / "max_energy_range_uj", 1_000_000)
    write(pkg / "energy_uj", 990_000)
    write(tmp_path / "sys/class/powercap/intel-rapl:0:0/energy_uj", 5)  # a subdomain: not counted
    sensor = rapl(tmp_path)
    first = sensor.read()
    write(pkg / "energy_uj", 10_000)  # 20 mJ later, across the wrap
    second = sensor.read()
    assert second.energy_j - first.energy_j == pytest.approx(0.02)


def test_meter_integrates_a_known_schedule(tmp_path):
    """The VDD_IN file steps 5 W -> 10 W -> 5 W (0.6 s each); the meter's energy must match."""
    hw = ina3221_hwmon(tmp_path, "1-0040", 1, [("VDD_IN", 5000, 1000)])
    sensor = discover(tmp_path, nvml=False).sensor
    schedule = [(0.0, 1000), (0.6, 2000), (1.2, 1000)]  # mA at 5 V: 5 W, 10 W, 5 W

    def writer(t0):
        for at, ma in schedule:
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            write(hw / "curr1_input", ma)

    with PowerMeter(sensor, hz=100) as meter:
        t0 = time.monotonic()
        th = threading.Thread(target=writer, args=(t0,))
        th.start()
        th.join()
        time.sleep(0.7)
        t1 = t0 + 1.8
    energy = meter.energy_j(t0, t1)
    assert energy == pytest.approx(5 * 0.6 + 10 * 0.6 + 5 * 0.6, rel=0.05)
    assert meter.average_w(t0 + 0.7, t0 + 1.1) == pytest.approx(10.0, rel=0.05)


def test_meter_survives_a_vanishing_sensor(tmp_path):
    hw = ina3221_hwmon(tmp_path, "1-0040", 1, [("VDD_IN", 5000, 1000)])
    sensor = discover(tmp_path, nvml=False).sensor
    with PowerMeter(sensor, hz=100) as meter:
        time.sleep(0.1)
        (hw / "curr1_input").unlink()
        time.sleep(0.1)
    assert meter.lost and "vanished" in meter.lost
    assert len(meter.samples) >= 3


def test_nvpmodel_modes_by_name(tmp_path):
    write(
        tmp_path / "etc/nvpmodel.conf",
        "< POWER_MODEL ID=0 NAME=MAXN >\nCPU_ONLINE CORE_0 1\n< POWER_MODEL ID=1 NAME=15W >\n< POWER_MODEL ID=2 NAME=7W >\n",
    )
    write(tmp_path / "var/lib/nvpmodel/status", "pmode:0002 fmode:quiet")
    cpu = tmp_path / "sys/devices/system/cpu/cpu0/cpufreq"
    write(cpu / "scaling_min_freq", 1510400)
    write(cpu / "scaling_max_freq", 1510400)
    modes = nvpmodel.read(tmp_path)
    assert modes.modes == {0: "MAXN", 1: "15W", 2: "7W"}
    assert modes.current_name == "7W" and modes.jetson_clocks == "on"
    assert modes.id_of("15w") == 1
    with pytest.raises(SensorError, match="no power mode named"):
        modes.id_of("30W")
    assert nvpmodel.read(tmp_path / "elsewhere") is None
