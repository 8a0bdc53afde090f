"""Heat and clocks from sysfs (device side, read like the power sensors: under ``--sysfs-root`` /
``EDGERT_SYSFS_ROOT``): every thermal zone with its trip points, the GPU clock (the devfreq node of
the board's GPU), the CPU clocks per cpufreq policy, the EMC clock where debugfs is readable, and
whether ``jetson_clocks`` pinned the clocks (minimum == maximum). On a discrete GPU, NVML's
temperature, SM clock and throttle reasons (the device matched by PCI bus id, as the power sensor).

A file that is missing, unreadable or holds junk makes that one reading absent with its reason;
nothing here raises for a board that lacks something.
"""

from __future__ import annotations

import contextlib
import glob
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SensorError
from .sensors import read_number, sysfs_root

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
        out = {"name": self.name, "temp_c": self.temp_c,
               "trips": [{"type": t.kind, "temp_c": t.temp_c} for t in self.trips]}  # fmt: skip
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
        out = {"name": self.name, "cur_mhz": _mhz(self.cur_hz), "min_mhz": _mhz(self.min_hz),
               "max_mhz": _mhz(self.max_hz)}  # fmt: skip
        if self.reason:
            out["reason"] = self.reason
        return out


def _mhz(hz: float | None) -> float | None:
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


def gpu_clock(root: str | os.PathLike | None = None) -> Clock | None:
    """The integrated GPU's devfreq node: by its known names, or a devfreq device whose
    device-tree node name is a GPU's; None on a board without one."""
    base = sysfs_root(root)
    for node in sorted(glob.glob(str(base / "sys/class/devfreq/*"))):
        node = Path(node)
        if node.name in GPU_DEVFREQ or _text(node / "device/of_node/name") in GPU_OF_NAMES:
            return _devfreq(node, "gpu")
    for name in GPU_DEVFREQ:
        for parent in GPU_DEVICE_DIRS:
            node = base / parent / name / "devfreq" / name
            if node.is_dir():
                return _devfreq(node, "gpu")
    return None


def cpu_clocks(root: str | os.PathLike | None = None) -> list[Clock]:
    """One clock per cpufreq policy (a cluster): kHz in sysfs, Hz here."""
    base = sysfs_root(root)
    clocks = []
    policies = sorted(glob.glob(str(base / "sys/devices/system/cpu/cpufreq/policy*")),
                      key=lambda p: int(Path(p).name[6:] or 0) if Path(p).name[6:].isdigit() else 0)  # fmt: skip
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


@dataclass
class Conditions:
    """What the board ran at: temperatures, clocks, power mode."""

    zones: list[Zone] = field(default_factory=list)
    clocks: list[Clock] = field(default_factory=list)
    nvpmodel: str | None = None
    jetson_clocks: bool | None = None
    gpu: dict | None = None  # a discrete GPU's NVML numbers

    @property
    def hottest(self) -> Zone | None:
        """The hottest zone that measures the die (not PMIC-Die's fixed reading or an estimate)."""
        zones = [z for z in self.zones if z.temp_c is not None and z.name not in NOT_THE_DIE]
        return max(zones, key=lambda z: z.temp_c) if zones else None

    @property
    def lowest_passive_c(self) -> float | None:
        trips = [z.passive_c for z in self.zones if z.passive_c is not None]
        return min(trips) if trips else None

    def to_dict(self) -> dict:
        return {
            "zones": [z.to_dict() for z in self.zones],
            "clocks": [c.to_dict() for c in self.clocks],
            "nvpmodel": self.nvpmodel,
            "jetson_clocks": self.jetson_clocks,
            "gpu": self.gpu,
        }


def read_conditions(root: str | os.PathLike | None = None, nvml: bool = False,
                    device: int = 0) -> Conditions:  # fmt: skip
    """One reading of every temperature and clock the board exposes."""
    from . import nvpmodel

    zones = thermal_zones(root)
    clocks = [c for c in (gpu_clock(root), *cpu_clocks(root), emc_clock(root)) if c is not None]
    modes = None
    with contextlib.suppress(OSError):
        modes = nvpmodel.read(sysfs_root(root))
    pinned = [c.pinned for c in clocks if c.name != "emc" and c.pinned is not None]
    gpu = nvml_conditions(device) if nvml else None
    return Conditions(zones, clocks, modes.current_name if modes else None,
                      all(pinned) if pinned else None, gpu)  # fmt: skip


# NVML throttle reasons (nvml.h: nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*)
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


SLOWDOWNS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
             "hw_power_brake_slowdown")  # fmt: skip


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def nvml_conditions(device: int = 0) -> dict | None:
    """A discrete GPU's temperature (°C), SM clock and its maximum (MHz) and the active throttle
    reasons, by NVML; None (with nothing raised) where NVML or the device is not there."""
    try:
        import pynvml

        from .sensors import cuda_pci_bus_id, nvml_handle

        pynvml.nvmlInit()
        handle, _ = nvml_handle(pynvml, device, cuda_pci_bus_id(device))
        temp = pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
        sm = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        sm_max = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
        get = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
               or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)  # fmt: skip
        reasons = throttle_names(int(get(handle)))
    except Exception as exc:  # noqa: BLE001 - NVML absent, no such device, not supported
        return {"reason": f"NVML: {exc}"[:200]}
    return {"temp_c": float(temp), "sm_mhz": float(sm), "sm_max_mhz": float(sm_max),
            "throttle_reasons": [r for r in reasons if r != "gpu_idle"]}  # fmt: skip


def suggested_temp_cap(cond: Conditions, margin_c: float = 5.0) -> float | None:
    """A temperature cap a few degrees below the lowest passive trip point (where the kernel
    starts throttling the clocks), or None without trip points."""
    passive = cond.lowest_passive_c
    return None if passive is None else float(math.floor(passive - margin_c))


def busy_clocks(engine) -> tuple[str, ...]:
    """The clocks an engine's inference keeps busy (what counts as throttling when they drop):
    the GPU's, and the CPUs' when inference runs on them."""
    if engine is None:
        return ("gpu",)
    reason = getattr(engine, "backend_reason", "") or ""
    on_cpu = engine.backend == "onnxruntime" and "CUDA" not in reason and "Tensorrt" not in reason
    return ("gpu", "cpu") if on_cpu else ("gpu",)


class ConditionsMonitor:
    """Temperatures and clocks sampled in a background thread over a run: the conditions at the
    start and the end, each zone's and clock's extremes, and the intervals in which the board
    throttled (a zone past its passive trip point, or a watched clock below its maximum while
    the run was busy). Memory is bounded: a thinned series of the hottest zone and the GPU clock
    for plots, at most ``MAX_SERIES`` points."""

    MAX_SERIES = 600

    def __init__(self, root: str | os.PathLike | None = None, interval: float = 0.5,
                 nvml: bool = False, device: int = 0) -> None:  # fmt: skip
        import threading

        self.root, self.interval, self.nvml, self.device = root, interval, nvml, device
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.t0 = 0.0
        self.first: Conditions | None = None
        self.last: Conditions | None = None
        self._zones: dict[str, list[float]] = {}  # name -> [min, max]
        self._clocks: dict[str, list[float]] = {}  # name -> [min, max] Hz
        self._limits: dict[str, float] = {}  # clock -> its maximum (the limit in force)
        self._first_limits: dict[str, float | None] = {}
        self._samples: list[tuple[float, dict[str, bool], list[str]]] = []  # t, below max, hot
        self.series: list[tuple[float, float | None, float | None]] = []  # t, hottest °C, gpu MHz

    def start(self) -> ConditionsMonitor:
        import threading
        import time

        self.t0 = time.monotonic()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="conditions", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._sample()
            except Exception:  # noqa: BLE001 - a reading never stops the run
                continue

    def _sample(self) -> None:
        import time

        cond = read_conditions(self.root, nvml=self.nvml, device=self.device)
        t = time.monotonic() - self.t0
        below = {c.name: bool(c.below_max) for c in cond.clocks if c.below_max is not None}
        for c in cond.clocks:  # a limit lowered during the run (the OS capping a clock) throttles
            first = self._first_limits.setdefault(c.name, c.max_hz)
            if c.max_hz is not None and first is not None and c.max_hz < first * 0.995:
                below[c.name + " limit"] = True
        hot = [z.name for z in cond.zones
               if z.temp_c is not None and z.passive_c is not None and z.temp_c >= z.passive_c]  # fmt: skip
        slow = [r for r in (cond.gpu or {}).get("throttle_reasons", []) if r in SLOWDOWNS]
        if slow:  # a discrete GPU that NVML says slows down (heat, power)
            hot.append("NVML: " + ", ".join(slow))
        gpu = next((c.cur_hz for c in cond.clocks if c.name == "gpu"), None)
        if gpu is None and cond.gpu and cond.gpu.get("sm_mhz") is not None:
            gpu = cond.gpu["sm_mhz"] * 1e6
        hottest = cond.hottest
        with self._lock:
            self.first = self.first or cond
            self.last = cond
            for z in cond.zones:
                if z.temp_c is not None:
                    lo_hi = self._zones.setdefault(z.name, [z.temp_c, z.temp_c])
                    lo_hi[0], lo_hi[1] = min(lo_hi[0], z.temp_c), max(lo_hi[1], z.temp_c)
            for c in cond.clocks:
                if c.cur_hz is not None:
                    lo_hi = self._clocks.setdefault(c.name, [c.cur_hz, c.cur_hz])
                    lo_hi[0], lo_hi[1] = min(lo_hi[0], c.cur_hz), max(lo_hi[1], c.cur_hz)
                if c.max_hz is not None:
                    self._limits[c.name] = c.max_hz
            self._samples.append((t, below, hot))
            if len(self._samples) > 4 * self.MAX_SERIES:  # keep what intervals need: changes
                self._samples = _changes(self._samples)
            self.series.append((t, hottest.temp_c if hottest else None, gpu and gpu / 1e6))
            if len(self.series) > self.MAX_SERIES:
                self.series = self.series[::2]

    def report(self, watch: tuple[str, ...] = ("gpu",), busy: bool = True) -> dict:
        """The conditions block of a report. ``watch``: the clocks that count for throttling (the
        GPU for a GPU backend, the CPU clusters too for a CPU one); below their maximum only
        when the run kept them ``busy`` (uncapped, back to back: DVFS lowers an idle clock), a
        lowered limit always."""
        import time

        with self._lock:
            samples = list(self._samples)
            end = time.monotonic() - self.t0
            first, last = self.first, self.last
            zones = {k: {"min_c": v[0], "max_c": v[1]} for k, v in self._zones.items()}
            series = {"t": [round(t, 2) for t, _, _ in self.series],
                      "hottest_c": [h for _, h, _ in self.series],
                      "gpu_mhz": [g for _, _, g in self.series]}  # fmt: skip
            clocks = {k: {"min_mhz": _mhz(v[0]), "max_mhz": _mhz(v[1]),
                          "limit_mhz": _mhz(self._limits.get(k))} for k, v in self._clocks.items()}  # fmt: skip
        intervals = _throttle_intervals(samples, watch, end, busy)
        return {
            "start": first.to_dict() if first else None,
            "end": last.to_dict() if last else None,
            "zones": zones,
            "clocks": clocks,
            "nvpmodel": last.nvpmodel if last else None,
            "jetson_clocks": last.jetson_clocks if last else None,
            "throttled": bool(intervals),
            "throttling": intervals,
            "series": series,
        }

    def stop(self, watch: tuple[str, ...] = ("gpu",), busy: bool = True) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.interval + 1)
        with contextlib.suppress(Exception):
            self._sample()  # the end of the run
        return self.report(watch, busy)


def _changes(samples: list) -> list:
    """Samples where what throttles changes (and the first and last): enough for the intervals."""
    kept = [samples[0]]
    for s in samples[1:-1]:
        if (s[1], s[2]) != (kept[-1][1], kept[-1][2]):
            kept.append(s)
    return [*kept, samples[-1]] if len(samples) > 1 else kept


def _throttle_intervals(
    samples: list, watch: tuple[str, ...], end: float, busy: bool = True
) -> list[dict]:
    """Runs of samples in which a watched clock was below its maximum or a zone past its passive
    trip: ``{"from_s", "to_s", "clocks": [...], "zones": [...]}`` (seconds from the start)."""
    out: list[dict] = []
    current = None
    for i, (t, below, hot) in enumerate(samples):
        clocks = sorted(n for n, b in below.items() if b and any(n.startswith(w) for w in watch)
                        and (busy or n.endswith(" limit")))  # fmt: skip
        if clocks or hot:
            if current is None:
                current = {
                    "from_s": round(t, 2),
                    "to_s": round(t, 2),
                    "clocks": set(),
                    "zones": set(),
                }
            nxt = samples[i + 1][0] if i + 1 < len(samples) else end
            current["to_s"] = round(nxt, 2)
            current["clocks"].update(clocks)
            current["zones"].update(hot)
        elif current is not None:
            out.append(current)
            current = None
    if current is not None:
        out.append(current)
    return [{**c, "clocks": sorted(c["clocks"]), "zones": sorted(c["zones"])} for c in out]
