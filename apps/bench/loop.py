"""The timed loop every measurement of ``edgert bench`` runs: inferences until a count or a
duration, paced to ``--target-fps`` when asked, latencies in bounded memory, and what the
power meter says of the window."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from edgert.apps import processes
from edgert.runtime.latency import LatencyRecorder

from .config import BenchConfig


@dataclass
class Run:
    latencies: LatencyRecorder
    split: dict  # summed H2D / compute / D2H ms (TensorRT with profile)
    elapsed: float
    m_start: float | None
    m_end: float | None
    interrupted: bool

    def split_ms(self) -> dict | None:
        return {k: v / self.latencies.count for k, v in self.split.items()} if self.split else None


def warm(engine, feeds, cfg: BenchConfig, seconds: float) -> None:
    """Inferences for ``seconds`` that nothing measures: as fast as they go, or with --target-fps
    at its rate, so that a measured window opens on the power of the rate it measures. A burst at
    full speed before it (or a pause) leaks into its first samples: an INA3221 averages over its
    conversion window, the rails and the clock governors lag; measured on tests/clock_plant.py, an
    unpaced second before a paced 3 s point moved its energy per inference by up to 10 %."""
    if seconds <= 0:
        return
    warm = replace(cfg, duration=seconds, iterations=None)
    if timed_loop(engine, engine, feeds, warm, None, lambda s: None).interrupted:
        raise KeyboardInterrupt  # Ctrl-C or SIGTERM before the run: nothing measured yet


def timed_loop(engine, runner, feeds, cfg: BenchConfig, meter, say, hold=None) -> Run:
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
    return Run(latencies, split, elapsed, m_start, meter.now() if meter else None, interrupted)


def engine_time(runner) -> float:
    """Latency of the last inference without the pacing sleep (what a caller waits for work)."""
    return runner.last_busy_s


def no_split_reason(backend: str) -> str:
    if backend != "tensorrt":
        return (
            "ONNX Runtime copies and computes inside one call, so there is no H2D / compute / "
            "D2H split (the TensorRT backend measures it with CUDA events)"
        )
    return "no split from the TensorRT backend (a CUDA graph replays copies and launch together)"


def power_result(meter, sensor, run: Run, idle: float | None, batch: int) -> dict:
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
