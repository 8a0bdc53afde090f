"""Latency statistics in bounded memory, for runs of any length (a camera left on for days).

:class:`LatencyRecorder` keeps exact count, mean, min, max and standard deviation; percentiles of
the whole run come from a fixed-size uniform reservoir (Vitter's algorithm R, seeded), and live
statistics from a window of the most recent values. Memory and the cost of :meth:`summary` do not
grow with the run. :func:`percentiles` is the one percentile helper for plain lists.
"""

from __future__ import annotations

import collections
import math
import random
import threading

import numpy as np

DEFAULT_RESERVOIR = 20_000  # whole-run percentiles: p99 from 20k samples is within ~0.1 percentile
DEFAULT_WINDOW = 2_048  # live statistics: about a minute at 30 fps


def percentiles(values, keys=(50, 90, 95, 99)) -> dict[str, float]:
    """min / mean / pN / max / cv of ``values`` (any sequence of numbers; not empty)."""
    a = np.asarray(values, dtype=np.float64)
    mean = float(a.mean())
    out = {"min": float(a.min()), "mean": mean}
    out.update({f"p{k}": float(np.percentile(a, k)) for k in keys})
    out["max"] = float(a.max())
    out["cv"] = float(a.std() / mean) if mean > 0 else 0.0
    return out


class LatencyRecorder:
    """Add values from any thread; read whole-run or recent statistics in bounded time."""

    def __init__(
        self, reservoir: int = DEFAULT_RESERVOIR, window: int = DEFAULT_WINDOW, seed: int = 0
    ) -> None:
        if reservoir < 1 or window < 1:
            raise ValueError("reservoir and window must hold at least one value")
        self._capacity = reservoir
        self._reservoir: list[float] = []
        self._recent: collections.deque = collections.deque(maxlen=window)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.count = 0
        self._mean = 0.0
        self._m2 = 0.0  # Welford's running sum of squared deviations
        self.min = math.inf
        self.max = -math.inf

    def add(self, value: float) -> None:
        with self._lock:
            self.count += 1
            delta = value - self._mean
            self._mean += delta / self.count
            self._m2 += delta * (value - self._mean)
            self.min = min(self.min, value)
            self.max = max(self.max, value)
            self._recent.append(value)
            if len(self._reservoir) < self._capacity:
                self._reservoir.append(value)
            else:
                j = self._rng.randrange(self.count)
                if j < self._capacity:
                    self._reservoir[j] = value

    def __len__(self) -> int:
        return self.count

    def shrink(self, keep: int) -> None:
        """Hold at most ``keep`` values from now on (a uniform sample of the reservoir) and no
        recent window: what a finished stream's numbers need (whole-run percentiles, coarser)."""
        with self._lock:
            if len(self._reservoir) > keep:
                self._reservoir = self._rng.sample(self._reservoir, keep)
            self._capacity = min(self._capacity, keep)
            self._recent = collections.deque(maxlen=1)

    @property
    def memory_values(self) -> int:
        """How many values are held (bounded by reservoir + window, whatever the run length)."""
        return len(self._reservoir) + len(self._recent)

    def sample(self) -> np.ndarray:
        """The reservoir: a uniform sample of the whole run (all of it while it is short)."""
        with self._lock:
            return np.asarray(self._reservoir, dtype=np.float64)

    def summary(self, recent: bool = False) -> dict[str, float] | None:
        """Statistics of the whole run (exact count/mean/min/max/cv, sampled percentiles) or of the
        recent window; None before the first value."""
        with self._lock:
            if not self.count:
                return None
            values = list(self._recent) if recent else list(self._reservoir)
            count, mean, m2, lo, hi = self.count, self._mean, self._m2, self.min, self.max
        out = percentiles(values)
        if not recent:
            std = math.sqrt(m2 / count)
            out.update(min=lo, max=hi, mean=mean, cv=std / mean if mean > 0 else 0.0)
        out["count"] = count if not recent else len(values)
        return out
