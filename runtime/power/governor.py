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

import logging
import math
import time
from dataclasses import dataclass, field

from ..errors import SensorError

log = logging.getLogger(__name__)


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

    def update(
        self, measured_w: float, applied_duty: float, dt: float, limited: bool = False
    ) -> float:
        """One control step: the window-average power measured while ``applied_duty`` was applied.
        ``limited``: another cap (temperature) held the duty lower, so the integral must not wind
        up towards a duty this governor does not get."""
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
        saturated = saturated or (limited and error > 0)
        if not saturated:  # anti-windup: integrate only while the output can still move
            self._integral += error * dt
        raw = feed_forward + self.kp * error + self.ki * self._integral
        step = max(-self.slew, min(self.slew, raw - self.duty))
        self.duty = max(self.min_duty, min(1.0, self.duty + step))
        return self.duty


@dataclass
class TemperatureGovernor:
    """Paces inference so the hottest zone settles at ``cap_c``: the power governor's design with
    heat as the signal. Heat lags the work by tens of seconds to minutes, so the controller does
    not chase the temperature it sees; it identifies the first-order plant

        dT/dt = alpha * T + beta * duty + gamma          (alpha = -1 / tau, beta = g / tau)

    by least squares over the recent (T, duty) history and sets the duty whose *steady state*
    ``-(beta * duty + gamma) / alpha`` is the target, a little under the cap, plus a slow
    integral of the remaining error once the temperature has settled (a model that is slightly
    off still ends at the cap). The duty changes at most ``slew`` per step. Before the model is
    known the duty stays 1 until the temperature comes within ``guard_c`` of the cap, then backs
    off, which also gives the fit the spread in duty it needs."""

    cap_c: float
    idle_c: float
    margin_c: float = 0.3  # aim under the cap: sensor steps of 0.5 °C must not cross it
    ki: float = 0.01  # duty per °C·s of settled error
    slew: float = 0.1
    min_duty: float = 0.02
    guard_c: float = 2.0
    duty: float = 1.0
    tau_s: float | None = None  # identified time constant
    gain_c: float | None = None  # identified °C per unit duty
    blind_steps: int = 0  # steps at which no zone could be read
    MEMORY = 400
    _history: list = field(default_factory=list, repr=False)  # (T, duty, dt)
    _integral: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        if self.idle_c is None or not math.isfinite(self.idle_c):
            raise SensorError(
                "the idle temperature could not be read, so no temperature cap can be set"
            )
        if not math.isfinite(self.cap_c):
            raise SensorError(f"the temperature cap must be a number of °C, not {self.cap_c}")
        if self.cap_c <= self.idle_c + 0.5:
            raise SensorError(
                f"temperature cap {self.cap_c:.1f} °C is not above the temperature at the start, "
                f"{self.idle_c:.1f} °C; pacing cannot cool below that (let the board cool, improve "
                "its cooling, or lower the clocks with nvpmodel)"
            )

    @property
    def target_c(self) -> float:
        return self.cap_c - self.margin_c

    def _identify(self) -> tuple[float, float, float] | None:
        """(alpha, beta, gamma) of ``dT/dt = alpha * T + beta * duty + gamma`` by least squares
        over the history, or None while the duty has not varied enough to tell heating by work
        from the board's own (ambient, other load) or the fit is not a stable heating plant."""
        import numpy as np

        h = self._history
        # the duty stored with a sample is the one in force since the sample before it
        rows = [((t1 - t0) / dt, t0, u1) for (t0, _, _), (t1, u1, dt) in zip(h, h[1:]) if dt > 0]
        if len(rows) < 12:
            return None
        y, temp, duty = (np.array(c, dtype=np.float64) for c in zip(*rows))
        if duty.std() < 0.02 or temp.std() < 0.05:
            return None
        a = np.stack([temp, duty, np.ones_like(temp)], axis=1)
        (alpha, beta, gamma), _, rank, _ = np.linalg.lstsq(a, y, rcond=None)
        if rank < 3 or alpha >= -1e-4 or beta <= 0:
            return None
        return float(alpha), float(beta), float(gamma)

    def _slope(self, seconds: float = 2.0) -> float:
        """°C per second over the last ``seconds`` of the history (least squares)."""
        t, pts = 0.0, []
        for temp, _, dt in reversed(self._history):
            pts.append((-t, temp))
            t += dt
            if t >= seconds:
                break
        if len(pts) < 3:
            return 0.0
        mt = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        var = sum((x - mt) ** 2 for x, _ in pts)
        return sum((x - mt) * (y - my) for x, y in pts) / var if var > 0 else 0.0

    def update(self, temp_c: float, applied_duty: float, dt: float, limited: bool = False) -> float:
        """One step with the hottest zone's temperature now, the duty applied since the last step,
        and the seconds since. ``limited``: another cap held the duty lower (do not integrate)."""
        self._history = [*self._history[-(self.MEMORY - 1) :], (temp_c, applied_duty, dt)]
        model = self._identify()
        if model is not None:
            alpha, beta, gamma = model
            self.tau_s, self.gain_c = -1.0 / alpha, -beta / alpha
            base = -gamma / alpha  # where the temperature settles at duty 0
            wanted = (self.target_c - base) / self.gain_c
            # settled: the temperature heads nowhere else (its recent slope times tau is under
            # 1 °C), or it is within guard_c of the target (a fit thrown off by a change of load,
            # its tau tens of seconds too long, must not hold the integral off); then the
            # integral removes what the model misses
            error = self.target_c - temp_c
            settled = abs(self._slope() * self.tau_s) < 1.0 or abs(error) < self.guard_c
            if settled and not limited and not (self.duty >= 1.0 and error > 0):
                self._integral += error * dt
                bound = 0.5 / self.ki  # the integral corrects the model by half the range at most
                self._integral = max(-bound, min(bound, self._integral))
            wanted += self.ki * self._integral
        elif temp_c < self.cap_c - self.guard_c:
            wanted = 1.0
        else:  # close to the cap with no model yet: back off (which also shows the plant's gain)
            wanted = self.duty * (0.8 if temp_c >= self.target_c - 0.5 else 0.95)
        step = max(-self.slew, min(self.slew, wanted - self.duty))
        self.duty = max(self.min_duty, min(1.0, self.duty + step))
        return self.duty

    def sensor_lost(self) -> None:
        """No temperature can be read: the lowest duty, until a reading comes back (then the
        duty climbs by ``slew`` a step, as after any back-off)."""
        self.duty = self.min_duty
        self.blind_steps += 1

    def report(self) -> dict:
        return {
            "cap_c": self.cap_c,
            "duty": round(self.duty, 4),
            "idle_c": round(self.idle_c, 2),
            "steps_without_reading": self.blind_steps,
            "tau_s": None if self.tau_s is None else round(self.tau_s, 2),
            "gain_c": None if self.gain_c is None else round(self.gain_c, 2),
        }


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
    """Runs an engine under a power cap, a temperature cap, or both (the tighter duty wins):
    ``infer`` paces itself; ``report()`` gives what was achieved and the throughput."""

    def __init__(
        self,
        engine,
        meter,
        cap_w: float | None,
        idle_w: float | None,
        window_s: float = 1.0,
        period_s: float = 0.25,
        temp_cap_c: float | None = None,
        zone=None,  # a thermal.HottestZone
    ) -> None:
        self.engine = engine
        self.meter = meter
        self.governor = PowerGovernor(cap_w, idle_w) if cap_w is not None else None
        self.zone = zone
        self.thermal = None
        if temp_cap_c is not None:
            if zone is None:
                raise SensorError("--temp-cap needs a thermal zone to read")
            self.thermal = TemperatureGovernor(temp_cap_c, zone.read())
        self.pacer = Pacer()
        self.window_s = window_s
        self.period_s = period_s
        self._last_update = time.monotonic()
        self._busy = 0.0
        self.last_busy_s = 0.0
        self.count = 0
        self.started = time.monotonic()
        self.temps: list[tuple[float, float]] = []  # (t, °C), thinned

    @property
    def duty(self) -> float:
        duties = [g.duty for g in (self.governor, self.thermal) if g is not None]
        return min(duties) if duties else 1.0

    def infer(self, inputs, engine=None):
        """``engine`` (default: the runner's) runs ``inputs``, paced; a camera that swaps its model
        passes the model each batch was prepared for, under the same caps."""
        self.pacer.before()
        t0 = time.monotonic()
        out = (engine or self.engine).infer(inputs)
        t1 = time.monotonic()
        self._busy += t1 - t0
        self.last_busy_s = t1 - t0
        self.count += 1
        self.pacer.after(t1 - t0, self.duty)
        if t1 - self._last_update >= self.period_s:
            dt = t1 - self._last_update
            applied = min(1.0, self._busy / dt)
            power_duty = self.governor.duty if self.governor else 1.0
            thermal_duty = self.thermal.duty if self.thermal else 1.0
            if self.governor is not None and self.meter is not None and self.meter.lost is None:
                measured = self.meter.recent_w(self.window_s)
                if measured is not None and math.isfinite(measured):
                    self.governor.update(measured, applied, dt, limited=thermal_duty < power_duty)
            if self.thermal is not None:
                temp = self.zone.read()
                if temp is not None:
                    self.thermal.update(temp, applied, dt, limited=power_duty < thermal_duty)
                    self.temps = [*self.temps[-1999:], (round(t1 - self.started, 2), temp)]
                else:  # no zone reads: fail safe, never uncapped because a sensor went away
                    self.thermal.sensor_lost()
            self._busy = 0.0
            self._last_update = t1
        return out

    def close(self) -> None:
        if self.meter is not None:
            self.meter.stop()

    def report(self) -> dict:
        t1 = time.monotonic()
        out = {
            "cap_w": self.governor.cap_w if self.governor else None,
            "duty": round(self.duty, 4),
            "average_w": self.meter.average_w(self.started, t1) if self.meter else None,
            "throughput_ips": self.count / (t1 - self.started) if t1 > self.started else 0.0,
        }
        if self.thermal is not None:
            out["temperature"] = {
                **self.thermal.report(),
                "series": self.temps[:: max(1, len(self.temps) // 400)],
            }
        return out
