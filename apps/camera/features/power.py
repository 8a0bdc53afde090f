"""The power session: sensors, ``--power-cap`` / ``--temp-cap`` (the cap is what infers), the
meter's summary, its gauges and the throttling conditions seen."""

from __future__ import annotations

from .base import Feature, Run


class Power(Feature):
    """The run's power session."""

    name = "power"
    section = "power"
    help_rank = 10
    after = ("clocks",)  # the clocks are set before the cap measures idle power
    summary_first = True

    @staticmethod
    def add_arguments(parser) -> None:
        from edgert.apps.argtypes import add_power_arguments

        add_power_arguments(parser)

    @staticmethod
    def from_args(args):
        from edgert.runtime.power.session import PowerOptions

        return PowerOptions(args.power_cap, args.temp_cap, args.sysfs_root)

    def open(self, run: Run) -> None:
        from edgert.runtime.power.session import PowerSession

        run.power = run.stack.enter_context(PowerSession(run.cfg.power))

    def loaded(self, run: Run) -> None:
        run.runner = run.power.cap(run.model)

    gauges = None  # telemetry.metrics.PowerGauges: energy counted from the pipeline's start

    def attach(self, run: Run) -> None:
        from edgert.apps.telemetry.metrics import PowerGauges

        self.gauges = PowerGauges(run.power.meter, run.power.runner)
        run.power.watch()

    def close(self, run: Run) -> None:
        # a camera paces itself by its frame rate: only lowered limits, hot zones and NVML
        # slowdowns count as throttling, not DVFS easing off between frames
        run.conditions = run.power.conditions(getattr(run.model, "engine", None), busy=False)

    def report(self, run: Run, summary: dict) -> None:
        summary["conditions"] = run.conditions
        camera_s = sum(st.get("camera_s") or 0.0 for st in summary["streams"])
        summary.update(run.power.summary(summary["frames_processed"], summary["seconds"], camera_s))

    def families(self, run: Run):
        if self.gauges is None:
            return ()
        return self.gauges.families(run.pipeline.recent_fps())

    @staticmethod
    def summary_lines(s: dict) -> list:
        """The power line and the conditions block."""
        from edgert.apps.report import print_conditions

        if s.get("power_w") is not None:
            per_hour = s.get("j_per_camera_hour")
            lines = [
                f"power {s['power_w']:.2f} W, {s['mj_per_frame']:.1f} mJ/frame"
                + (f", {per_hour / 1e3:.1f} kJ per camera-hour" if per_hour else "")
            ]
        else:
            lines = [f"power unavailable ({s.get('power_reason')})"]
        print_conditions(s.get("conditions"), say=lines.append)
        return lines
