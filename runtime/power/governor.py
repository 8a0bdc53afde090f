"""Power-capped inference: a governor that paces work so average power stays under a cap.

The plant is ``power ~ idle + k * duty`` (duty: the fraction of time spent inferring), seen through
a lagging, noisy sensor. Control: feed-forward from the estimated power-vs-duty line (``duty_ff =
(target - idle) / k``, ``k`` learned online from measurements) plus a PI correction on a moving
window, with anti-windup (the integral freezes while the duty is saturated) and a slew limit. The
target sits a little under the cap so noise does not push the window average over it. When the
uncapped power is already below the cap the duty saturates at 1: no throttling.

The controller is pure (measurements in, duty out) so it is tested on a simulated plant; the
:class:`Pacer` turns a duty into sleeps between inferences.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ..errors import SensorError


@dataclass
class PowerGovernor:
    cap_w: float
    idle_w: float
    margin: float = 0.015  # aim 1.5 % under the cap
    kp: float = 0.2
    ki: float = 0.2  # kp, ki, slew: tuned on the simulated plant in tests/runtime/test_governor.py
    slew: float = 0.25  # largest duty change per update
    min_duty: float = 0.02
    duty: float = 1.0
    k_w: float | None = None  # watts per unit duty, learned
    _integral: float = field(default=0.0, repr=False)
    # recent (duty, power) measurements: the feed-forward inverts a line fitted through them, so
    # fixed overheads (clocks up while busy, threads spinning between runs) do not skew it
    _seen: list = field(default_factory=list, repr=False)
    _duties: list = field(default_factory=list, repr=False)  # (applied duty, seconds) per step

    def __post_init__(self) -> None:
        if self.idle_w is None or not math.isfinite(self.idle_w):
            raise SensorError(
                "idle power could not be measured (no valid sensor samples), so no cap can be set"
            )
        if not (math.isfinite(self.cap_w) and self.cap_w > 0):
            raise SensorError(f"the power cap must be a positive number of watts, not {self.cap_w}")
        if self.cap_w <= self.idle_w:
            raise SensorError(
                f"power cap {self.cap_w:.1f} W is at or below the idle power {self.idle_w:.1f} W; "
                "pacing cannot go below idle (lower the clocks with nvpmodel instead)"
            )

    MEMORY = 40  # control steps of (duty, power) the curve is fitted to
    window_s: float = 1.3  # the power measurement's window plus the sensor's lag, s

    def _window_duty(self, applied: float, dt: float) -> float:
        """The duty averaged over the span the power measurement covers (the last period's duty
        alone would pair today's duty with the power of a second ago)."""
        self._duties = [*self._duties[-64:], (applied, dt)]
        total = weight = 0.0
        for duty, span in reversed(self._duties):
            use = min(span, self.window_s - weight)
            if use <= 0:
                break
            total += duty * use
            weight += use
        return total / weight if weight > 0 else applied

    def curve(self) -> tuple[float, float] | None:
        """(power at duty 0+, watts per unit duty): a least-squares line through recent (duty,
        power) measurements and one pseudo-point at (0, idle), so that without spread in duty it
        falls back to the line through idle, and with it learns fixed overheads (clocks up while
        busy, threads spinning between runs). None before there are measurements."""
        if len(self._seen) < 4:
            return None
        pts = [*self._seen, (0.0, self.idle_w)]
        n = len(pts)
        md = sum(x for x, _ in pts) / n
        mp = sum(y for _, y in pts) / n
        var = sum((x - md) ** 2 for x, _ in pts)
        if var <= 1e-12:
            return None
        slope = sum((x - md) * (y - mp) for x, y in pts) / var
        if slope <= 1e-6:
            return None
        return mp - slope * md, slope

    @property
    def target_w(self) -> float:
        return self.cap_w * (1.0 - self.margin)

    def update(self, measured_w: float, applied_duty: float, dt: float) -> float:
        """One control step: the window-average power measured while ``applied_duty`` was applied."""
        duty = self._window_duty(applied_duty, dt)
        if duty > 0.05 and measured_w > self.idle_w:
            k_meas = (measured_w - self.idle_w) / duty
            self.k_w = k_meas if self.k_w is None else 0.8 * self.k_w + 0.2 * k_meas
            self._seen = [*self._seen[-(self.MEMORY - 1) :], (duty, measured_w)]
        k = self.k_w or max(self.cap_w - self.idle_w, 1e-3)
        feed_forward = (self.target_w - self.idle_w) / k
        curve = self.curve()
        if curve is not None:  # the measured power-vs-duty line, not one forced through idle
            offset, slope = curve
            k = slope
            feed_forward = (self.target_w - offset) / slope
        error = (self.target_w - measured_w) / k  # in duty units
        raw = feed_forward + self.kp * error + self.ki * self._integral
        saturated = (raw >= 1.0 and error > 0) or (raw <= self.min_duty and error < 0)
        if not saturated:  # anti-windup: integrate only while the output can still move
            self._integral += error * dt
        raw = feed_forward + self.kp * error + self.ki * self._integral
        step = max(-self.slew, min(self.slew, raw - self.duty))
        self.duty = max(self.min_duty, min(1.0, self.duty + step))
        return self.duty


class Pacer:
    """Sleeps between inferences so that busy time / wall time = duty."""

    def __init__(self, clock=time.monotonic, sleep=time.sleep) -> None:
        self.clock = clock
        self.sleep = sleep
        self._resume_at = 0.0

    def before(self) -> None:
        wait = self._resume_at - self.clock()
        if wait > 0:
            self.sleep(wait)

    def after(self, busy_s: float, duty: float) -> None:
        idle = busy_s * (1.0 - duty) / max(duty, 1e-3)
        self._resume_at = self.clock() + idle


class CappedRunner:
    """Runs an engine under a power cap: ``infer`` paces itself; ``report()`` gives achieved power
    and throughput."""

    def __init__(
        self,
        engine,
        meter,
        cap_w: float,
        idle_w: float,
        window_s: float = 1.0,
        period_s: float = 0.25,
    ) -> None:
        self.engine = engine
        self.meter = meter
        self.governor = PowerGovernor(cap_w, idle_w)
        self.pacer = Pacer()
        self.window_s = window_s
        self.period_s = period_s
        self._last_update = time.monotonic()
        self._busy = 0.0
        self.last_busy_s = 0.0
        self.count = 0
        self.started = time.monotonic()

    def infer(self, inputs):
        self.pacer.before()
        t0 = time.monotonic()
        out = self.engine.infer(inputs)
        t1 = time.monotonic()
        self._busy += t1 - t0
        self.last_busy_s = t1 - t0
        self.count += 1
        self.pacer.after(t1 - t0, self.governor.duty)
        if t1 - self._last_update >= self.period_s and self.meter.lost is None:
            applied = min(1.0, self._busy / (t1 - self._last_update))
            measured = self.meter.recent_w(self.window_s)
            if measured is not None and math.isfinite(measured):
                self.governor.update(measured, applied, t1 - self._last_update)
            self._busy = 0.0
            self._last_update = t1
        return out

    @classmethod
    def create(
        cls, engine, cap_w: float, sysfs_root=None, idle_seconds: float = 2.0
    ) -> CappedRunner:
        """Discover the sensor, start a meter, measure idle power, and pace ``engine`` under
        ``cap_w``. SensorError when there is no sensor or the cap is below idle."""
        from .meter import PowerMeter
        from .sensors import discover

        found = discover(sysfs_root)
        if found.sensor is None:
            raise SensorError(
                f"a power cap needs a power sensor, and there is none: {found.reason}"
            )
        meter = PowerMeter(found.sensor).start()
        try:
            idle = meter.measure_idle(idle_seconds)
            if idle is None:
                raise SensorError(f"could not measure idle power: {meter.lost or 'no samples'}")
            return cls(engine, meter, cap_w, idle)
        except BaseException:  # the cap was refused: do not leave the sampling thread running
            meter.stop()
            raise

    def close(self) -> None:
        self.meter.stop()

    def report(self) -> dict:
        t1 = time.monotonic()
        return {
            "cap_w": self.governor.cap_w,
            "duty": round(self.governor.duty, 4),
            "average_w": self.meter.average_w(self.started, t1),
            "throughput_ips": self.count / (t1 - self.started) if t1 > self.started else 0.0,
        }
