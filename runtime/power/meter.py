"""A power meter: a background thread samples a sensor with monotonic timestamps; energy over any
window comes from the sensor's energy counter when it has one (differences), else from the
trapezoid integral of the power samples. Sampling never happens in the inference loop.
"""

from __future__ import annotations

import logging
import math
import threading
import time

import numpy as np

from ..errors import SensorError
from .sensors import PowerSample, PowerSensor

log = logging.getLogger(__name__)


class PowerMeter:
    def __init__(self, sensor: PowerSensor, hz: float = 50.0, capacity: int = 1 << 16) -> None:
        self.sensor = sensor
        self.interval = 1.0 / max(1e-3, hz)
        self.capacity = max(16, capacity)
        # columns t, total W, energy counter (NaN without one), cumulative trapezoid energy;
        # when full, every other row is dropped: memory stays bounded on runs of any length and
        # energy over the whole run stays exact at the rows kept
        self._rows = np.empty((self.capacity, 4))
        self._n = 0
        self._has_counter = True
        self.lost: str | None = None  # why sampling stopped early (sensor vanished)
        self.last: PowerSample | None = None  # the newest sample (its rails), for live metrics
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
            if not math.isfinite(sample.total_w):
                raise SensorError(f"{self.sensor.describe()} reads {sample.total_w} W")
        except Exception as exc:  # noqa: BLE001 - a sensor fault never stops inference
            message = str(exc) if isinstance(exc, SensorError) else f"{type(exc).__name__}: {exc}"
            self._failures += 1
            if (
                self._failures >= self.MAX_FAILURES
                or "vanished" in message
                or not isinstance(exc, SensorError)
            ):
                self.lost = message
                log.warning("power: %s; continuing without power measurements", message)
                return False
            return True
        self._failures = 0
        self._append(sample)
        self.last = sample
        return True

    def _append(self, sample: PowerSample) -> None:
        with self._lock:
            if self._n == self.capacity:  # keep every other row (first and last kept)
                keep = np.r_[0 : self._n - 1 : 2, self._n - 1]
                self._n = len(keep)
                self._rows[: self._n] = self._rows[keep]
            cum = 0.0
            if self._n:
                t0, p0, _, c0 = self._rows[self._n - 1]
                cum = c0 + (p0 + sample.total_w) / 2.0 * (sample.t - t0)
            energy = sample.energy_j
            if energy is None or not math.isfinite(energy):
                self._has_counter = False
                energy = math.nan
            self._rows[self._n] = (sample.t, sample.total_w, energy, cum)
            self._n += 1

    @property
    def samples(self) -> list[PowerSample]:
        """The samples held (all of a short run; a thinned-out history of a long one)."""
        with self._lock:
            rows = self._rows[: self._n].copy()
        return [PowerSample(t, w, energy_j=None if math.isnan(e) else e) for t, w, e, _ in rows]

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
            rows = self._rows[: self._n].copy()
            counter = self._has_counter
        t, p, e, cum = rows.T
        return t, p, (e if counter and len(rows) else None), cum

    def energy_j(self, t0: float, t1: float, counter: bool = True) -> float | None:
        """Energy in [t0, t1]: counter difference (interpolated at the ends) when the sensor has a
        counter and ``counter`` is true, else the trapezoid integral of the power samples."""
        t, p, e, cum = self._arrays()
        if len(t) < 2 or t1 <= t0:
            return None
        if e is not None and counter:
            return float(np.interp(t1, t, e) - np.interp(t0, t, e))
        return _cumulative(t1, t, p, cum) - _cumulative(t0, t, p, cum)

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
        t, p, _, _ = self._arrays()
        return t, p


def _cumulative(x: float, t: np.ndarray, p: np.ndarray, cum: np.ndarray) -> float:
    """The trapezoid integral of power from the first sample to time ``x`` (clamped to the
    samples' span, as the power is held at the ends)."""
    if x <= t[0]:
        return float(p[0] * (x - t[0]))
    if x >= t[-1]:
        return float(cum[-1] + p[-1] * (x - t[-1]))
    k = int(np.searchsorted(t, x, side="right")) - 1
    px = p[k] + (p[k + 1] - p[k]) * (x - t[k]) / (t[k + 1] - t[k])
    return float(cum[k] + (p[k] + px) / 2.0 * (x - t[k]))
