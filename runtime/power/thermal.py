"""Heat and clocks from sysfs (device side, read like the power sensors: under ``--sysfs-root`` /
``EDGERT_SYSFS_ROOT``): every thermal zone with its trip points, the GPU clock (the devfreq node of
the board's GPU), the CPU clocks per cpufreq policy, the EMC clock where debugfs is readable, and
whether ``jetson_clocks`` pinned the clocks (minimum == maximum). On a discrete GPU, NVML's
temperature, SM clock and throttle reasons (the device matched by PCI bus id, as the power sensor).

A file that is missing, unreadable or holds junk makes that one reading absent with its reason;
nothing here raises for a board that lacks something.
"""

from __future__ import annotations

import glob
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import SensorError
from .sensors import read_number, sysfs_root

log = logging.getLogger(__name__)

# GPU devfreq nodes by board (the node's folder name; also matched by its device-tree node name,
# as jtop's gpu.py does: gv11b, gp10b, ga10b, gpu)
GPU_DEVFREQ = (
    "57000000.gpu",  # Nano, TX1 (Tegra210)
    "17000000.gp10b",  # TX2 (Tegra186)
    "17000000.gv11b",  # Xavier (Tegra194)
    "17000000.ga10b",  # Orin (Tegra234), JetPack 5
    "17000000.gpu",  # Orin (Tegra234), JetPack 6 and 7
    "gpu-gpc-0",  # Thor (Tegra264), JetPack 7: no device-tree node name
)
GPU_OF_NAMES = ("gpu", "gv11b", "gp10b", "ga10b")
# older kernels have the devfreq node only under the device
GPU_DEVICE_DIRS = ("sys/devices", "sys/devices/platform", "sys/devices/platform/bus@0")
EMC_RATE = (  # (current rate, maximum) in Hz
    ("sys/class/devfreq/bwmgr/cur_freq", "sys/class/devfreq/bwmgr/max_freq"),  # Thor
    ("sys/kernel/debug/bpmp/debug/clk/emc/rate", "sys/kernel/debug/bpmp/debug/clk/emc/max_rate"),
    # Xavier, Orin: BPMP's clocks in debugfs (root)
    ("sys/kernel/debug/clk/override.emc/clk_rate", "sys/kernel/debug/tegra_bwmgr/emc_max_rate"),
    # Nano, TX1 (debugfs, root)
)


@dataclass(frozen=True)
class Trip:
    kind: str  # passive, active, hot, critical
    temp_c: float


# zones that say nothing about the die's heat: PMIC-Die reads a fixed 100 °C on Nano and Xavier
# (balena-os/balena-jetson#142), thermal-fan-est is the fan's own estimate from the others
NOT_THE_DIE = ("PMIC-Die", "thermal-fan-est")


@dataclass(frozen=True)
class Zone:
    name: str  # the zone's type, e.g. "CPU-therm", "tj-thermal"
    temp_c: float | None
    trips: tuple[Trip, ...] = ()
    reason: str | None = None  # why temp_c is absent

    @property
    def passive_c(self) -> float | None:
        """The lowest passive trip point: where the kernel starts throttling."""
        temps = [t.temp_c for t in self.trips if t.kind == "passive"]
        return min(temps) if temps else None

    def to_dict(self) -> dict:
        out = {
            "name": self.name,
            "temp_c": self.temp_c,
            "trips": [{"type": t.kind, "temp_c": t.temp_c} for t in self.trips],
        }
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class Clock:
    name: str  # gpu, cpu (policy0), emc
    cur_hz: float | None
    min_hz: float | None = None  # the limits in force (nvpmodel, jetson_clocks)
    max_hz: float | None = None
    reason: str | None = None

    @property
    def pinned(self) -> bool | None:
        """min == max: jetson_clocks (or a user) fixed the clock (jetson_clocks copies the
        maximum into the minimum for the CPUs and the GPU)."""
        if self.min_hz is None or self.max_hz is None:
            return None
        return self.min_hz == self.max_hz

    @property
    def below_max(self) -> bool | None:
        """The clock runs under its limit (throttled, when the board is busy)."""
        if self.cur_hz is None or self.max_hz is None:
            return None
        return self.cur_hz < self.max_hz * 0.995

    def to_dict(self) -> dict:
        out = {
            "name": self.name,
            "cur_mhz": mhz(self.cur_hz),
            "min_mhz": mhz(self.min_hz),
            "max_mhz": mhz(self.max_hz),
        }
        if self.reason:
            out["reason"] = self.reason
        return out


def mhz(hz: float | None) -> float | None:
    return None if hz is None else round(hz / 1e6, 3)


def _text(path: Path) -> str | None:
    try:
        text = path.read_bytes().decode("utf-8", "replace").strip("\x00 \n\t")
    except OSError:
        return None
    return text if text.isprintable() and len(text) <= 64 else None


def _number(path: Path) -> tuple[float | None, str | None]:
    try:
        return read_number(path), None
    except SensorError as exc:
        return None, str(exc)


def zone_dirs(root: str | os.PathLike | None = None) -> list[Path]:
    """The ``thermal_zoneN`` folders, in zone order (``/sys/class/thermal``, else the devices
    they link to)."""
    base = sysfs_root(root)
    paths = glob.glob(str(base / "sys/class/thermal/thermal_zone*")) or glob.glob(
        str(base / "sys/devices/virtual/thermal/thermal_zone*")
    )
    return sorted(
        (Path(p) for p in paths), key=lambda p: int("".join(c for c in p.name if c.isdigit()) or 0)
    )


def zone_name(zone: Path) -> str:
    """A zone's type (``CPU-therm``, ``tj-thermal``), or its folder's name without one."""
    return _text(zone / "type") or zone.name


def zone_temp(zone: Path) -> tuple[float | None, str | None]:
    """(°C, None) from a zone's ``temp`` (m°C), or (None, why)."""
    path = zone / "temp"
    if not path.exists():  # Orin Nano/NX's cv zones: listed, with trips, but no temperature to read
        return None, f"{path} is missing: the zone reports no temperature"
    value, reason = _number(path)
    if value is None:
        return None, reason
    if not -60000 <= value <= 200000:  # a sensor that is off reads -256 °C
        return None, f"{path} holds {value:g}, not a temperature"
    return round(value / 1000.0, 3), None


def thermal_zones(root: str | os.PathLike | None = None) -> list[Zone]:
    """Every ``/sys/class/thermal/thermal_zone*``: its type, temperature (m°C -> °C) and trips."""
    zones = []
    for z in zone_dirs(root):
        name = zone_name(z)
        temp, reason = zone_temp(z)
        trips = []
        for t in sorted(z.glob("trip_point_*_type")):
            kind = _text(t)
            value, _ = _number(t.with_name(t.name.replace("_type", "_temp")))
            if kind and value is not None and math.isfinite(value):
                trips.append(Trip(kind, round(value / 1000.0, 3)))
        zones.append(Zone(name, temp, tuple(trips), reason))
    return zones


def _devfreq(node: Path, name: str) -> Clock:
    cur, reason = _number(node / "cur_freq")
    lo, _ = _number(node / "min_freq")
    hi, _ = _number(node / "max_freq")
    return Clock(name, cur, lo, hi, reason)


def gpu_devfreq_node(root: str | os.PathLike | None = None) -> Path | None:
    """The integrated GPU's devfreq folder: by its known names, or a devfreq device whose
    device-tree node name is a GPU's; None on a board without one."""
    base = sysfs_root(root)
    for node in sorted(glob.glob(str(base / "sys/class/devfreq/*"))):
        node = Path(node)
        if node.name in GPU_DEVFREQ or _text(node / "device/of_node/name") in GPU_OF_NAMES:
            return node
    for name in GPU_DEVFREQ:
        for parent in GPU_DEVICE_DIRS:
            node = base / parent / name / "devfreq" / name
            if node.is_dir():
                return node
    return None


def gpu_clock(root: str | os.PathLike | None = None) -> Clock | None:
    """The integrated GPU's clock (its devfreq node's cur / min / max), or None."""
    node = gpu_devfreq_node(root)
    return None if node is None else _devfreq(node, "gpu")


def cpu_clocks(root: str | os.PathLike | None = None) -> list[Clock]:
    """One clock per cpufreq policy (a cluster): kHz in sysfs, Hz here."""
    base = sysfs_root(root)
    clocks = []
    policies = sorted(
        glob.glob(str(base / "sys/devices/system/cpu/cpufreq/policy*")),
        key=lambda p: int(Path(p).name[6:] or 0) if Path(p).name[6:].isdigit() else 0,
    )
    for policy in policies:
        p = Path(policy)
        cur, reason = _number(p / "scaling_cur_freq")
        lo, _ = _number(p / "scaling_min_freq")
        hi, _ = _number(p / "scaling_max_freq")
        scale = lambda v: None if v is None else v * 1e3  # noqa: E731 - kHz -> Hz
        clocks.append(Clock(f"cpu ({p.name})", scale(cur), scale(lo), scale(hi), reason))
    return clocks


def emc_clock(root: str | os.PathLike | None = None) -> Clock | None:
    """The memory controller's clock: Thor's bandwidth manager, else debugfs (root) where it is
    mounted and readable."""
    base = sysfs_root(root)
    for rate, top in EMC_RATE:
        path = base / rate
        if path.exists() or path.parent.is_dir():
            cur, reason = _number(path)
            hi, _ = _number(base / top)
            return Clock("emc", cur, None, hi, reason)
    return None


class HottestZone:
    """The temperature a cap holds: the hottest readable thermal zone that measures the die (not
    PMIC-Die's fixed 100 °C or the fan's estimate), its ``temp`` files found once. A zone that
    stops reading mid-run is said once (the cap goes on with the others); when none can be read,
    :meth:`read` gives None and the cap holds its lowest duty (see :class:`CappedRunner`)."""

    def __init__(self, root=None) -> None:
        dirs = zone_dirs(root)
        why = {d: zone_temp(d)[1] for d in dirs if zone_name(d) not in NOT_THE_DIE}
        self.zones = [d for d, reason in why.items() if reason is None]
        if not self.zones:
            where = sysfs_root(root) / "sys/class/thermal"
            if not dirs:
                detail = f"{where} has no thermal_zone folders"
            elif not why:
                detail = f"{where} has only {', '.join(zone_name(d) for d in dirs)}, which do not measure the die"
            else:
                detail = "; ".join(f"{zone_name(d)}: {r}" for d, r in list(why.items())[:4])
            raise SensorError(
                f"--temp-cap needs a readable thermal zone, and there is none ({detail})"
            )
        self.names = [zone_name(d) for d in self.zones]
        self.lost: dict[str, str] = {}  # zone name -> why it stopped reading
        self.none_readable = False

    def read(self) -> float | None:
        temps = []
        for zone, name in zip(self.zones, self.names):
            temp, why = zone_temp(zone)
            if temp is None:
                if name not in self.lost:
                    self.lost[name] = why or "no reading"
                    log.warning(
                        "thermal zone %s stopped reading (%s): the temperature cap goes "
                        "on with the other zones",
                        name,
                        self.lost[name],
                    )
                continue
            if self.lost.pop(name, None) is not None:
                log.warning("thermal zone %s reads again", name)
            temps.append(temp)
        if not temps and not self.none_readable:
            log.warning(
                "no thermal zone can be read: the temperature cap holds its lowest duty "
                "until one can"
            )
        self.none_readable = not temps
        return max(temps) if temps else None
