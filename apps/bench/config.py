"""What one ``edgert bench`` run is asked (:class:`BenchConfig`, checked by :func:`validate`),
the inputs it feeds and the facts of the device it reports."""

from __future__ import annotations

import math
import platform
from dataclasses import dataclass

import numpy as np

from edgert.runtime.errors import ModelError, ShapeError


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


def validate(cfg: BenchConfig) -> None:
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
        elif spec.dtype == "uint8":  # pixels (a model that normalises them itself)
            feeds[spec.name] = rng.integers(0, 256, shape).astype(spec.dtype)
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
