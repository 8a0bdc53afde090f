"""A power meter: a background thread samples a sensor with monotonic timestamps; energy over any
window comes from the sensor's energy counter when it has one (differences), else from the
trapezoid integral of the power samples. Sampling never happens in the inference loop.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from ..errors import SensorError
from .sensors import PowerSample, PowerSensor

log = logging.getLogger(__name__)


class PowerMeter:
    def __init__(self, sensor: PowerSensor, hz: float = 50.0) -> None:
        self.sensor = sensor
        self.interval = 1.0 / max(1e-3, hz)
        self.samples: list[PowerSample] = []
        self.lost: str | None = None  # why sampling stopped early (sensor vanished)
        self._failures = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- sampling -----------------------------------------------------------------------------
    def start(self) -> PowerMeter:
        if self._thread is None:
            self._take()
            self._thread = threading.Thread(
                target=self._loop, name="edgert-power-meter", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> PowerMeter:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    MAX_FAILURES = (
        3  # consecutive failed reads (an i2c glitch is one) before the sensor counts as lost
    )

    def _take(self) -> bool:
        try:
            sample = self.sensor.read()
        except SensorError as exc:
            self._failures += 1
            if self._failures >= self.MAX_FAILURES or "vanished" in str(exc):
                self.lost = str(exc)
                log.warning("power: %s; continuing without power measurements", exc)
                return False
            return True
        self._failures = 0
        with self._lock:
            self.samples.append(sample)
        return True

    def _loop(self) -> None:
        next_t = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            if not self._take():
                return
            next_t += self.interval

    # -- analysis -----------------------------------------------------------------------------
    @staticmethod
    def now() -> float:
        return time.monotonic()

    def _arrays(self):
        with self._lock:
            s = list(self.samples)
        t = np.array([x.t for x in s])
        p = np.array([x.total_w for x in s])
        e = (
            np.array([x.energy_j for x in s])
            if s and all(x.energy_j is not None for x in s)
            else None
        )
        return t, p, e

    def energy_j(self, t0: float, t1: float, counter: bool = True) -> float | None:
        """Energy in [t0, t1]: counter difference (interpolated at the ends) when the sensor has a
        counter and ``counter`` is true, else the trapezoid integral of the power samples."""
        t, p, e = self._arrays()
        if len(t) < 2 or t1 <= t0:
            return None
        if e is not None and counter:
            return float(np.interp(t1, t, e) - np.interp(t0, t, e))
        inside = t[(t > t0) & (t < t1)]
        grid = np.concatenate([[t0], inside, [t1]])
        vals = np.interp(grid, t, p)
        return float(np.sum((vals[1:] + vals[:-1]) * np.diff(grid)) / 2.0)

    def average_w(self, t0: float, t1: float) -> float | None:
        e = self.energy_j(t0, t1)
        return None if e is None else e / (t1 - t0)

    def recent_w(self, seconds: float) -> float | None:
        t1 = self.now()
        return self.average_w(t1 - seconds, t1)

    def measure_idle(self, seconds: float = 2.0) -> float | None:
        """Average power over ``seconds`` while the caller does nothing."""
        t0 = self.now()
        time.sleep(seconds)
        return self.average_w(t0, self.now())

    def series(self) -> tuple[np.ndarray, np.ndarray]:
        t, p, _ = self._arrays()
        return t, p
