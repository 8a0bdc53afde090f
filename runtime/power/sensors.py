"""Power sensors, most specific first, each reporting rails and a total in watts.

- Jetson INA3221 through hwmon (JetPack 5/6): ``inN_label``, ``inN_input`` (mV), ``currN_input``
  (mA); power = V x I. Through iio (JetPack 4): ``rail_name_N``, ``in_powerN_input`` (mW).
- INA238 (Jetson Thor): ``power1_input`` (uW).
- NVML (discrete GPUs): the total-energy counter (mJ) when supported, else power (mW).
- RAPL (x86): ``energy_uj`` counters, wrapping at ``max_energy_range_uj``.

Total = the board's input rail (VDD_IN, POM_5V_IN, VIN, 5V_IN) when it has one, else the sum of
the rails (AGX Xavier, AGX Orin) — never both. "NC" (not connected) channels and the INA3221's
sum-of-shunts channel (in7) are skipped. Sysfs is read under a root folder (``/`` by default;
``--sysfs-root`` or ``EDGERT_SYSFS_ROOT``) because containers often mount the host's /sys elsewhere.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SensorError

INPUT_RAILS = ("VDD_IN", "POM_5V_IN", "VIN", "5V_IN")


@dataclass(frozen=True)
class PowerSample:
    t: float  # time.monotonic()
    total_w: float
    rails: dict[str, float] = field(default_factory=dict)
    energy_j: float | None = None  # a cumulative energy counter, when the sensor has one


def sysfs_root(root: str | os.PathLike | None = None) -> Path:
    return Path(root or os.environ.get("EDGERT_SYSFS_ROOT") or "/")


def read_number(path: Path) -> float:
    """A sysfs number; SensorError with the reason (permission, vanished, garbage)."""
    try:
        text = path.read_bytes().decode("ascii").strip()
    except UnicodeDecodeError:
        raise SensorError(f"{path} does not hold a number (it has non-text bytes)") from None
    except PermissionError as exc:
        raise SensorError(
            f"permission denied on {path}: run as root or add a udev rule that makes it readable"
        ) from exc
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENODEV, errno.ENXIO):
            raise SensorError(f"{path} vanished (sensor removed or driver unloaded)") from exc
        raise SensorError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        value = float(text.split()[0])
    except (ValueError, IndexError):
        raise SensorError(f"{path} does not hold a number ({text[:40]!r})") from None
    if not math.isfinite(value):
        raise SensorError(f"{path} does not hold a finite number ({text[:40]!r})")
    return value


def combine(rails: dict[str, float]) -> tuple[float, str]:
    """(total watts, how): the input rail when present, else the sum of the rails."""
    for name in INPUT_RAILS:
        if name in rails:
            return rails[name], f"input rail {name}"
    return sum(rails.values()), "sum of rails"


class PowerSensor:
    """Base: ``read()`` returns a PowerSample; ``source`` names the sensor."""

    source = "unknown"
    update_hz = 50.0  # how often readings change (the meter does not sample faster)

    def read(self) -> PowerSample:
        raise NotImplementedError

    def describe(self) -> str:
        return self.source

    def close(self) -> None:
        pass


@dataclass
class _Rail:
    name: str
    files: tuple[Path, ...]
    scale: float  # multiply the product of the file values by this to get watts


class RailSensor(PowerSensor):
    """Rails read from files (INA3221 hwmon / iio, INA238)."""

    def __init__(self, source: str, rails: list[_Rail]) -> None:
        self.source = source
        self.rails = rails
        _, self.total_rule = combine({r.name: 0.0 for r in rails})

    def read(self) -> PowerSample:
        values = {}
        for rail in self.rails:
            product = 1.0
            for f in rail.files:
                product *= read_number(f)
            values[rail.name] = product * rail.scale
        total, _ = combine(values)
        return PowerSample(time.monotonic(), total, values)

    def describe(self) -> str:
        return f"{self.source} ({len(self.rails)} rails; total = {self.total_rule})"


def _label(path: Path) -> str | None:
    try:
        label = path.read_bytes().decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return label if label.isprintable() and len(label) <= 64 else None


def _skip(label: str | None) -> bool:
    return not label or label.upper() == "NC" or label.lower().startswith("sum of shunt")


def ina3221_hwmon(root: Path) -> RailSensor | None:
    rails = []
    for hw in sorted(glob.glob(str(root / "sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*"))):
        hw = Path(hw)
        for n in range(1, 7):  # in7 is the sum of shunt voltages: never a rail
            label = _label(hw / f"in{n}_label")
            volt, curr = hw / f"in{n}_input", hw / f"curr{n}_input"
            if _skip(label) or not curr.exists() or not volt.exists():
                continue
            rails.append(_Rail(label, (volt, curr), 1e-6))  # mV x mA = uW
    return RailSensor("INA3221 (hwmon)", rails) if rails else None


def ina3221_iio(root: Path) -> RailSensor | None:
    rails = []
    for dev in sorted(glob.glob(str(root / "sys/bus/i2c/drivers/ina3221x/*/iio:device*"))):
        dev = Path(dev)
        for n in range(0, 8):
            label = _label(dev / f"rail_name_{n}")
            power = dev / f"in_power{n}_input"
            if _skip(label) or not power.exists():
                continue
            rails.append(_Rail(label, (power,), 1e-3))  # mW
    return RailSensor("INA3221 (iio)", rails) if rails else None


def ina238(root: Path) -> RailSensor | None:
    """INA238-family monitors (the kernel's ina238 hwmon driver: ``power1_input`` in uW, beside
    ``in0_input``, ``in1_input``, ``curr1_input``, ``temp1_input``; no per-channel label files).
    A chip is named by the hwmon core's device ``label`` (from the firmware's label property)
    where the board has one. On Jetson Thor the one INA238 is the carrier's monitor of the board
    input, so a single unlabelled INA238 is VIN (the total); several unlabelled ones are named by
    their I2C address and summed."""
    found = []
    for hw in sorted(glob.glob(str(root / "sys/bus/i2c/drivers/ina238/*/hwmon/hwmon*"))):
        hw = Path(hw)
        power = hw / "power1_input"
        if not power.exists():
            continue
        label = _label(hw / "label") or _label(hw / "power1_label") or _label(hw / "in1_label")
        found.append((hw, label, power))
    rails = []
    for hw, label, power in found:
        if label is None:  # the board's only INA238 is Thor's carrier monitor of VIN
            label = "VIN" if len(found) == 1 else f"ina238-{hw.parent.parent.name}"
        if _skip(label):
            continue
        rails.append(_Rail(label, (power,), 1e-6))  # uW
    return RailSensor("INA238 (hwmon)", rails) if rails else None


class RaplSensor(PowerSensor):
    """Intel RAPL package domains: power from energy counter differences (with wraparound)."""

    source = "RAPL"
    update_hz = 100.0

    def __init__(self, domains: list[tuple[str, Path, float]]) -> None:
        self.domains = domains  # (name, energy_uj file, max_energy_range_uj)
        self._last: dict[str, tuple[float, float]] = {}
        self._total_j = 0.0

    def read(self) -> PowerSample:
        now = time.monotonic()
        rails = {}
        for name, path, wrap in self.domains:
            uj = read_number(path)
            prev = self._last.get(name)
            self._last[name] = (now, uj)
            if prev is None:
                rails[name] = 0.0
                continue
            delta = counter_delta(prev[1], uj, wrap)
            self._total_j += delta * 1e-6
            dt = now - prev[0]
            rails[name] = delta * 1e-6 / dt if dt > 0 else 0.0
        return PowerSample(now, sum(rails.values()), rails, energy_j=self._total_j)

    def describe(self) -> str:
        return f"RAPL ({', '.join(d[0] for d in self.domains)})"


def counter_delta(prev: float, now: float, wrap: float) -> float:
    """Increase of a counter that wraps to 0 after ``wrap``."""
    return now - prev if now >= prev else now + (wrap - prev)


def rapl(root: Path) -> RaplSensor | None:
    domains = []
    for d in sorted(glob.glob(str(root / "sys/class/powercap/intel-rapl:*"))):
        d = Path(d)
        if d.name.count(":") != 1:  # top-level packages only: subdomains are inside them
            continue
        energy = d / "energy_uj"
        if not energy.exists():
            continue
        name = _label(d / "name") or d.name
        wrap = (
            read_number(d / "max_energy_range_uj")
            if (d / "max_energy_range_uj").exists()
            else 2**32
        )
        domains.append((name, energy, wrap))
    return RaplSensor(domains) if domains else None


class NvmlSensor(PowerSensor):
    """NVML: the total-energy counter (preferred: power readings are ~1 s averages on recent GPUs)
    or instantaneous power. Readings update about every 100 ms."""

    update_hz = 10.0

    def __init__(self, device: int = 0) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise SensorError("NVML is not installed: pip install nvidia-ml-py") from exc
        self.nvml = pynvml
        try:
            pynvml.nvmlInit()
            self.handle, self.matched_by = nvml_handle(pynvml, device, cuda_pci_bus_id(device))
            name = pynvml.nvmlDeviceGetName(self.handle)
        except pynvml.NVMLError as exc:
            raise SensorError(f"NVML unavailable: {exc}") from exc
        self.name = name.decode() if isinstance(name, bytes) else str(name)
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.has_energy = True
        except pynvml.NVMLError:
            self.has_energy = False
        try:
            pynvml.nvmlDeviceGetPowerUsage(self.handle)
            self.has_power = True
        except pynvml.NVMLError as exc:  # Jetson: NotSupported -> the next sensor
            if not self.has_energy:
                raise SensorError(f"NVML reports no power for {self.name}: {exc}") from exc
            self.has_power = False  # the energy counter alone: watts from its differences
        self.source = f"NVML ({self.name})"
        self._last: tuple[float, float] | None = None  # (time, joules) of the last read
        self._watts = 0.0

    def read(self) -> PowerSample:
        nv = self.nvml
        try:
            t = time.monotonic()
            watts = nv.nvmlDeviceGetPowerUsage(self.handle) / 1000.0 if self.has_power else None
            energy = (
                nv.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1000.0
                if self.has_energy
                else None
            )
        except nv.NVMLError as exc:
            raise SensorError(f"NVML read failed: {exc}") from exc
        if watts is None:  # a device that counts energy but reports no power
            if self._last is not None and t > self._last[0] and energy >= self._last[1]:
                self._watts = (energy - self._last[1]) / (t - self._last[0])
            watts = self._watts
        if energy is not None:
            self._last = (t, energy)
        return PowerSample(t, watts, {self.name: watts}, energy_j=energy)

    def describe(self) -> str:
        return f"{self.source}, {'energy counter' if self.has_energy else 'power samples'}"

    def close(self) -> None:
        with contextlib.suppress(Exception):  # already shut down
            self.nvml.nvmlShutdown()


def cuda_pci_bus_id(device: int) -> str | None:
    """The PCI bus id of CUDA device ``device`` (the CUDA order, after CUDA_VISIBLE_DEVICES), or
    None where CUDA cannot say."""
    from ..device import probe_cuda

    devices = probe_cuda().devices
    return devices[device].pci_bus_id if 0 <= device < len(devices) else None


def nvml_handle(nvml, device: int, pci_bus_id: str | None):
    """(NVML handle, how it was matched) for CUDA device ``device``. NVML numbers GPUs by PCI
    order, CUDA fastest-first (and after CUDA_VISIBLE_DEVICES), so the CUDA index is no NVML index:
    the card is found by its PCI bus id. Only without one does the index stand in."""
    if pci_bus_id:
        try:
            handle = nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode())
            return handle, f"PCI bus id {pci_bus_id}"
        except nvml.NVMLError:
            pass
    return nvml.nvmlDeviceGetHandleByIndex(device), f"index {device} (no PCI bus id from CUDA)"
