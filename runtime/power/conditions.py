"""What the board ran at: one reading of every temperature and clock (:func:`read_conditions`),
a discrete GPU's by NVML (temperature, SM clock, throttle reasons), a suggested temperature cap,
and :class:`ConditionsMonitor`, which samples them over a run and finds the intervals in which
the board throttled. The readers are :mod:`.thermal`'s."""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from dataclasses import dataclass, field

from .sensors import sysfs_root
from .thermal import (
    NOT_THE_DIE,
    Clock,
    Zone,
    cpu_clocks,
    emc_clock,
    gpu_clock,
    mhz,
    thermal_zones,
)


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


def read_conditions(
    root: str | os.PathLike | None = None, nvml: bool = False, device: int = 0
) -> Conditions:
    """One reading of every temperature and clock the board exposes."""
    from . import nvpmodel

    zones = thermal_zones(root)
    clocks = [c for c in (gpu_clock(root), *cpu_clocks(root), emc_clock(root)) if c is not None]
    modes = None
    with contextlib.suppress(OSError):
        modes = nvpmodel.read(sysfs_root(root))
    pinned = [c.pinned for c in clocks if c.name != "emc" and c.pinned is not None]
    gpu = nvml_conditions(device) if nvml else None
    return Conditions(
        zones, clocks, modes.current_name if modes else None, all(pinned) if pinned else None, gpu
    )


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


SLOWDOWNS = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


_nvml_lock = threading.Lock()
_nvml_ready = False


def _nvml_init(pynvml) -> None:
    """nvmlInit once for the conditions reader (NVML counts its inits: one per sample, never
    shut down, only grew the count)."""
    global _nvml_ready
    with _nvml_lock:
        if not _nvml_ready:
            pynvml.nvmlInit()
            _nvml_ready = True


def nvml_conditions(device: int = 0) -> dict | None:
    """A discrete GPU's temperature (°C), SM clock and its maximum (MHz) and the active throttle
    reasons, by NVML; None (with nothing raised) where NVML or the device is not there."""
    try:
        import pynvml

        from .sensors import cuda_pci_bus_id, nvml_handle

        _nvml_init(pynvml)
        handle, _ = nvml_handle(pynvml, device, cuda_pci_bus_id(device))
        temp = pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
        sm = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        sm_max = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
        get = (
            getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        reasons = throttle_names(int(get(handle)))
    except Exception as exc:  # noqa: BLE001 - NVML absent, no such device, not supported
        return {"reason": f"NVML: {exc}"[:200]}
    return {
        "temp_c": float(temp),
        "sm_mhz": float(sm),
        "sm_max_mhz": float(sm_max),
        "throttle_reasons": [r for r in reasons if r != "gpu_idle"],
    }


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
    # asked of the backend itself, not read from its human-readable reason
    return ("gpu", "cpu") if getattr(engine, "on_cpu", False) else ("gpu",)


class ConditionsMonitor:
    """Temperatures and clocks sampled in a background thread over a run: the conditions at the
    start and the end, each zone's and clock's extremes, and the intervals in which the board
    throttled (a zone past its passive trip point, or a watched clock below its maximum while
    the run was busy). Memory is bounded: a thinned series of the hottest zone and the GPU clock
    for plots, at most ``MAX_SERIES`` points."""

    MAX_SERIES = 600

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        interval: float = 0.5,
        nvml: bool = False,
        device: int = 0,
    ) -> None:
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

        cond = read_conditions(self.root, nvml=self.nvml, device=self.device)
        t = time.monotonic() - self.t0
        below = {c.name: bool(c.below_max) for c in cond.clocks if c.below_max is not None}
        for c in cond.clocks:  # a limit lowered during the run (the OS capping a clock) throttles
            first = self._first_limits.setdefault(c.name, c.max_hz)
            if c.max_hz is not None and first is not None and c.max_hz < first * 0.995:
                below[c.name + " limit"] = True
        hot = [
            z.name
            for z in cond.zones
            if z.temp_c is not None and z.passive_c is not None and z.temp_c >= z.passive_c
        ]
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

        with self._lock:
            samples = list(self._samples)
            end = time.monotonic() - self.t0
            first, last = self.first, self.last
            zones = {k: {"min_c": v[0], "max_c": v[1]} for k, v in self._zones.items()}
            series = {
                "t": [round(t, 2) for t, _, _ in self.series],
                "hottest_c": [h for _, h, _ in self.series],
                "gpu_mhz": [g for _, _, g in self.series],
            }
            clocks = {
                k: {
                    "min_mhz": mhz(v[0]),
                    "max_mhz": mhz(v[1]),
                    "limit_mhz": mhz(self._limits.get(k)),
                }
                for k, v in self._clocks.items()
            }
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
        clocks = sorted(
            n
            for n, b in below.items()
            if b and any(n.startswith(w) for w in watch) and (busy or n.endswith(" limit"))
        )
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
