"""Device defects found by reading our code against NVIDIA's sources (issue: deployment, section 3).
Where no TensorRT or NVML can run here, a fake stands in for the single call in question."""

from __future__ import annotations

import gc
import sys
import types
import weakref

import numpy as np
import pytest

from edgert.runtime.backends import plan_key
from edgert.runtime.errors import ShapeError
from edgert.runtime.power.discovery import discover
from edgert.runtime.power.sensors import nvml_handle
from tests.runtime.test_power_sensors import ina238_hwmon, ina3221_hwmon


@pytest.mark.parametrize("label", [None, "VIN"])
def test_thor_totals_vin_not_the_module_rails(tmp_path, label):
    """Thor: the carrier's INA238 measures VIN (42.5 W); the module's INA3221 rails add up to 29 W.
    The ina238 driver writes no label files (None: the real layout; before, every rail was summed:
    71.5 W); a firmware label reaches sysfs as the hwmon device's ``label``."""
    ina3221_hwmon(
        tmp_path,
        "1-0040",
        1,
        [("VDD_GPU", 5000, 3000), ("VDD_CPU_SOC_MSS", 5000, 2000), ("VDD_SYS", 5000, 800)],
    )
    ina238_hwmon(tmp_path, "2-0044", 9, 42_500_000, label=label)
    d = discover(tmp_path, nvml=False)
    s = d.sensor.read()
    assert s.total_w == pytest.approx(42.5)  # the board's input, as jtop reports it
    assert s.rails["VDD_GPU"] == pytest.approx(15.0) and s.rails["VIN"] == pytest.approx(42.5)
    assert "input rail VIN" in d.sensor.describe()


def test_several_sensors_without_an_input_rail_sum_everything(tmp_path):
    ina3221_hwmon(tmp_path, "1-0040", 1, [("VDD_GPU", 5000, 1000)])
    ina238_hwmon(tmp_path, "2-0044", 9, 2_000_000, label="VDD_CPU")
    s = discover(tmp_path, nvml=False).sensor.read()
    assert s.total_w == pytest.approx(7.0)


def test_an_unlabelled_ina238_beside_labelled_ones_is_not_taken_for_vin(tmp_path):
    ina238_hwmon(tmp_path, "2-0044", 9, 2_000_000, label="VDD_GPU")
    ina238_hwmon(tmp_path, "2-0045", 10, 3_000_000)
    s = discover(tmp_path, nvml=False).sensor.read()
    assert set(s.rails) == {"VDD_GPU", "ina238-2-0045"} and s.total_w == pytest.approx(5.0)


def test_several_unlabelled_ina238_are_named_by_address(tmp_path):
    ina238_hwmon(tmp_path, "2-0044", 9, 2_000_000)
    ina238_hwmon(tmp_path, "2-0045", 10, 3_000_000)
    s = discover(tmp_path, nvml=False).sensor.read()
    assert s.rails == pytest.approx({"ina238-2-0044": 2.0, "ina238-2-0045": 3.0})
    assert s.total_w == pytest.approx(5.0)


def test_dla_core_is_set_before_deserialising():
    info = plan_key.PlanKey("int8", "10.3.0", "Orin", "8.7", dla_core=1)
    assert plan_key.runtime_dla_core(info) == 1
    gpu = plan_key.PlanKey("fp16", "10.3.0", "Orin", "8.7")
    assert plan_key.runtime_dla_core(gpu) is None and plan_key.runtime_dla_core(None) is None
    # the order on TensorRT's real API: test_tensorrt_backend_api.py's DLA plan (calls recorded)


def test_timing_cache_is_keyed_on_the_gpu_too():
    a = plan_key.timing_cache_name("10.3.0", "8.9", "NVIDIA GeForce RTX 4090")
    b = plan_key.timing_cache_name("10.3.0", "8.9", "NVIDIA L4")
    assert a != b and a.startswith("timing-10.3.0-sm89-") and "/" not in a + b


class FakeNvml(types.SimpleNamespace):
    """NVML's numbering (PCI order) against CUDA's (fastest first): two cards, swapped."""

    class NVMLError(Exception):
        pass

    def __init__(self):
        super().__init__(calls=[])
        self.by_bus = {b"0000:01:00.0": "nvml-0 (slow card)", b"0000:02:00.0": "nvml-1 (fast card)"}

    def nvmlDeviceGetHandleByPciBusId(self, bus):  # noqa: N802 - NVML's name
        self.calls.append(("bus", bus))
        if bus not in self.by_bus:
            raise self.NVMLError("not found")
        return self.by_bus[bus]

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802
        self.calls.append(("index", index))
        return list(self.by_bus.values())[index]


def test_nvml_matches_the_cuda_device_by_pci_bus_id():
    nvml = FakeNvml()
    # CUDA device 0 is the fast card, on bus 02: NVML index 0 would be the wrong card
    handle, how = nvml_handle(nvml, 0, "0000:02:00.0")
    assert handle == "nvml-1 (fast card)" and "PCI bus id" in how
    handle, how = nvml_handle(nvml, 1, None)  # no CUDA driver to ask: the index, said so
    assert handle == "nvml-1 (fast card)" and "index" in how


def test_process_wide_tensorrt_logger(monkeypatch):
    """The plugin library keeps the logger's pointer: one logger for the process, plugins once."""
    calls = []

    class ILogger:
        class Severity:
            ERROR, INTERNAL_ERROR, WARNING, INFO = range(4)

        def __init__(self):
            pass

    fake = types.SimpleNamespace(
        ILogger=ILogger, init_libnvinfer_plugins=lambda lg, ns: calls.append(lg)
    )
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    from edgert.runtime.backends import tensorrt_logger as tl

    monkeypatch.setattr(tl, "_logger", None)
    monkeypatch.setattr(tl, "_plugins_ready", False)
    tl.init_plugins()
    tl.init_plugins()
    logger = tl.process_logger()
    assert calls == [logger]  # once, with the logger that lives as long as the process
    ref = weakref.ref(logger)
    del logger, calls[:]
    gc.collect()
    assert ref() is not None
    mark = ref().mark()
    ref().log(ILogger.Severity.ERROR, "first")
    assert ref().since(mark) == ["first"] and ref().since(ref().mark()) == []


def test_infer_shapes_error_code_becomes_a_shape_error():
    from edgert.runtime.backends.tensorrt import TensorRTBackend
    from edgert.runtime.backends.tensorrt_io import TensorIO

    class Context:  # TensorRT's IExecutionContext, for the two calls in question
        def set_input_shape(self, name, shape):
            return True

        def infer_shapes(self):
            raise RuntimeError("IExecutionContext::inferShapes: Error Code 7: internal error")

    backend = object.__new__(TensorRTBackend)
    backend.io = [TensorIO("x", True, "float32", (-1, 3))]
    backend.context = Context()
    backend._current_shapes = {}
    with pytest.raises(ShapeError, match="could not infer the output shapes"):
        backend._apply_shapes({"x": np.zeros((2, 3), np.float32)})
