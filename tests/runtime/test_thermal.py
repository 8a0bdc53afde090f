"""Temperatures, trip points and clocks on recreated Jetson sysfs trees (issue 26).

Sources for each layout (zone names and order, trips, devfreq nodes, EMC files):
- Nano (Tegra210, JetPack 4): zone types AO-therm, CPU-therm, GPU-therm, PLL-therm, PMIC-Die,
  thermal-fan-est (`cat /sys/class/thermal/thermal_zone*/type` in
  github.com/MartinMatta/Jetson-Nano-temperature/issues/2); trips from the T210 downstream device
  tree (CPU-therm passive 97000, GPU-therm passive 97500, PLL-therm passive 70000); GPU devfreq
  /sys/devices/57000000.gpu/devfreq/57000000.gpu (NVIDIA's r32 jetson_clocks); EMC in debugfs
  /sys/kernel/debug/clk/override.emc/clk_rate, limit /sys/kernel/debug/tegra_bwmgr/emc_max_rate.
- Xavier NX (Tegra194, JetPack 5): CPU-therm, GPU-therm, AUX-therm, AO-therm, PMIC-Die,
  Tboard_tegra, Tdiode_tegra, thermal-fan-est (a Xavier zone list; zone 4 PMIC reads 100 °C:
  balena-os/balena-jetson/issues/142); no trip points found in any source: none here; GPU devfreq
  17000000.gv11b (jtop's gpu.py); EMC /sys/kernel/debug/bpmp/debug/clk/emc/{rate,max_rate}
  (NVIDIA's jetson_clocks); tegra194-cpufreq: two CPUs per cluster.
- Orin NX (Tegra234, JetPack 6): cpu-thermal, gpu-thermal, cv0..cv2-thermal, soc0..soc2-thermal,
  tj-thermal in TEGRA234_BPMP_THERMAL_ZONE_* order (linux include/dt-bindings/thermal/
  tegra234-bpmp-thermal.h, tegra234.dtsi); critical 104500 on every zone
  (nv-soc/tegra234-soc-thermal-shutdown.dtsi), cpu-thermal passive 95000 / hot 99000
  (tegra234-p3767.dtsi); the cv zones' temp cannot be read on Orin Nano/NX; GPU
  /sys/class/devfreq/17000000.gpu with of_node name "gpu" (jtop issue 556, L4T 36.3).
- AGX Orin (Tegra234, JetPack 5): CPU-therm, GPU-therm, CV0..CV2-therm, SOC0..SOC2-therm,
  tj-therm, Tboard_tegra, Tdiode_tegra (jtop logs, jetson_stats issues 608, 381); GPU
  17000000.ga10b under /sys/devices/platform (issue 608); three clusters of four CPUs.
- Thor (Tegra264, JetPack 7): GPU devfreq /sys/class/devfreq/gpu-gpc-0 (and gpu-nvd-0) without a
  device-tree node name (jetson_stats issue 885, jtop's thor_gpu.py); EMC
  /sys/class/devfreq/bwmgr (jetson_stats PR 825); zones cpu-thermal and gpu-thermal (IGX Thor); no
  trip points found: none here.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from edgert.runtime.power.conditions import read_conditions, suggested_temp_cap
from edgert.runtime.power.thermal import thermal_zones
from tests.conftest import run_cli, unprivileged
from tests.runtime.test_power_sensors import write


def zones(root: Path, spec: list) -> None:
    """spec: (type, millidegrees or None for a temp that cannot be read, [(trip type, m°C)])."""
    for n, (kind, temp, trips) in enumerate(spec):
        z = root / f"sys/class/thermal/thermal_zone{n}"
        write(z / "type", kind)
        if temp is not None:
            write(z / "temp", temp)
        else:
            z.mkdir(parents=True, exist_ok=True)
        for k, (trip, value) in enumerate(trips):
            write(z / f"trip_point_{k}_type", trip)
            write(z / f"trip_point_{k}_temp", value)


def devfreq(node: Path, cur: int, lo: int, hi: int, of_name: str | None = None) -> None:
    for name, value in (
        ("cur_freq", cur),
        ("min_freq", lo),
        ("max_freq", hi),
        ("governor", "nvhost_podgov"),
    ):
        write(node / name, value)
    if of_name is not None:
        write(node / "device/of_node/name", of_name)


def cpufreq(root: Path, policies: dict[int, tuple[int, int, int]]) -> None:
    for n, (cur, lo, hi) in policies.items():
        p = root / f"sys/devices/system/cpu/cpufreq/policy{n}"
        for name, value in (
            ("scaling_cur_freq", cur),
            ("scaling_min_freq", lo),
            ("scaling_max_freq", hi),
            ("cpuinfo_max_freq", hi),
        ):
            write(p / name, value)


def nano(root: Path) -> None:
    zones(
        root,
        [
            ("AO-therm", 39500, []),
            (
                "CPU-therm",
                41000,
                [
                    ("active", 66000),
                    ("active", 86000),
                    ("critical", 102000),
                    ("hot", 100500),
                    ("passive", 97000),
                ],
            ),
            ("GPU-therm", 38500, [("critical", 102500), ("hot", 101000), ("passive", 97500)]),
            ("PLL-therm", 39000, [("passive", 70000)]),
            ("PMIC-Die", 100000, [("active", 120000)]),
            ("thermal-fan-est", 40200, []),
        ],
    )
    devfreq(root / "sys/devices/57000000.gpu/devfreq/57000000.gpu", 76800000, 76800000, 921600000)
    cpufreq(root, {0: (1428000, 102000, 1428000)})
    write(root / "sys/kernel/debug/clk/override.emc/clk_rate", 1600000000)
    write(root / "sys/kernel/debug/tegra_bwmgr/emc_max_rate", 1600000000)


def xavier_nx(root: Path) -> None:
    zones(
        root,
        [
            ("CPU-therm", 45500, []),
            ("GPU-therm", 44000, []),
            ("AUX-therm", 44500, []),
            ("AO-therm", 43000, []),
            ("PMIC-Die", 100000, []),
            ("Tboard_tegra", 40000, []),
            ("Tdiode_tegra", 42250, []),
            ("thermal-fan-est", 44600, []),
        ],
    )
    devfreq(root / "sys/class/devfreq/17000000.gv11b", 114750000, 114750000, 1109250000, "gv11b")
    cpufreq(
        root,
        {
            0: (1190400, 1190400, 1907200),
            2: (1190400, 1190400, 1907200),
            4: (1190400, 1190400, 1907200),
        },
    )
    write(root / "sys/kernel/debug/bpmp/debug/clk/emc/rate", 1600000000)
    write(root / "sys/kernel/debug/bpmp/debug/clk/emc/max_rate", 1866000000)


def orin_nx_jp6(root: Path, gpu_hz: int = 918000000, pinned: bool = False) -> None:
    crit = ("critical", 104500)
    zones(
        root,
        [
            (
                "cpu-thermal",
                52000,
                [
                    ("active", 50000),
                    ("active", 65000),
                    ("active", 80000),
                    ("passive", 95000),
                    ("hot", 99000),
                    crit,
                ],
            ),
            ("gpu-thermal", 50500, [crit]),
            ("cv0-thermal", None, [crit]),
            ("cv1-thermal", None, [crit]),
            ("cv2-thermal", None, [crit]),
            ("soc0-thermal", 49000, [crit]),
            ("soc1-thermal", 48500, [crit]),
            ("soc2-thermal", 49500, [crit]),
            ("tj-thermal", 52000, [crit]),
        ],
    )
    lo = 918000000 if pinned else 306000000
    devfreq(root / "sys/class/devfreq/17000000.gpu", gpu_hz, lo, 918000000, "gpu")
    cpu_lo = 1984000 if pinned else 729600
    cpufreq(root, {0: (1984000, cpu_lo, 1984000), 4: (1984000, cpu_lo, 1984000)})


def agx_orin_jp5(root: Path) -> None:
    names = [
        "CPU-therm",
        "GPU-therm",
        "CV0-therm",
        "CV1-therm",
        "CV2-therm",
        "SOC0-therm",
        "SOC1-therm",
        "SOC2-therm",
        "tj-therm",
        "Tboard_tegra",
        "Tdiode_tegra",
    ]
    zones(root, [(n, 47000 + 250 * i, []) for i, n in enumerate(names)])
    devfreq(
        root / "sys/devices/platform/17000000.ga10b/devfreq/17000000.ga10b",
        1300500000,
        306000000,
        1300500000,
    )
    cpufreq(root, {k: (2201600, 115200, 2201600) for k in (0, 4, 8)})


def thor(root: Path) -> None:
    zones(root, [("cpu-thermal", 55000, []), ("gpu-thermal", 53000, [])])
    devfreq(root / "sys/class/devfreq/gpu-gpc-0", 1575000000, 1575000000, 1575000000)
    devfreq(root / "sys/class/devfreq/gpu-nvd-0", 1692000000, 1692000000, 1692000000)
    for name, value in (
        ("cur_freq", 4266000000),
        ("min_freq", 4266000000),
        ("max_freq", 4266000000),
    ):
        write(root / f"sys/class/devfreq/bwmgr/{name}", value)


BOARDS = {
    "nano": nano,
    "xavier_nx": xavier_nx,
    "orin_nx_jp6": orin_nx_jp6,
    "agx_orin_jp5": agx_orin_jp5,
    "thor": thor,
}


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_every_board_gives_zones_and_the_gpu_clock(tmp_path, board):
    BOARDS[board](tmp_path)
    cond = read_conditions(tmp_path)
    assert cond.zones and all(z.name for z in cond.zones)
    gpu = next(c for c in cond.clocks if c.name == "gpu")
    assert gpu.cur_hz and gpu.max_hz and gpu.cur_hz <= gpu.max_hz
    from edgert.runtime.power.thermal import NOT_THE_DIE

    die = [z.temp_c for z in cond.zones if z.temp_c is not None and z.name not in NOT_THE_DIE]
    hottest = cond.hottest
    assert hottest is not None and hottest.temp_c == max(die)
    assert hottest.name != "PMIC-Die"  # it reads a fixed 100 °C on Nano and Xavier


def test_a_temp_cap_on_a_nano_reads_the_die_not_the_pmic(tmp_path):
    from edgert.runtime.power.thermal import HottestZone

    nano(tmp_path)
    zone = HottestZone(tmp_path)
    assert zone.read() == 41.0 and "PMIC-Die" not in zone.names


def test_nano_trips_suggest_a_cap_below_the_lowest_passive_trip(tmp_path):
    nano(tmp_path)
    cond = read_conditions(tmp_path)
    cpu = next(z for z in cond.zones if z.name == "CPU-therm")
    assert cpu.temp_c == 41.0 and cpu.passive_c == 97.0
    assert cond.lowest_passive_c == 70.0  # PLL-therm
    assert suggested_temp_cap(cond) == 65.0
    emc = next(c for c in cond.clocks if c.name == "emc")
    assert emc.cur_hz == 1600000000


def test_orin_unreadable_zones_have_a_reason_and_jetson_clocks_is_seen(tmp_path):
    orin_nx_jp6(tmp_path)
    cond = read_conditions(tmp_path)
    cv0 = next(z for z in cond.zones if z.name == "cv0-thermal")
    assert cv0.temp_c is None and "reports no temperature" in cv0.reason
    assert [z.name for z in cond.zones][-1] == "tj-thermal"
    assert cond.jetson_clocks is False
    pinned = tmp_path / "pinned"
    orin_nx_jp6(pinned, pinned=True)
    assert read_conditions(pinned).jetson_clocks is True


def test_thor_gpu_is_its_gpc_devfreq_node(tmp_path):
    thor(tmp_path)
    clocks = {c.name: c for c in read_conditions(tmp_path).clocks}
    assert clocks["gpu"].cur_hz == 1575000000 and clocks["emc"].max_hz == 4266000000


@pytest.mark.subprocess
def test_junk_and_permission_errors_are_reasons_not_failures(tmp_path):
    orin_nx_jp6(tmp_path)
    write(tmp_path / "sys/class/thermal/thermal_zone1/temp", "garbage")
    write(tmp_path / "sys/class/thermal/thermal_zone5/temp", -256000)  # a sensor that is off
    zs = {z.name: z for z in thermal_zones(tmp_path)}
    assert zs["gpu-thermal"].temp_c is None and "does not hold a number" in zs["gpu-thermal"].reason
    assert zs["soc0-thermal"].temp_c is None and "not a temperature" in zs["soc0-thermal"].reason
    assert zs["cpu-thermal"].temp_c == 52.0
    os.chmod(tmp_path / "sys/class/thermal/thermal_zone0/temp", 0)
    prefix = unprivileged()
    proc = run_cli("power", "--json", "--no-nvml", "--sysfs-root", tmp_path, prefix=prefix)
    assert proc.returncode == 0, proc.stderr
    cpu = json.loads(proc.stdout)["thermal"][0]
    assert cpu["temp_c"] is None and "permission denied" in cpu["reason"]
    shutil.rmtree(tmp_path / "sys/class/devfreq")
    assert [c.name for c in read_conditions(tmp_path).clocks] == ["cpu (policy0)", "cpu (policy4)"]


@pytest.mark.subprocess
@pytest.mark.parametrize("board", ["orin_nx_jp6", "nano"])
def test_power_json_shows_heat_clocks_and_the_suggested_cap(tmp_path, board):
    BOARDS[board](tmp_path)
    proc = run_cli("power", "--json", "--no-nvml", "--sysfs-root", tmp_path)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["thermal"] and facts["clocks"]
    assert facts["suggested_temp_cap_c"] == {"orin_nx_jp6": 90.0, "nano": 65.0}[board]
    text = run_cli("power", "--no-nvml", "--sysfs-root", tmp_path).stdout
    assert "suggested --temp-cap" in text and "clock gpu" in text


@pytest.mark.subprocess
def test_a_bench_whose_gpu_clock_drops_reports_the_throttling_and_when(tmp_path):
    """The tree's GPU clock is rewritten mid-run (918 -> 510 MHz from about 1.5 s to 3 s): the
    report's conditions say throttled, by the GPU, in that interval; the text says so too."""
    import subprocess
    import sys
    import time

    from tests.tiny import classifier_bundle

    bundle = classifier_bundle(tmp_path / "b")
    tree = tmp_path / "tree"
    orin_nx_jp6(tree)
    cur = tree / "sys/class/devfreq/17000000.gpu/cur_freq"
    out = tmp_path / "bench.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "bench",
            str(bundle),
            "--duration",
            "4.5",
            "--warmup",
            "0",
            "--idle-seconds",
            "0",
            "--sysfs-root",
            str(tree),
            "--json-file",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(2.0)  # the tiny model loads in well under a second: the run is under way
    write(cur, 510000000)
    time.sleep(1.5)
    write(cur, 918000000)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    cond = json.loads(out.read_text())["conditions"]
    assert cond["throttled"] is True
    (span,) = cond["throttling"]
    assert span["clocks"] == ["gpu"] and 0.0 < span["to_s"] - span["from_s"] < 3.0
    assert cond["clocks"]["gpu"]["min_mhz"] == 510.0 and cond["clocks"]["gpu"]["limit_mhz"] == 918.0
    assert "THROTTLED" in stdout and "gpu below its maximum" in stdout
    assert cond["start"]["zones"][0]["name"] == "cpu-thermal" and "cpu-thermal" in cond["zones"]


def test_sweeps_are_warned_when_points_ran_at_other_clocks_or_modes(tmp_path):
    from edgert.apps.bench import conditions_mismatch
    from edgert.runtime.power.conditions import ConditionsMonitor

    free, pinned = tmp_path / "a", tmp_path / "b"
    orin_nx_jp6(free)
    orin_nx_jp6(pinned, pinned=True)
    write(free / "sys/class/devfreq/17000000.gpu/max_freq", 624750000)
    points = []
    for label, root in (("fp32", free), ("int8", pinned)):
        m = ConditionsMonitor(root, interval=0.05).start()
        points.append({"label": label, "conditions": m.stop()})
    text = conditions_mismatch(points)
    assert "jetson_clocks: fp32 False, int8 True" in text and "gpu clock limit" in text
    assert conditions_mismatch([points[1], points[1]]) is None
