"""``edgert bench``: latency, throughput, power and energy per inference, optionally power-capped,
and sweeps over precision / batch / power cap with a Pareto view of latency vs energy."""

from __future__ import annotations

import itertools
import math
import platform
import time
from dataclasses import dataclass

import numpy as np

from edgert.runtime.errors import EdgertError, ModelError, ShapeError
from edgert.runtime.latency import LatencyRecorder
from edgert.runtime.precision import PRECISIONS, model_file

SWEEP_KEYS = {
    "precision": ("fp32", "fp16", "int8", "auto"),
    "batch": None,
    "power_cap": None,
    "backend": ("auto", "tensorrt", "onnxruntime"),
}


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
    point = None
    # on every path: no sampling thread or open sensor left behind
    with PowerSession(power_options, say) as power:
        idle = power.measure_idle(cfg.idle_seconds)
        if cfg.target_fps is not None:
            if power.meter is None or idle is None:
                say(
                    "--target-fps: no power sensor to measure energy with, so the settings given "
                    "are paced to the rate (no operating point is chosen)"
                )
            else:
                point = choose_operating_point(cfg, power.meter, idle, options, say)
        elif cfg.choose_point:
            if cfg.power_cap is None or idle is None:
                raise EdgertError("--choose-point needs --power-cap and a power sensor")
            point = choose_operating_point(cfg, power.meter, idle, options, say)
        with Engine.load(
            cfg.model, backend=cfg.backend, precision=cfg.precision, **options
        ) as engine:
            feeds = make_inputs(engine, cfg.batch)
            end_warm = time.perf_counter() + cfg.warmup
            while time.perf_counter() < end_warm:
                engine.infer(feeds)
            runner = power.cap(engine)
            power.watch()
            try:
                run = _timed_loop(engine, runner, feeds, cfg, power.meter, say)
            finally:
                conditions = power.conditions(engine, busy=runner is engine)
            backend, reason = engine.backend, engine.backend_reason
            capped = runner.report() if runner is not engine else None
        meter, sensor = power.meter, power.sensor
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

    with Engine.load(cfg.model, backend=cfg.backend, precision="fp32") as probe:
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


def _probe(cfg: BenchConfig, setting: dict, meter, say, label: str):
    """(average W, images/s) of one setting run uncapped, without spinning; None if it cannot run."""
    from edgert.runtime.engine import Engine

    extra = {"intra_op_threads": setting["intra_op_threads"]} if setting["intra_op_threads"] else {}
    try:
        with Engine.load(
            cfg.model, backend=cfg.backend, precision=setting["precision"], spin=False, **extra
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


def _timed_loop(engine, runner, feeds, cfg: BenchConfig, meter, say) -> _Run:
    """Inferences until --iterations or --duration (or Ctrl-C / SIGTERM: what was measured is
    reported); latencies kept in bounded memory."""
    latencies = LatencyRecorder()
    split: dict[str, float] = {}
    t_start = time.perf_counter()
    m_start = meter.now() if meter else None
    deadline = t_start + cfg.duration if cfg.duration is not None else None
    period = cfg.batch / cfg.target_fps if cfg.target_fps else None  # --target-fps: one slot
    due = t_start
    interrupted = False
    try:
        while True:
            if period is not None:  # each inference at its slot; a second behind: no catch-up
                if deadline is not None and due >= deadline:
                    break  # the next slot starts after the run's end
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                elif wait < -1.0:
                    due = time.perf_counter()
                due += period
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
    # paced, the run lasts to the end of its last slot (its rate is slots per slot time)
    end = time.perf_counter() if period is None else max(time.perf_counter(), due)
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
    best = min(
        (p for p in ran if p.get("energy_mj_per_inference") is not None),
        key=lambda p: p["energy_mj_per_inference"],
        default=None,
    )
    return {
        "points": points,
        "pareto": [ran[i]["label"] for i in front],
        "most_efficient": best["label"] if best else None,
        "conditions_mismatch": conditions_mismatch(ran),
    }


def conditions_mismatch(points: list[dict]) -> str | None:
    """What differed between the sweep's points: the power mode, jetson_clocks, a clock's limit,
    or throttling in some and not others; None when they ran alike."""
    conds = [(p["label"], p.get("conditions")) for p in points if p.get("conditions")]
    if len(conds) < 2:
        return None
    found = []
    for key, what in (("nvpmodel", "power mode"), ("jetson_clocks", "jetson_clocks")):
        values = {c[key] for _, c in conds}
        if len(values) > 1:
            found.append(f"{what}: " + ", ".join(f"{lab} {c[key]}" for lab, c in conds))
    limits = {name for _, c in conds for name in c["clocks"]}
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
