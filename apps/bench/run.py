"""``edgert bench``'s one run: power session, clocks, operating point, the engine, the timed
loop, and the report."""

from __future__ import annotations

from edgert.apps import processes
from edgert.runtime.errors import EdgertError

from .clocks import RateHold, choose_clocks, clock_session, fixed_clocks
from .config import BenchConfig, device_facts, make_inputs, validate
from .loop import no_split_reason, power_result, timed_loop, warm
from .points import choose_operating_point


def run_bench(cfg: BenchConfig, say=lambda s: None) -> dict:
    from edgert.runtime.engine import Engine
    from edgert.runtime.power.session import PowerOptions, PowerSession

    validate(cfg)
    options = {"profile": True} if cfg.backend in ("auto", "tensorrt") else {}  # the split
    power_options = PowerOptions(cfg.power_cap, cfg.temp_cap, cfg.sysfs_root, cfg.nvml)
    paced = power_options.capped or cfg.target_fps is not None
    options["spin"] = cfg.spin == "on" or (cfg.spin == "auto" and not paced)
    clock_choice = None
    # on every path: no sampling thread or open sensor left behind, no clock left changed
    with PowerSession(power_options, say) as power, clock_session(cfg, say) as clocks:
        if clocks is not None and cfg.clocks is None:
            clocks.set(**fixed_clocks(cfg, clocks))  # a sweep's point: before idle is measured
        idle = power.measure_idle(cfg.idle_seconds)
        point = _operating_point(cfg, power, idle, options, say)
        if cfg.clocks == "auto":
            clock_choice = choose_clocks(cfg, clocks, power.meter, options, say)
            hold = RateHold(clocks, clock_choice.pop("key"), say)
        else:
            hold = None
        with processes.uninterrupted(
            Engine.load, cfg.model, backend=cfg.backend, precision=cfg.precision, **options
        ) as engine:
            feeds = make_inputs(engine, cfg.batch)
            warm(engine, feeds, cfg, cfg.warmup)
            runner = power.cap(engine)
            power.watch()
            try:
                run = timed_loop(engine, runner, feeds, cfg, power.meter, say, hold)
            finally:
                conditions = power.conditions(engine, busy=runner is engine)
            backend, reason = engine.backend, engine.backend_reason
            capped = runner.report() if runner is not engine else None
        meter, sensor = power.meter, power.sensor
        clocks_set = clocks.report() if clocks is not None else None
        if hold is not None:
            clock_choice["steps"] = hold.steps  # up from the choice when the run fell behind
    parts = {"point": point, "clocks_set": clocks_set, "clock_choice": clock_choice}
    result = _report(cfg, run, backend, reason, capped, conditions, options, power, parts)
    if meter:
        result.update(power_result(meter, sensor, run, idle, cfg.batch))
    # a uniform sample of the run (all of it when short): the histogram in --plot
    result["latencies_ms"] = run.latencies.sample().round(4).tolist()
    return result


def _target_report(cfg: BenchConfig, delivered: float, capped: dict | None) -> dict | None:
    """--target-fps: the rate asked for and delivered, whether it was held (within 2 %), and the
    bound that set it: the target itself, a power or temperature cap (the tightest wins), or the
    throughput of the settings run."""
    if cfg.target_fps is None:
        return None
    target = cfg.target_fps
    if delivered >= 0.98 * target:
        bound = "the target rate"
    elif capped is not None and capped["duty"] < 0.99:
        thermal = (capped.get("temperature") or {}).get("duty")
        bound = "the temperature cap" if thermal == capped["duty"] else "the power cap"
    else:
        bound = "the throughput of these settings"
    return {
        "target_ips": target,
        "delivered_ips": round(delivered, 3),
        "held": abs(delivered - target) <= 0.02 * target,
        "bound": bound,
    }


def _operating_point(cfg: BenchConfig, power, idle, options: dict, say) -> dict | None:
    """The operating point ``--target-fps`` (unless ``--keep-settings``) or ``--choose-point``
    chooses, set into ``cfg`` / ``options``; None when none is chosen."""
    if cfg.target_fps is not None and not cfg.keep_settings:
        if power.meter is None or idle is None:
            why = (
                "no power sensor to measure energy with"
                if power.meter is None
                else "the choice weighs the energy above idle, and --idle-seconds 0 measured "
                "no idle"
            )
            say(
                f"--target-fps: {why}, so the settings given are paced to the rate (no "
                "operating point is chosen)"
            )
        else:
            return choose_operating_point(cfg, power.meter, idle, options, say)
    elif cfg.choose_point:
        if cfg.power_cap is None or idle is None:
            raise EdgertError("--choose-point needs --power-cap and a power sensor")
        return choose_operating_point(cfg, power.meter, idle, options, say)
    return None


def _report(cfg, run, backend, reason, capped, conditions, options, power, parts) -> dict:
    """The run's report but for the power meter's part."""
    throughput = cfg.batch * run.latencies.count / run.elapsed
    return {
        "model": str(cfg.model),
        "backend": backend,
        "backend_reason": reason,
        "precision": cfg.precision,
        "batch": cfg.batch,
        "iterations": run.latencies.count,
        "interrupted": run.interrupted,
        "seconds": round(run.elapsed, 3),
        "latency_ms": run.latencies.summary(),
        "throughput_ips": throughput,
        "target_fps": _target_report(cfg, throughput, capped),
        "split_ms": run.split_ms(),
        "split_reason": None if run.split else no_split_reason(backend),
        "spin": options["spin"],
        "operating_point": parts["point"],
        "clocks_set": parts[
            "clocks_set"
        ],  # the limits edgert set for the run and those before (restored)
        "clock_choice": parts["clock_choice"],
        "power_cap_w": cfg.power_cap,
        "power_cap": capped,  # the governor's last duty, achieved average, throughput
        "power_w": None,
        "energy_mj_per_inference": None,
        "energy_mj_per_inference_above_idle": None,
        "power_reason": power.reason,
        "device": device_facts(),
        "conditions": conditions,
        "power_series": None,
    }
