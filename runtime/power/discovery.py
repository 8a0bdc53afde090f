"""The board's power sensor, found (:func:`discover`): every Jetson rail sensor that reads (their
rails combined, the total the input rail wherever it is measured), else NVML, else RAPL; a
sensor that fails while probed is skipped with its reason. The sensors themselves are
:mod:`.sensors`."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SensorError
from .sensors import (
    NvmlSensor,
    PowerSample,
    PowerSensor,
    RailSensor,
    combine,
    ina238,
    ina3221_hwmon,
    ina3221_iio,
    rapl,
    sysfs_root,
)


@dataclass
class Discovery:
    sensor: PowerSensor | None
    reason: str | None  # why there is none
    tried: list[str] = field(default_factory=list)


class CombinedRailSensor(PowerSensor):
    """Several rail sensors on one board (Jetson Thor: the carrier's INA238 on VIN and the module's
    INA3221 rails). All rails are listed; the total is the board's input rail wherever it is
    measured (as jtop does), else the sum of every rail."""

    def __init__(self, sensors: list[RailSensor]) -> None:
        self.sensors = sensors
        self.source = " + ".join(s.source for s in sensors)
        names = [r.name for s in sensors for r in s.rails]
        _, self.total_rule = combine({n: 0.0 for n in names})

    def read(self) -> PowerSample:
        rails: dict[str, float] = {}
        for sensor in self.sensors:
            for name, watts in sensor.read().rails.items():
                key = name if name not in rails else f"{name} ({sensor.source})"
                rails[key] = watts
        total, _ = combine(rails)
        return PowerSample(time.monotonic(), total, rails)

    def describe(self) -> str:
        n = sum(len(s.rails) for s in self.sensors)
        return f"{self.source} ({n} rails; total = {self.total_rule})"


def _try_find(find, base: Path, problems: list[str]):
    try:
        sensor = find(base)
        if sensor is not None:
            sensor.read()
        return sensor
    except SensorError as exc:
        problems.append(str(exc))
    except (OSError, ValueError) as exc:  # a sysfs tree that is not what it claims
        problems.append(f"{getattr(find, '__name__', 'sensor')}: {exc}")
    return None


def discover(
    root: str | os.PathLike | None = None, nvml: bool = True, device: int = 0
) -> Discovery:
    """The board's power sensor, or None with the reason. Jetson rail sensors come first (all that
    read, combined so the board total is the input rail wherever it is measured), then NVML, then
    RAPL. A sensor that fails while being probed is skipped with its reason, never fatal."""
    base = sysfs_root(root)
    if not base.is_dir():  # a mistyped --sysfs-root or EDGERT_SYSFS_ROOT: say so, not "no sensor"
        origin = "--sysfs-root" if root else "EDGERT_SYSFS_ROOT"
        return Discovery(
            None, f"the sysfs root {base} ({origin}) does not exist or is not a folder"
        )
    tried = []
    problems: list[str] = []
    rail_sensors = []
    for name, find in (
        ("INA3221 hwmon", ina3221_hwmon),
        ("INA3221 iio", ina3221_iio),
        ("INA238", ina238),
    ):
        tried.append(name)
        sensor = _try_find(find, base, problems)
        if sensor is not None:
            rail_sensors.append(sensor)
    if len(rail_sensors) == 1:
        return Discovery(rail_sensors[0], None, tried)
    if rail_sensors:
        return Discovery(CombinedRailSensor(rail_sensors), None, tried)
    if nvml:
        tried.append("NVML")
        sensor = _try_find(lambda _: NvmlSensor(device), base, problems)
        if sensor is not None:
            return Discovery(sensor, None, tried)
    tried.append("RAPL")
    sensor = _try_find(rapl, base, problems)
    if sensor is not None:
        return Discovery(sensor, None, tried)
    reason = (
        "; ".join(p for p in problems if "not installed" not in p)
        or f"no power sensor found under {base} (tried {', '.join(tried)})"
    )
    return Discovery(None, reason, tried)
