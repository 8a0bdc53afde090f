"""The TensorRT / PyCUDA audit's findings that can be checked without TensorRT or a GPU (issue 37,
../shared/reviews/tensorrt-audit.md; the finding's number in each test's name). TensorRT and
PyCUDA are absent here, so where the backend's own bookkeeping is under test, TensorRT's execution
context, PyCUDA's events and NVML are stand-ins that keep their documented contracts, failing
the way they fail: ``IExecutionContext.infer_shapes`` raises on an error code
(release/8.5:python/src/infer/pyCore.cpp:109-124), ``set_input_shape`` returns False
(pyCore.cpp:819), ``cuEventElapsedTime`` refuses an event never recorded (CUDA runtime API,
cudaEventElapsedTime), NVML raises NVMLError_NotSupported for a reading a device lacks."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import types

import numpy as np
import pytest

from edgert.runtime.backends import plan_key
from edgert.runtime.backends import tensorrt_compat as compat
from edgert.runtime.errors import EngineMismatch, ModelError, ShapeError


def _sidecar(folder, key, precision, onnx, dla=None, module=None, sms=None, name="Orin"):
    folder.mkdir(parents=True, exist_ok=True)
    plan = folder / f"{key}.engine"
    plan.write_bytes(b"plan")
    device = {"name": name, "compute_capability": "8.7", "module": module, "multiprocessors": sms}
    (folder / f"{key}.json").write_text(
        json.dumps(
            {
                "precision": precision,
                "tensorrt": "10.3.0",
                "device": device,
                "onnx_sha256": onnx,
                "dla_core": dla,
            }
        )
    )
    return plan


# -- 1: DLA plans ----------------------------------------------------------------------------------
def test_finding_1_dla_and_gpu_plans_of_one_precision_side_by_side(tmp_path):
    """A DLA INT8 plan is built from model.onnx (implicit calibration), a GPU one from
    model.int8.onnx: selection expects each its own model, and never lets a file name decide
    between DLA and GPU."""
    version = (10, 3, 0)
    assert compat.plan_source_model(version, "int8", dla=True) == "model.onnx"
    assert compat.plan_source_model(version, "int8", dla=False) == "model.int8.onnx"
    assert compat.plan_source_model((11, 0), "int8", dla=True) != "model.onnx"  # no implicit INT8
    hashes = {"model.onnx": "f32", "model.int8.onnx": "q"}

    def expected(dla):
        return {"int8": hashes[compat.plan_source_model(version, "int8", dla)]}

    engines = tmp_path / "engines"
    dla = _sidecar(engines, "a-dla", "int8", "f32", dla=0)  # sorts first
    gpu = _sidecar(engines, "z-gpu", "int8", "q")

    def select(**kw):
        return plan_key.select_plan(
            engines,
            "int8",
            "10.3.0",
            "Orin",
            "8.7",
            expected(False),
            dla_onnx_sha256=expected(True),
            **kw,
        )

    assert select()[0] == gpu  # a GPU plan first, whatever the names
    plan, why = select(dla=0)
    assert plan == dla and "DLA core 0" in why  # not "built from an older version of the model"
    assert select(dla=1) == (None, "the bundle has no int8 TensorRT plan for DLA core 1 yet")
    gpu.unlink()
    assert select()[0] == dla  # only a DLA plan: it runs


# -- 2: the JetPack 5 build ------------------------------------------------------------------------
def test_finding_2_the_device_build_passes_every_option_and_needs_no_fp16_model(
    tmp_path, monkeypatch
):
    """edgert build on Python < 3.10 (JetPack 5): --dla, --shapes, --workspace and --opt-level
    reach the plan build, and TensorRT 8.5 builds FP16 from model.onnx (no model.fp16.onnx)."""
    from edgert.apps.commands import build
    from edgert.runtime.backends import plan_check, tensorrt, tensorrt_logger
    from tests.tiny import classifier_bundle

    bundle = classifier_bundle(tmp_path, size=16)
    got = {}
    monkeypatch.setattr(tensorrt.TensorRTBackend, "availability", classmethod(lambda c: None))
    monkeypatch.setattr(
        tensorrt_logger, "import_tensorrt", lambda: types.SimpleNamespace(__version__="8.5.2.2")
    )

    def recorded(bundle_dir, precision, device=0, options=None, check_cached=False):
        got.update(precision=precision, options=options)
        return bundle_dir / "engines" / "p.engine", True, None

    monkeypatch.setattr(plan_check, "build_checked_plan", recorded)
    args = argparse.Namespace(
        model=str(bundle),
        precision="fp16",
        calib=None,
        calib_labels=None,
        dla=0,
        workspace=1.5,
        opt_level=3,
        shapes="1x3x16x16:2x3x16x16:4x3x16x16",
    )
    assert build._device_build(args) == 0
    o = got["options"]
    assert got["precision"] == "fp16" and o.precision == "fp16" and o.dla_core == 0
    assert o.workspace_bytes == int(1.5 * 2**30) and o.opt_level == 3
    assert o.shapes == {"x": ((1, 3, 16, 16), (2, 3, 16, 16), (4, 3, 16, 16))}  # its first input


# -- 3, 4, 14, 18: the backend's bookkeeping -------------------------------------------------------
class _Context:
    """TensorRT's IExecutionContext for y = a + b with a [N, 4], b [N, 4] (N from 1 to 4)."""

    def __init__(self):
        self.shapes = {"a": (1, 4), "b": (1, 4)}
        self.executed = []

    def set_input_shape(self, name, shape):
        if not 1 <= shape[0] <= 4:
            return False  # rejected: the context is unchanged for this input
        self.shapes[name] = tuple(shape)
        return True

    def infer_shapes(self):
        if self.shapes["a"][0] != self.shapes["b"][0]:
            raise RuntimeError("Error Code 4: broadcast dimensions must be conformable")
        return []

    def get_tensor_shape(self, name):
        return self.shapes.get(name, (self.shapes["a"][0], 4))

    def execute_async_v3(self, handle):
        self.executed.append(dict(self.shapes))
        return True


class _Event:
    def __init__(self, log=None, ctx=None):
        self.recorded, self.log, self.ctx = False, log, ctx

    def record(self, stream):
        self.recorded = True

    def time_since(self, other):
        if not (self.recorded and other.recorded):
            raise RuntimeError("cuEventElapsedTime failed: invalid resource handle")
        return 1.0

    def __del__(self):
        if self.log is not None:
            self.log.append(self.ctx.current)


class _Ctx:
    current = False

    @contextlib.contextmanager
    def active(self):
        self.current = True
        try:
            yield self
        finally:
            self.current = False


class _Buffers:
    def __init__(self, shape):
        self.max_shape = shape

    def upload(self, array, stream):
        pass

    def download(self, shape, stream):
        return np.zeros(shape, np.float32)

    def free(self):
        pass


def _backend(use_graph=False, profile=False):
    from edgert.runtime.backends.tensorrt import TensorRTBackend
    from edgert.runtime.backends.tensorrt_io import TensorIO

    b = TensorRTBackend.__new__(TensorRTBackend)
    io = []
    for name, is_input in (("a", True), ("b", True), ("y", False)):
        t = TensorIO(name, is_input, "float32", (-1, 4))
        t.min_shape, t.max_shape = ((1, 4), (4, 4)) if is_input else (None, (4, 4))
        t.buffers = _Buffers(t.max_shape)
        io.append(t)
    stream = types.SimpleNamespace(
        handle=1, pycuda=None, synchronize=lambda blocking=False: None, free=lambda: None
    )
    logger = types.SimpleNamespace(mark=lambda: (0, 0), since=lambda m: [])
    b.__dict__.update(
        ctx=_Ctx(),
        _lock=threading.Lock(),
        _graph=None,
        _graph_failed=None,
        use_graph=use_graph,
        profile=profile,
        spin=True,
        last_split_ms=None,
        _events=None,
        logger=logger,
        io=io,
        context=_Context(),
        stream=stream,
        _current_shapes={},
        cuda_engine=object(),
        runtime=object(),
    )
    return b


def _feeds(n_a, n_b):
    return {"a": np.ones((n_a, 4), np.float32), "b": np.ones((n_b, 4), np.float32)}


def test_finding_3_a_shape_change_that_fails_part_way_is_applied_again_next_time():
    b = _backend()
    b.run(_feeds(2, 2))
    with pytest.raises(ShapeError, match="could not infer"):
        b.run(_feeds(3, 2))  # a set to 3, then TensorRT refuses the pair
    b.run(_feeds(2, 2))  # the old shapes again: they must be set again, not assumed
    assert b.context.executed[-1] == {"a": (2, 4), "b": (2, 4)}
    with pytest.raises(ShapeError, match="outside the engine's profile"):
        b.run(_feeds(3, 9))  # b outside the profile: nothing is set at all
    assert b.context.shapes == {"a": (2, 4), "b": (2, 4)}


def test_finding_4_profiling_and_a_graph_that_cannot_be_captured(monkeypatch):
    """The call whose capture fails ran without events: it must not time them."""
    from edgert.runtime.cuda import graph
    from edgert.runtime.errors import GraphCaptureFailed

    def refuse(stream, enqueue):
        raise GraphCaptureFailed("capture refused")

    monkeypatch.setattr(graph.CudaGraph, "capture", classmethod(lambda c, s, e: refuse(s, e)))
    monkeypatch.setattr(graph, "clear_runtime_error", lambda: 0)
    b = _backend(use_graph=True, profile=True)
    b._events = [_Event() for _ in range(4)]
    out = b.run(_feeds(2, 2))  # before the fix: cuEventElapsedTime on unrecorded events
    assert out["y"].shape == (2, 4) and b._graph_failed == "capture refused"
    assert b.last_split_ms is None
    b.run(_feeds(2, 2))  # graphs off now: the plain path, timed
    assert set(b.last_split_ms) == {"h2d", "compute", "d2h"}


def test_finding_14_close_frees_events_with_the_context_current():
    b = _backend(profile=True)
    freed: list = []
    b._events = [_Event(freed, b.ctx) for _ in range(4)]
    b.close()
    assert freed == [True, True, True, True]


def test_finding_18_an_output_larger_than_its_buffer_is_refused():
    b = _backend()
    b.io[2].max_shape = (2, 4)  # sized for fewer rows than a batch of 3 gives
    with pytest.raises(ShapeError, match="larger than the 2x4"):
        b.run(_feeds(3, 3))


# -- 8: Jetson modules -----------------------------------------------------------------------------
# compatible lists as the mainline kernel's device trees write them:
# arch/arm64/boot/dts/nvidia/tegra234-p3737-0000+p3701-0000.dts (AGX Orin developer kit) and
# tegra234-p3768-0000+p3767-0000.dts (Orin NX on its reference carrier); both report the CUDA
# device "Orin", compute capability 8.7
AGX_ORIN = b"nvidia,p3737-0000+p3701-0000\0nvidia,p3701-0000\0nvidia,tegra234\0"
ORIN_NX = b"nvidia,p3768-0000+p3767-0000\0nvidia,p3767-0000\0nvidia,tegra234\0"


@pytest.mark.parametrize(
    ("compatible", "module"), [(AGX_ORIN, "nvidia,p3701-0000"), (ORIN_NX, "nvidia,p3767-0000")]
)
def test_finding_8_the_module_comes_from_the_device_tree(tmp_path, compatible, module):
    from edgert.runtime.device import jetson_module

    (tmp_path / "proc/device-tree").mkdir(parents=True)
    (tmp_path / "proc/device-tree/compatible").write_bytes(compatible)
    assert jetson_module(tmp_path) == module
    assert jetson_module(tmp_path / "elsewhere") is None


def test_finding_8_a_plan_from_another_module_of_the_family_is_not_selected(tmp_path):
    engines = tmp_path / "engines"
    plan = _sidecar(engines, "k", "fp16", "h", module="nvidia,p3701-0000", sms=16)
    key = plan_key.PlanKey.read(plan)
    assert (key.module, key.multiprocessors) == ("nvidia,p3701-0000", 16)
    here = {"module": "nvidia,p3767-0000", "multiprocessors": 8}
    got, why = plan_key.select_plan(engines, "fp16", "10.3.0", "Orin", "8.7", **here)
    assert got is None and "built on the module nvidia,p3701-0000" in why
    got, why = plan_key.select_plan(engines, "fp16", "10.3.0", "Orin", "8.7", multiprocessors=8)
    assert got is None and "16 SMs" in why
    assert plan_key.select_plan(engines, "fp16", "10.3.0", "Orin", "8.7", multiprocessors=16)[0]
    warned = ["Using an engine plan file across different models of devices is not recommended"]
    assert plan_key.foreign_device_warning(warned) and plan_key.foreign_device_warning([]) is None


def test_finding_8_tensorrt_warnings_that_matter_are_said():
    from edgert.runtime.backends.tensorrt_logger import warning_matters

    assert warning_matters("Using an engine plan file across different models of devices is ...")
    assert warning_matters("Layer conv1 is not supported on DLA, falling back to GPU")
    assert not warning_matters("TensorRT was linked against cuBLAS 12.4 but loaded 12.2")


# -- 11: I/O types ---------------------------------------------------------------------------------
def test_finding_11_the_dtype_table_of_each_version():
    assert "INT64" not in compat.data_types((8, 5, 2)) and "BF16" in compat.data_types((10, 3))
    assert {"FP4", "E8M0"} <= set(compat.data_types((11, 0)))
    for version in ((8, 5), (10, 3), (11, 0)):
        for name in compat.data_types(version):
            if name in ("BF16", "FP8", "INT4", "FP4", "E8M0"):
                with pytest.raises(ModelError, match=f"is {name}, which has no numpy type"):
                    compat.numpy_dtype(f"DataType.{name}", "x")
            else:
                assert np.dtype(compat.numpy_dtype(f"DataType.{name}"))


def test_finding_11_int64_io_held_as_int32_is_converted_at_the_engine(tmp_path):
    """TensorRT 8.5 takes int64 I/O as INT32: the engine shows the model's int64 and converts,
    so one bundle has one set of types on every backend."""
    from edgert.runtime.backends.base import Backend
    from edgert.runtime.bundle import Manifest, TensorSpec
    from edgert.runtime.engine import Engine

    class Narrow(Backend):  # a backend holding int64 as int32, as TensorRT 8.5 does
        name = "tensorrt"
        inputs = (TensorSpec("ids", "int32", (-1, 3)),)
        outputs = (TensorSpec("out", "int32", (-1, 3)),)
        description = "stand-in"

        @classmethod
        def availability(cls):
            return None

        @classmethod
        def select(cls, target, precision, device):
            return None, ""

        @classmethod
        def load(cls, model, **_):
            return cls()

        def run(self, feeds):
            assert feeds["ids"].dtype == np.int32
            return {"out": feeds["ids"] * 2}

        def close(self):
            pass

    manifest = types.SimpleNamespace(
        inputs=(TensorSpec("ids", "int64", (-1, 3)),),
        outputs=(TensorSpec("out", "int64", (-1, 3)),),
    )
    engine = Engine(Narrow(), "stand-in", tmp_path, manifest)
    assert [s.dtype for s in (*engine.inputs, *engine.outputs)] == ["int64", "int64"]
    out = engine.infer(np.array([[1, 2, 3]], np.int64))["out"]
    assert out.dtype == np.int64 and out.tolist() == [[2, 4, 6]]
    with pytest.raises(ShapeError, match="outside int32"):
        engine.infer(np.array([[2**40, 0, 0]], np.int64))
    assert Manifest  # the real manifest type carries the same fields


# -- 12, 13, 20: the build's decisions ------------------------------------------------------------
def test_finding_12_a_dla_profile_is_pinned_to_one_shape():
    shapes = {"input": [[1, 3, 8, 8], [2, 3, 8, 8], [8, 3, 8, 8]]}
    pinned, said = compat.dla_shapes(shapes)
    assert pinned == {"input": [[2, 3, 8, 8]] * 3} and said == ["input 2x3x8x8"]
    assert compat.dla_shapes({"x": [[1, 4]] * 3}) == ({"x": [[1, 4]] * 3}, [])


def test_finding_13_the_dla_calibration_covers_every_float_tensor():
    """TensorRT's implicit INT8 needs a scale for each tensor it runs in INT8; the ranges for
    DLA cover every float tensor the model computes, not only the convolutions' inputs."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgert.quantize import ranges

    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Shape", ["p"], ["s"]),  # an int64 tensor: no scale
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    outs = [
        helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 4, 4, 4]),
        helper.make_tensor_value_info("s", TensorProto.INT64, [4]),
    ]
    graph = helper.make_graph(nodes, "g", [x], outs, initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    found = ranges.float_activations(model)
    assert found == ["x", "c", "r", "p"]
    assert ranges.activation_inputs(model, ranges.quantizable_nodes(model)) == ["x"]
    data = np.random.default_rng(0).random((8, 3, 8, 8)).astype(np.float32)
    stats = ranges.collect(model, data, found)
    assert set(stats.thresholds("minmax")) == {"x", "c", "r", "p"}
    assert onnx  # the model above is a real ONNX model run by ONNX Runtime


def test_finding_20_an_fp32_plan_clears_tf32():
    for version in ((8, 5), (10, 3), (11, 0)):
        assert compat.cleared_builder_flag_names(version, "fp32") == ["TF32"]
        assert compat.cleared_builder_flag_names(version, "fp16") == []


# -- 15: PyCUDA that cannot load -------------------------------------------------------------------
def test_finding_15_pycuda_that_cannot_load_is_not_called_missing(tmp_path, monkeypatch):
    from edgert.runtime.cuda.driver import pycuda_driver
    from edgert.runtime.errors import BackendUnavailable

    pkg = tmp_path / "pycuda"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "driver.py").write_text(  # what a PyCUDA built against a newer numpy raises
        "raise ImportError('numpy.core.multiarray failed to import')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.split(".")[0] == "pycuda"]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(BackendUnavailable, match="installed but cannot be loaded .*numpy"):
        pycuda_driver()


# -- 17: NVML --------------------------------------------------------------------------------------
def test_finding_17_a_gpu_with_an_energy_counter_but_no_power_reading(monkeypatch):
    from edgert.runtime.power import sensors

    class NVMLError(Exception):
        pass

    clock = [100.0]
    nvml = types.SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetName=lambda h: b"GPU",
        nvmlDeviceGetPowerUsage=lambda h: (_ for _ in ()).throw(NVMLError("Not Supported")),
        nvmlDeviceGetTotalEnergyConsumption=lambda h: int(clock[0] * 1000 * 50),  # 50 W, mJ
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(sensors, "nvml_handle", lambda nv, d, bus: ("h", "index"))
    monkeypatch.setattr(sensors, "cuda_pci_bus_id", lambda d: None)
    monkeypatch.setattr(sensors.time, "monotonic", lambda: clock[0])
    sensor = sensors.NvmlSensor(0)
    sensor.read()
    clock[0] += 0.5
    sample = sensor.read()  # before: NotSupported on every read, the sensor lost after three
    assert sample.total_w == pytest.approx(50.0) and sample.energy_j == pytest.approx(5025.0)


# -- a sibling: a decision made from a human-readable string ---------------------------------------
def test_the_clocks_a_cpu_engine_keeps_busy_come_from_the_backend_not_its_reason(tmp_path):
    from edgert.runtime.engine import Engine
    from edgert.runtime.power.conditions import busy_clocks
    from tests.tiny import classifier_bundle

    with Engine.load(classifier_bundle(tmp_path), backend="onnxruntime") as engine:
        assert engine.on_cpu is True and busy_clocks(engine) == ("gpu", "cpu")
        engine.backend_reason = "onnxruntime (providers CUDAExecutionProvider, Tensorrt...)"
        assert busy_clocks(engine) == ("gpu", "cpu")  # the text decides nothing
    assert EngineMismatch  # raised for a plan from another model of device (backend.__init__)
