"""``edgert bench``: latency, throughput, power and energy per inference, optionally power-capped,
and sweeps over precision / batch / power cap with a Pareto view of latency vs energy."""

from __future__ import annotations

import contextlib
import itertools
import math
import platform
import time
from dataclasses import dataclass, replace

import numpy as np

from edgert.apps import processes
from edgert.runtime.errors import EdgertError, ModelError, ShapeError
from edgert.runtime.latency import LatencyRecorder
from edgert.runtime.precision import PRECISIONS, model_file

SWEEP_KEYS = {
    "precision": ("fp32", "fp16", "int8", "auto"),
    "batch": None,
    "power_cap": None,
    "backend": ("auto", "tensorrt", "onnxruntime"),
    "gpu_clock": None,  # MHz of the GPU's table, or max (the limit in force)
    "emc_clock": None,  # MHz of the EMC's caps, or max
}
CLOCK_AXES = {"gpu_clock": "gpu", "emc_clock": "emc"}


@dataclass
class BenchConfig:
    model: str
    duration: float | None = 10.0
    iterations: int | None = None
    warmup: float = 1.0
    batch: int = 1
    precision: str = "auto"
    backend: str = "auto"
    power_cap: float | None = None
    temp_cap: float | None = None  # °C for the hottest thermal zone
    idle_seconds: float = 2.0
    sysfs_root: str | None = None
    nvml: bool = True
    # busy-wait between runs (ONNX Runtime's threads, CUDA's sync): "auto" = not under a cap
    spin: str = "auto"
    choose_point: bool = False  # under a cap: probe threads / batch / precision, run the best
    probe_seconds: float = 1.5
    target_fps: float | None = None  # hold this many inferences a second at the least energy
    keep_settings: bool = False  # --target-fps: pace the settings given, choose no other point
    clocks: str | None = None  # "auto": choose the GPU / EMC limits for --target-fps (Jetson)
    gpu_clock: float | None = None  # MHz: the GPU's maximum set for this run (a sweep's axis)
    emc_clock: float | None = None  # MHz: the EMC cap set for this run
    clock_settle: float = 0.6  # s after a clock change before a probe measures
    margin: float = 0.1  # a point holds the rate with this share to spare
    max_latency_ms: float | None = None  # a point holds the rate with p99 within this (2 slots)


def make_inputs(engine, batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for spec in engine.inputs:
        shape = list(spec.shape)
        if shape and shape[0] < 0:
            shape[0] = batch
        elif batch != 1 and shape and shape[0] != batch:
            raise ShapeError(
                f"input {spec.name} has a fixed batch of {shape[0]}; --batch {batch} needs a dynamic-batch export"
            )
        if any(d < 0 for d in shape):
            raise ShapeError(
                f"input {spec.name} has dynamic axes other than the batch: {spec.shape}"
            )
        if np.dtype(spec.dtype).kind == "f":
            feeds[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
        else:
            feeds[spec.name] = rng.integers(0, 2, shape).astype(spec.dtype)
    return feeds


def device_facts() -> dict:
    from edgert.runtime.device import jetson_info, module_version, probe_cuda
    from edgert.runtime.power import nvpmodel

    cuda = probe_cuda()
    facts = {
        "cpu": platform.processor() or platform.machine(),
        "gpu": [f"{d.name} (compute {d.cc})" for d in cuda.devices] or None,
        "gpu_reason": cuda.reason,
        "jetson": jetson_info(),
        "tensorrt": module_version("tensorrt")[0],
        "nvpmodel": None,
    }
    modes = nvpmodel.read()
    if modes:
        facts["nvpmodel"] = {"mode": modes.current_name, "jetson_clocks": modes.jetson_clocks}
    return facts  # temperatures and clocks: the report's "conditions"


def run_bench(cfg: BenchConfig, say=lambda s: None) -> dict:
    from edgert.runtime.engine import Engine
    from edgert.runtime.power.session import PowerOptions, PowerSession

    _validate(cfg)
    options = {"profile": True} if cfg.backend in ("auto", "tensorrt") else {}  # the split
    power_options = PowerOptions(cfg.power_cap, cfg.temp_cap, cfg.sysfs_root, cfg.nvml)
    paced = power_options.capped or cfg.target_fps is not None
    options["spin"] = cfg.spin == "on" or (cfg.spin == "auto" and not paced)
    point = clock_choice = None
    # on every path: no sampling thread or open sensor left behind, no clock left changed
    with PowerSession(power_options, say) as power, clock_session(cfg, say) as clocks:
        if clocks is not None and cfg.clocks is None:
            clocks.set(**_fixed_clocks(cfg, clocks))  # a sweep's point: before idle is measured
        idle = power.measure_idle(cfg.idle_seconds)
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
                point = choose_operating_point(cfg, power.meter, idle, options, say)
        elif cfg.choose_point:
            if cfg.power_cap is None or idle is None:
                raise EdgertError("--choose-point needs --power-cap and a power sensor")
            point = choose_operating_point(cfg, power.meter, idle, options, say)
        if cfg.clocks == "auto":
            clock_choice = choose_clocks(cfg, clocks, power.meter, options, say)
            hold = RateHold(clocks, clock_choice.pop("key"), say)
        else:
            hold = None
        with processes.uninterrupted(
            Engine.load, cfg.model, backend=cfg.backend, precision=cfg.precision, **options
        ) as engine:
            feeds = make_inputs(engine, cfg.batch)
            _warm(engine, feeds, cfg, cfg.warmup)
            runner = power.cap(engine)
            power.watch()
            try:
                run = _timed_loop(engine, runner, feeds, cfg, power.meter, say, hold)
            finally:
                conditions = power.conditions(engine, busy=runner is engine)
            backend, reason = engine.backend, engine.backend_reason
            capped = runner.report() if runner is not engine else None
        meter, sensor = power.meter, power.sensor
        clocks_set = clocks.report() if clocks is not None else None
        if hold is not None:
            clock_choice["steps"] = hold.steps  # up from the choice when the run fell behind
    throughput = cfg.batch * run.latencies.count / run.elapsed
    result = {
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
        "split_reason": None if run.split else _no_split_reason(backend),
        "spin": options["spin"],
        "operating_point": point,
        "clocks_set": clocks_set,  # the limits edgert set for the run and those before (restored)
        "clock_choice": clock_choice,
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
    if meter:
        result.update(_power_result(meter, sensor, run, idle, cfg.batch))
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


def operating_points(cfg: BenchConfig) -> list[dict]:
    """Candidate settings: ONNX Runtime intra-op threads (1, 2, all cores), the batch asked for and
    the bundle's largest (up to 8), FP32 and every gated model the bundle records."""
    import os

    from edgert.runtime.engine import Engine

    with processes.uninterrupted(
        Engine.load, cfg.model, backend=cfg.backend, precision="fp32"
    ) as probe:
        onnxruntime = probe.backend == "onnxruntime"
        dynamic = bool(probe.inputs) and probe.inputs[0].shape[0] < 0
        batches = sorted({cfg.batch, min(8, probe.max_batch or 8)} if dynamic else {cfg.batch})
        hashes = probe.manifest.hashes if probe.manifest else {}
    precisions = ["fp32"] + [p for p in PRECISIONS[1:] if model_file(p) in hashes]
    cores = os.cpu_count() or 1
    threads = sorted({1, 2, cores} & set(range(1, cores + 1))) if onnxruntime else [None]
    return [
        {"intra_op_threads": t, "batch": b, "precision": p}
        for t in threads
        for b in batches
        for p in precisions
    ]


def choose_operating_point(cfg: BenchConfig, meter, idle: float, options: dict, say) -> dict:
    """Measure each candidate uncapped for ``probe_seconds``, choose the one with the most
    throughput under the cap (the least energy per inference there) or, with ``target_fps``, the
    one with the least energy per inference paced to that rate, and set ``cfg`` / ``options`` to
    it; pacing then covers only the remainder."""
    from edgert.runtime.power.operating_point import OperatingPoint, choose, choose_for_rate

    points = []
    for setting in operating_points(cfg):
        label = " ".join(f"{k}={v}" for k, v in setting.items() if v is not None)
        measured = _probe(cfg, setting, meter, say, label)
        if measured is not None:
            points.append(OperatingPoint(label, setting, *measured))
            say(f"  {label}: {measured[1]:.1f}/s at {measured[0]:.2f} W")
    if not points:
        raise EdgertError("no operating point could be measured (every candidate failed to run)")
    rate = cfg.target_fps
    best, why = choose_for_rate(points, rate, idle) if rate else choose(points, cfg.power_cap, idle)
    say(f"operating point: {why}")
    cfg.batch, cfg.precision = best.settings["batch"], best.settings["precision"]
    if best.settings["intra_op_threads"]:
        options["intra_op_threads"] = best.settings["intra_op_threads"]
    candidates = [
        {
            "label": p.label,
            "power_w": round(p.power_w, 3),
            "throughput_ips": round(p.throughput_ips, 2),
            "mj_per_inference": round(p.energy_mj(), 3),
            **(
                {"mj_at_target": round(p.mj_at_rate(rate, idle), 3)}
                if rate
                else {"under_cap_ips": round(p.capped_throughput(cfg.power_cap, idle), 2)}
            ),
        }
        for p in points
    ]
    return {"chosen": best.label, "why": why, "candidates": candidates}


def clock_session(cfg: BenchConfig, say):
    """A :class:`~edgert.runtime.power.clocks.ClockSession` when the run sets clocks (``--clocks
    auto``, a sweep's clock axis), else a context of None. Nothing is written until it sets."""
    if cfg.clocks is None and cfg.gpu_clock is None and cfg.emc_clock is None:
        return contextlib.nullcontext()
    from edgert.runtime.power import clocks

    found = clocks.find(cfg.sysfs_root)
    wanted = ["gpu", "emc"] if cfg.clocks else [n for n in ("gpu", "emc") if _mhz(cfg, n)]
    if not any(getattr(found, n) for n in wanted):
        raise clocks.ClockError(
            "--clocks: this board has no clock edgert can set (" + "; ".join(found.reasons) + ")"
        )
    for name in wanted:
        if getattr(found, name) is None and not cfg.clocks:
            raise clocks.ClockError(
                f"no {name.upper()} clock to set here ({'; '.join(found.reasons)})"
            )
    return clocks.ClockSession(found, cfg.sysfs_root, say)


def _mhz(cfg: BenchConfig, name: str):
    return cfg.gpu_clock if name == "gpu" else cfg.emc_clock


def _fixed_clocks(cfg: BenchConfig, session) -> dict:
    """A sweep's clock values (MHz) as the table's rates: {"gpu": Hz, "emc": Hz}."""
    from edgert.runtime.power.clocks import ClockError

    out = {}
    for name in ("gpu", "emc"):
        value = _mhz(cfg, name)
        if value is None:
            continue
        table = session.candidates(name)
        match = [f for f in table if abs(f / 1e6 - value) < 0.5]
        if not match:
            rates = ", ".join(f"{f / 1e6:g}" for f in sorted(table))
            raise ClockError(
                f"{name}_clock {value:g} MHz is not one this board allows under its current "
                f"limits ({rates} MHz)"
            )
        out[name] = match[0]
    return out


def choose_clocks(cfg: BenchConfig, session, meter, options: dict, say) -> dict:
    """``--clocks auto``: the GPU and EMC limits with the least measured energy per inference at
    ``cfg.target_fps``. Each candidate is set, left ``clock_settle`` s, then run paced to the rate
    for ``probe_seconds`` on the settings already chosen; it holds the rate when the work fills at
    most 1 / (1 + margin) of the time, every slot was kept and p99 is within ``max_latency_ms``
    (default two slots: a frame late by at most one frame interval). The GPU's
    table is walked down from the top (at the EMC's top) until a clock cannot hold the rate or
    two in a row cost more than the best, then each axis again from the best point (one step
    up, down while it pays) until it stays put: energy against clock is U-shaped (dynamic power falls with
    the clock down to the voltage floor, the power paid while computing is paid longer)."""
    from edgert.runtime.engine import Engine
    from edgert.runtime.power.clocks import ClockError

    if meter is None:
        raise ClockError("--clocks auto measures energy, and there is no power sensor here")
    rate = cfg.target_fps
    gpus = session.candidates("gpu") or [None]
    emcs = session.candidates("emc") or [None]
    probe_cfg = BenchConfig(cfg.model, duration=cfg.probe_seconds, batch=cfg.batch, target_fps=rate)
    slot_ms = 1e3 * cfg.batch / rate
    bound_ms = cfg.max_latency_ms or 2 * slot_ms  # a frame late by at most one frame interval
    measured: dict = {}
    with processes.uninterrupted(
        Engine.load, cfg.model, backend=cfg.backend, precision=cfg.precision, **options
    ) as engine:
        feeds = make_inputs(engine, cfg.batch)
        engine.infer(feeds)

        def probe(g, e) -> dict:
            if (g, e) in measured:
                return measured[(g, e)]
            session.set(gpu=g, emc=e)
            _warm(engine, feeds, probe_cfg, cfg.clock_settle)  # at the rate, at the new clocks
            run = _timed_loop(engine, engine, feeds, probe_cfg, meter, lambda s: None)
            if run.interrupted:
                raise KeyboardInterrupt  # Ctrl-C or SIGTERM while choosing: stop, clocks go back
            stats = run.latencies.summary()
            n = cfg.batch * run.latencies.count
            energy = meter.energy_j(run.m_start, run.m_end)
            busy = stats["mean"] * stats["count"] / 1e3 / run.elapsed
            delivered = n / run.elapsed
            row = {
                "gpu_mhz": None if g is None else g / 1e6,
                "emc_mhz": None if e is None else e / 1e6,
                "mj_per_inference": None if energy is None else round(energy / n * 1e3, 3),
                "busy": round(busy, 3),
                "p99_ms": round(stats["p99"], 3),
                "delivered_ips": round(delivered, 2),
            }
            row["holds"] = (
                energy is not None
                and busy * (1 + cfg.margin) <= 1.0
                and stats["p99"] <= bound_ms
                and delivered >= 0.98 * rate
            )
            measured[(g, e)] = row
            mj = "n/a" if row["mj_per_inference"] is None else f"{row['mj_per_inference']:.1f} mJ"
            say(
                f"  clocks gpu {_label(g)} emc {_label(e)}: {mj}, busy {busy:.0%}, "
                f"p99 {stats['p99']:.1f} ms" + ("" if row["holds"] else " (does not hold the rate)")
            )
            return row

        def walk(points) -> None:
            best, worse = math.inf, 0
            for g, e in points:
                row = probe(g, e)
                if not row["holds"]:
                    break
                if row["mj_per_inference"] < best:
                    best, worse = row["mj_per_inference"], 0
                else:
                    worse += 1
                    if worse >= 2:
                        break

        def best_key():
            held = [(k, r) for k, r in measured.items() if r["holds"]]
            return min(held, key=lambda kr: kr[1]["mj_per_inference"])[0] if held else None

        walk([(g, emcs[0]) for g in gpus])
        key = best_key()
        for _ in range(3):  # each axis in turn from the best point, until it stays put
            if key is None:
                break
            before = key
            for axis, table in ((1, emcs), (0, gpus)):
                i = table.index(key[axis])
                if i > 0:
                    probe(*_at(key, axis, table[i - 1]))  # one step up
                walk([_at(key, axis, v) for v in table[i:]])  # and down while it pays
                key = best_key()
            if key == before:
                break
    if key is None:
        key = (gpus[0], emcs[0])
        why = (
            f"no clock point holds {rate:g}/s with {cfg.margin:.0%} to spare: the limits in force "
            f"(gpu {_label(key[0])}, emc {_label(key[1])})"
        )
    else:
        top = measured.get((gpus[0], emcs[0]))
        row = measured[key]
        why = f"gpu {_label(key[0])}, emc {_label(key[1])}: {row['mj_per_inference']:.1f} mJ/inference"
        if top and top is not row and top["mj_per_inference"]:
            saved = 1 - row["mj_per_inference"] / top["mj_per_inference"]
            why += (
                f" ({saved:.0%} less than at the limits in force, {top['mj_per_inference']:.1f} mJ)"
            )
    session.set(gpu=key[0], emc=key[1])
    say(f"clocks: {why}")
    return {
        "key": key,  # (gpu Hz, emc Hz) as set: where RateHold starts (not in the report)
        "chosen": {
            "gpu_mhz": None if key[0] is None else key[0] / 1e6,
            "emc_mhz": None if key[1] is None else key[1] / 1e6,
        },
        "why": why,
        "candidates": list(measured.values()),
    }


class RateHold:
    """``--target-fps`` with ``--clocks auto`` during the run: the choice was measured over a few
    seconds, and the board may turn slower after it (heat, another process, memory traffic the
    probes did not see). When the paced loop falls ``behind`` slots behind, each clock limit goes
    one step up its table (an axis at the limit in force stays), at most one step a ``cooldown``
    second: the rate is held at a little more energy rather than lost. Every step is reported."""

    def __init__(self, session, key: tuple, say, behind: float = 2.0, cooldown: float = 1.0):
        self.session, self.key, self.say = session, key, say
        self.tables = (session.candidates("gpu") or [None], session.candidates("emc") or [None])
        self.behind, self.cooldown = behind, cooldown
        self.last = 0.0  # run seconds of the last step (none in the first cooldown)
        self.steps: list = []

    def late(self, t_run: float, slots: float) -> None:
        """The loop is ``slots`` slots late ``t_run`` s into the run."""
        if slots < self.behind or t_run - self.last < self.cooldown:
            return
        new = tuple(
            table[max(0, table.index(v) - 1)] for table, v in zip(self.tables, self.key)
        )  # tables run from the top down
        if new == self.key:
            return  # at the limits in force: the report names the settings' throughput
        self.session.set(gpu=new[0], emc=new[1])
        self.key, self.last = new, t_run
        step = {
            "t_s": round(t_run, 3),
            "slots_behind": round(slots, 1),
            "gpu_mhz": None if new[0] is None else new[0] / 1e6,
            "emc_mhz": None if new[1] is None else new[1] / 1e6,
        }
        self.steps.append(step)
        self.say(
            f"clocks: {slots:.0f} slots behind at {t_run:.1f} s: up to gpu {_label(new[0])}, "
            f"emc {_label(new[1])}"
        )


def _at(key: tuple, axis: int, value) -> tuple:
    return (value, key[1]) if axis == 0 else (key[0], value)


def _label(hz) -> str:
    return "as is" if hz is None else f"{hz / 1e6:g} MHz"


def _probe(cfg: BenchConfig, setting: dict, meter, say, label: str):
    """(average W, images/s) of one setting run uncapped, without spinning; None if it cannot run."""
    from edgert.runtime.engine import Engine

    extra = {"intra_op_threads": setting["intra_op_threads"]} if setting["intra_op_threads"] else {}
    try:
        with processes.uninterrupted(
            Engine.load,
            cfg.model,
            backend=cfg.backend,
            precision=setting["precision"],
            spin=False,
            **extra,
        ) as engine:
            feeds = make_inputs(engine, setting["batch"])
            engine.infer(feeds)
            t0, n = meter.now(), 0
            while meter.now() - t0 < cfg.probe_seconds:
                engine.infer(feeds)
                n += setting["batch"]
            t1 = meter.now()
    except EdgertError as exc:
        say(f"  {label}: skipped ({exc})")
        return None
    watts = meter.average_w(t0, t1)
    return None if watts is None else (watts, n / (t1 - t0))


def _validate(cfg: BenchConfig) -> None:
    if cfg.batch < 1:
        raise ModelError("--batch must be at least 1")
    if cfg.duration is None and cfg.iterations is None:
        cfg.duration = 10.0
    for name, value, low in (
        ("--duration", cfg.duration, 0.0),
        ("--iterations", cfg.iterations, 0),
        ("--power-cap", cfg.power_cap, 0.0),
        ("--temp-cap", cfg.temp_cap, 0.0),
    ):
        if value is not None and not (math.isfinite(value) and value > low):
            raise ModelError(f"{name} must be a positive number, not {value}")
    if cfg.clocks is not None and cfg.target_fps is None:
        raise ModelError("--clocks auto chooses clocks for a rate: give --target-fps N as well")
    if cfg.target_fps and cfg.duration and cfg.batch / cfg.target_fps > cfg.duration / 2:
        raise ModelError(
            f"--target-fps {cfg.target_fps:g} is fewer than two batches of {cfg.batch} in the "
            f"run's {cfg.duration:g} s: give at least {2 * cfg.batch / cfg.duration:g}, or a "
            "longer --duration"
        )
    for name, value in (("--warmup", cfg.warmup), ("--idle-seconds", cfg.idle_seconds)):
        if not (math.isfinite(value) and value >= 0):
            raise ModelError(f"{name} must be zero or more seconds, not {value}")


@dataclass
class _Run:
    latencies: LatencyRecorder
    split: dict  # summed H2D / compute / D2H ms (TensorRT with profile)
    elapsed: float
    m_start: float | None
    m_end: float | None
    interrupted: bool

    def split_ms(self) -> dict | None:
        return {k: v / self.latencies.count for k, v in self.split.items()} if self.split else None


def _warm(engine, feeds, cfg: BenchConfig, seconds: float) -> None:
    """Inferences for ``seconds`` that nothing measures: as fast as they go, or with --target-fps
    at its rate, so that a measured window opens on the power of the rate it measures. A burst at
    full speed before it (or a pause) leaks into its first samples: an INA3221 averages over its
    conversion window, the rails and the clock governors lag; measured on tests/clock_plant.py, an
    unpaced second before a paced 3 s point moved its energy per inference by up to 10 %."""
    if seconds <= 0:
        return
    warm = replace(cfg, duration=seconds, iterations=None)
    if _timed_loop(engine, engine, feeds, warm, None, lambda s: None).interrupted:
        raise KeyboardInterrupt  # Ctrl-C or SIGTERM before the run: nothing measured yet


def _timed_loop(engine, runner, feeds, cfg: BenchConfig, meter, say, hold=None) -> _Run:
    """Inferences until --iterations or --duration (or Ctrl-C / SIGTERM: what was measured is
    reported); latencies kept in bounded memory. ``hold``: a :class:`RateHold` told when the
    paced loop runs late."""
    latencies = LatencyRecorder()
    split: dict[str, float] = {}
    t_start = time.perf_counter()
    m_start = meter.now() if meter else None
    deadline = t_start + cfg.duration if cfg.duration is not None else None
    period = cfg.batch / cfg.target_fps if cfg.target_fps else None  # --target-fps: one slot
    # slot k starts at base + k * period (counted, not summed: no drift over a long run)
    base, slot = t_start, 0
    interrupted = False
    try:
        while True:
            processes.raise_if_stop_asked()  # an interrupt some code swallowed (the CLI noted it)
            if period is not None:  # each inference at its slot; a second behind: no catch-up
                due = base + slot * period
                if deadline is not None and due + period > deadline + 1e-6:
                    break  # the next slot would end after the run's end: the run is whole slots
                now = time.perf_counter()
                wait = due - now
                if wait > 0:
                    time.sleep(wait)
                elif hold is not None:
                    hold.late(now - t_start, -wait / period)
                if wait < -1.0:
                    base, slot = time.perf_counter(), 0
                slot += 1
            t0 = time.perf_counter()
            runner.infer(feeds)
            if engine.last_split_ms:
                for part, ms in engine.last_split_ms.items():
                    split[part] = split.get(part, 0.0) + ms
            busy = time.perf_counter() - t0 if runner is engine else engine_time(runner)
            latencies.add(busy * 1e3)
            if cfg.iterations is not None and latencies.count >= cfg.iterations:
                break
            if deadline is not None and time.perf_counter() >= deadline:
                break
    except KeyboardInterrupt:
        if not latencies.count:
            raise
        interrupted = True
        say("interrupted: reporting the inferences measured so far")
    # paced, the run lasts to the end of its last slot (its rate is slots per slot time); with
    # --duration only slots that end within it are run
    now = time.perf_counter()
    end = now if period is None else max(now, base + slot * period)
    elapsed = end - t_start
    return _Run(latencies, split, elapsed, m_start, meter.now() if meter else None, interrupted)


def _no_split_reason(backend: str) -> str:
    if backend != "tensorrt":
        return (
            "ONNX Runtime copies and computes inside one call, so there is no H2D / compute / "
            "D2H split (the TensorRT backend measures it with CUDA events)"
        )
    return "no split from the TensorRT backend (a CUDA graph replays copies and launch together)"


def _power_result(meter, sensor, run: _Run, idle: float | None, batch: int) -> dict:
    out: dict = {}
    if meter.lost:
        out["power_reason"] = f"sensor lost mid-run: {meter.lost}"
    avg = meter.average_w(run.m_start, run.m_end)
    if avg is None:
        return out
    n = batch * run.latencies.count
    energy = meter.energy_j(run.m_start, run.m_end)
    out["power_w"] = {"avg": avg, "idle": idle, "source": sensor.describe()}
    out["energy_mj_per_inference"] = energy / n * 1e3
    if idle is not None:
        out["energy_mj_per_inference_above_idle"] = (
            (energy - idle * (run.m_end - run.m_start)) / n * 1e3
        )
    t, p = meter.series()
    out["power_series"] = {"t": (t - run.m_start).round(4).tolist(), "w": p.round(4).tolist()}
    return out


def engine_time(runner) -> float:
    """Latency of the last inference without the pacing sleep (what a caller waits for work)."""
    return runner.last_busy_s


def parse_sweep(words: list[str]) -> list[dict]:
    """['precision=fp32,int8', 'batch=1,4', 'power_cap=none,10'] -> the grid of settings."""
    axes = {}
    for word in words:
        key, sep, values = word.partition("=")
        if not sep or key not in SWEEP_KEYS or not values:
            raise ModelError(
                f"sweep item {word!r} must be KEY=V1,V2 with KEY one of {', '.join(SWEEP_KEYS)}"
            )
        parsed = []
        for v in values.split(","):
            v = v.strip()
            if key == "batch":
                if not v.isdigit() or int(v) < 1:
                    raise ModelError(f"sweep batch value {v!r} is not a positive integer")
                parsed.append(int(v))
            elif key in CLOCK_AXES:
                if v.lower() == "max":
                    parsed.append(None)  # the limit in force
                else:
                    try:
                        mhz = float(v)
                    except ValueError:
                        mhz = math.nan
                    if not (math.isfinite(mhz) and mhz > 0):
                        raise ModelError(f"sweep {key} value {v!r} is not a number of MHz or 'max'")
                    parsed.append(mhz)
            elif key == "power_cap":
                if v.lower() == "none":
                    parsed.append(None)
                else:
                    try:
                        parsed.append(float(v))
                    except ValueError:
                        raise ModelError(
                            f"sweep power_cap value {v!r} is not a number of watts or 'none'"
                        ) from None
            elif v not in SWEEP_KEYS[key]:
                raise ModelError(
                    f"sweep {key} value {v!r} is not one of {', '.join(SWEEP_KEYS[key])}"
                )
            else:
                parsed.append(v)
        axes[key] = parsed
    return [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]


def pareto(points: list[dict]) -> list[int]:
    """Indices of points not beaten on both latency (p50) and energy per inference."""
    front = []
    for i, a in enumerate(points):
        if a.get("energy_mj_per_inference") is None:
            continue
        dominated = any(
            b is not a
            and b.get("energy_mj_per_inference") is not None
            and b["latency_ms"]["p50"] <= a["latency_ms"]["p50"]
            and b["energy_mj_per_inference"] <= a["energy_mj_per_inference"]
            and (
                b["latency_ms"]["p50"] < a["latency_ms"]["p50"]
                or b["energy_mj_per_inference"] < a["energy_mj_per_inference"]
            )
            for b in points
        )
        if not dominated:
            front.append(i)
    return front


def run_sweep(grid: list[dict], config, say=lambda s: None) -> dict:
    """Every point of ``grid`` (settings, see :func:`parse_sweep`) benchmarked with
    ``config(setting)`` -> BenchConfig: the points (one that cannot run, an EdgertError, is kept
    as skipped with why), the Pareto front of latency, throughput and energy, the most
    energy-efficient point, and what differed in the conditions they ran under."""
    points = []
    for setting in grid:
        label = " ".join(f"{k}={'none' if v is None else v}" for k, v in setting.items())
        say(f"-- {label}")
        try:
            r = run_bench(config(setting))
        except EdgertError as exc:  # one unavailable point does not stop the sweep
            say(f"   skipped: {exc}")
            points.append({"label": label, "setting": setting, "skipped": str(exc)})
            continue
        r.pop("latencies_ms", None)
        r.pop("power_series", None)
        r["label"], r["setting"] = label, setting
        points.append(r)
    ran = [p for p in points if "skipped" not in p]
    front = pareto(ran)
    # with --target-fps: the least energy among the points that held the rate
    at_target = any(p.get("target_fps") for p in ran)
    best = min(
        (
            p
            for p in ran
            if p.get("energy_mj_per_inference") is not None
            and (not at_target or (p.get("target_fps") or {}).get("held"))
        ),
        key=lambda p: p["energy_mj_per_inference"],
        default=None,
    )
    swept = {CLOCK_AXES[k] for k in (grid[0] if grid else {}) if k in CLOCK_AXES}
    return {
        "points": points,
        "pareto": [ran[i]["label"] for i in front],
        "most_efficient": best["label"] if best else None,
        "target_ips": ran[0]["target_fps"]["target_ips"] if at_target else None,
        "conditions_mismatch": conditions_mismatch(ran, ignore=swept),
    }


def conditions_mismatch(points: list[dict], ignore: set = frozenset()) -> str | None:
    """What differed between the sweep's points: the power mode, jetson_clocks, a clock's limit
    (not those in ``ignore``: the clocks the sweep itself sets), or throttling in some and not
    others; None when they ran alike."""
    conds = [(p["label"], p.get("conditions")) for p in points if p.get("conditions")]
    if len(conds) < 2:
        return None
    found = []
    for key, what in (("nvpmodel", "power mode"), ("jetson_clocks", "jetson_clocks")):
        if key == "jetson_clocks" and "gpu" in ignore:
            continue  # a GPU clock set pinned or not is the sweep's doing
        values = {c[key] for _, c in conds}
        if len(values) > 1:
            found.append(f"{what}: " + ", ".join(f"{lab} {c[key]}" for lab, c in conds))
    limits = {name for _, c in conds for name in c["clocks"]} - set(ignore)
    for name in sorted(limits):
        values = {c["clocks"].get(name, {}).get("limit_mhz") for _, c in conds}
        if len(values) > 1:
            found.append(
                f"{name} clock limit: "
                + ", ".join(
                    f"{lab} {c['clocks'].get(name, {}).get('limit_mhz')} MHz" for lab, c in conds
                )
            )
    throttled = {c["throttled"] for _, c in conds}
    if len(throttled) > 1:
        found.append("throttled: " + ", ".join(lab for lab, c in conds if c["throttled"]))
    return "; ".join(found) or None
