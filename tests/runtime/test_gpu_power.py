"""NVML meter and governor on a real GPU load (skipped without CUDA, PyCUDA and NVML)."""

from __future__ import annotations

import importlib.util

import pytest

from edgert.runtime.cuda.driver import availability


def _nvml_reason() -> str | None:
    """Why NVML cannot measure this GPU's power (None when it can): not installed, or (a Jetson
    with nvidia-ml-py) no NVML device or power there."""
    if importlib.util.find_spec("pynvml") is None:
        return "nvidia-ml-py is not installed"
    from edgert.runtime.errors import SensorError
    from edgert.runtime.power.sensors import NvmlSensor

    try:
        NvmlSensor(0).close()
    except SensorError as exc:
        return str(exc)
    return None


REASON = availability() or _nvml_reason()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(REASON is not None, reason=f"no CUDA/NVML: {REASON}"),
]


def test_nvml_meter_and_cap_on_a_real_load():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from power_cap_gpu import GpuWork, run

    from edgert.runtime.cuda.driver import PrimaryContext
    from edgert.runtime.power.meter import PowerMeter
    from edgert.runtime.power.sensors import NvmlSensor

    sensor = NvmlSensor(0)
    work = GpuWork(PrimaryContext.get(0))
    with PowerMeter(sensor, hz=50) as meter:
        idle = meter.measure_idle(2.0)
        full = run(work, meter, 8.0, None, idle, 3.0)
        assert full["mean_w_after_settle"] > idle * 1.2  # the load really draws power
        cap = idle + 0.5 * (full["mean_w_after_settle"] - idle)
        capped = run(work, meter, 12.0, cap, idle, 5.0)
    assert capped["mean_w_after_settle"] <= cap * 1.05
    assert capped["throughput_ips"] < full["throughput_ips"]
    a, b = capped["mj_per_inference_counter"], capped["mj_per_inference_trapezoid"]
    assert abs(a / b - 1) < 0.10
