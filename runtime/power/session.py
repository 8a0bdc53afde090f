"""One run's power and heat, set up and summarised in one place for every command that runs a
model (``edgert camera``, ``bench``, ``serve``): the power sensor found on this board, its sampling
meter, the caps (``--power-cap`` and ``--temp-cap``, a :class:`~.governor.CappedRunner` around the
model, the tighter duty winning) and the conditions monitor (temperatures, clocks, throttling).

    with PowerSession(PowerOptions(power_cap=10.0), say=print) as power:
        runner = power.cap(engine)        # paces engine.infer under the cap
        power.watch()
        ... runner.infer(x) ...
        summary = power.summary(frames)   # watts, mJ per frame, the cap's report
        conditions = power.conditions(engine)

Closing stops the meter, the sensor and the monitor on every path."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SensorError


@dataclass(frozen=True)
class PowerOptions:
    power_cap: float | None = None  # W, the board's total
    temp_cap: float | None = None  # °C, the hottest thermal zone that measures the die
    sysfs_root: str | None = None  # a recreated sysfs tree (tests, another board's dump)
    nvml: bool = False  # also a discrete GPU's NVML sensor and conditions

    @property
    def capped(self) -> bool:
        return self.power_cap is not None or self.temp_cap is not None


class PowerSession:
    """The sensor, meter, caps and conditions monitor of one run (see the module's text)."""

    def __init__(self, options: PowerOptions | None = None, say=lambda s: None) -> None:
        from .discovery import discover
        from .meter import PowerMeter
        from .thermal import HottestZone

        self.options = o = options or PowerOptions()
        self.say = say
        # a temperature cap without a readable die zone is refused before anything starts
        self.zone = HottestZone(o.sysfs_root) if o.temp_cap is not None else None
        found = discover(o.sysfs_root, nvml=o.nvml)
        if found.sensor is None and o.power_cap is not None:
            raise SensorError(
                f"--power-cap needs a power sensor, and there is none: {found.reason}"
            )
        self.sensor = found.sensor
        self.reason = None if found.sensor else found.reason
        self.meter = PowerMeter(found.sensor).start() if found.sensor else None
        self.idle_w: float | None = None
        self.runner = None
        self.monitor = None
        self.started = self.meter.now() if self.meter else None

    # -- the parts, as a run needs them -----------------------------------------------------
    def measure_idle(self, seconds: float) -> float | None:
        """The board's idle power over ``seconds`` (nothing else should run); None without a
        sensor."""
        if self.meter is None:
            return None
        self.say(f"measuring idle power for {seconds:.0f} s ({self.sensor.describe()})")
        self.idle_w = self.meter.measure_idle(seconds)
        if self.idle_w is None and self.options.power_cap is not None:
            raise SensorError(f"could not measure idle power: {self.meter.lost or 'no samples'}")
        return self.idle_w

    def cap(self, engine, idle_seconds: float = 1.5):
        """``engine`` paced under the caps (a CappedRunner), or ``engine`` itself without caps.
        A power cap needs the idle power: measured here unless it was. SensorError when the cap
        is below it."""
        from .governor import CappedRunner

        o = self.options
        if not o.capped:
            return engine
        if o.power_cap is not None and self.idle_w is None:
            self.measure_idle(idle_seconds)
        self.runner = CappedRunner(
            engine, self.meter, o.power_cap, self.idle_w, temp_cap_c=o.temp_cap, zone=self.zone
        )
        self.started = self.meter.now() if self.meter else None
        return self.runner

    def watch(self, interval: float = 0.5) -> PowerSession:
        """The measured part of the run begins: power and energy count from here, and
        temperatures and clocks are sampled (see :meth:`conditions`)."""
        from .conditions import ConditionsMonitor

        self.started = self.meter.now() if self.meter else None
        self.monitor = ConditionsMonitor(
            self.options.sysfs_root, interval, nvml=self.options.nvml
        ).start()
        return self

    def conditions(self, engine=None, busy: bool = True) -> dict | None:
        """Stop the monitor; what the board ran at and when it throttled. ``busy``: the work kept
        the clocks busy (a benchmark), so a clock below its maximum is throttling; a camera
        paces itself, so only lowered limits, hot zones and NVML slowdowns count."""
        from .conditions import busy_clocks

        if self.monitor is None:
            return None
        monitor, self.monitor = self.monitor, None
        return monitor.stop(busy_clocks(engine), busy=busy)

    # -- numbers ------------------------------------------------------------------------------
    def live(self, s: dict) -> dict:
        """``s`` (recent statistics with ``fps``) with the recent power, mJ per frame, the
        energy since the session started and the hottest die zone's temperature (``temp_c``)."""
        m = self.meter
        if m is not None and not m.lost:
            w = m.recent_w(2.0)
            s["power_w"] = w
            s["mj_per_frame"] = (w / s["fps"] * 1e3) if w and s.get("fps") else None
            s["energy_j"] = m.energy_j(self.started, m.now())
        else:
            s["power_w"] = None
            s["power_reason"] = self.why_not()
        last = self.monitor.last if self.monitor is not None else None
        hottest = last.hottest if last is not None else None
        s["temp_c"] = hottest.temp_c if hottest is not None else None  # the die's, sampled
        return s

    def summary(self, frames: int, seconds: float, camera_s: float | None = None) -> dict:
        """Average power and energy per frame since the session (or the cap) started, and the
        cap's report; with ``camera_s`` (the camera time the streams covered, summed), joules
        per camera-hour (what event-gated inference saves on quiet cameras)."""
        out: dict = {}
        m = self.meter
        if m is not None and not m.lost:
            avg = m.average_w(self.started, m.now())
            out["power_w"] = avg
            out["mj_per_frame"] = avg * seconds / max(1, frames) * 1e3 if avg else None
            if avg and camera_s:
                out["j_per_camera_hour"] = avg * seconds / camera_s * 3600
        else:
            out["power_w"] = None
            out["power_reason"] = self.why_not()
        if self.runner is not None:
            out["power_cap"] = self.runner.report()
        return out

    def why_not(self) -> str:
        """Why there is no power reading: no sensor, or the sensor was lost mid-run."""
        return (self.meter.lost if self.meter else self.reason) or "unavailable"

    # -- the end ------------------------------------------------------------------------------
    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None
        if self.meter is not None:
            self.meter.stop()
        if self.sensor is not None:
            self.sensor.close()

    def __enter__(self) -> PowerSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
