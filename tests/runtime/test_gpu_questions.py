"""What only a CUDA device can answer about the TensorRT / PyCUDA audit (issue 37,
../shared/reviews/tensorrt-audit.md): each test names its finding. Skipped without CUDA; the
TensorRT ones without TensorRT too. Python 3.8 syntax (a JetPack 5 device runs them), checked by
vermin with the device side. What a test only observes is printed (``-s``) and kept in the log the
GPU check writes (reports/gpu/gpu-tests.log)."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest

from edgert.runtime.cuda.driver import availability

REASON = availability()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"no CUDA: {REASON}")]


@pytest.fixture(scope="module")
def ctx():
    from edgert.runtime.cuda.driver import PrimaryContext

    return PrimaryContext.get(0)


def test_finding_8_the_facts_a_plan_key_tells_modules_apart_by(ctx):
    """The name, compute capability and SM count CUDA reports here, and the device tree's
    module: on a Jetson the module is what tells AGX Orin, Orin NX and Orin Nano apart."""
    from edgert.runtime.device import jetson_module, probe_cuda

    dev = probe_cuda().devices[0]
    print(
        f"\nCUDA device: {dev.name!r} cc {dev.cc}, {dev.multiprocessors} SMs, module {jetson_module()!r}"
    )
    assert dev.multiprocessors > 0


def test_finding_6_a_capture_survives_another_thread_on_the_legacy_stream(ctx):
    """The engine's stream is non-blocking: while it is captured, another thread's synchronous
    copies (the legacy default stream) neither fail nor break the capture."""
    from edgert.runtime.cuda.graph import CudaGraph
    from edgert.runtime.cuda.memory import DeviceBuffer
    from edgert.runtime.cuda.stream import Stream

    n = 1 << 20
    stop, errors, copies = threading.Event(), [], [0]

    def other_thread() -> None:
        host = np.zeros(n, np.float32)
        with ctx.active(), DeviceBuffer(host.nbytes) as dev:
            while not stop.is_set():
                try:
                    ctx.cuda.memcpy_htod(dev.ptr, host)  # synchronous: the legacy stream
                    copies[0] += 1
                except Exception as exc:  # noqa: BLE001 - the answer sought
                    errors.append(str(exc))
                    return

    with ctx.active(), Stream() as stream, DeviceBuffer(n * 4) as a:
        host = np.ones(n, np.float32)
        t = threading.Thread(target=other_thread)
        t.start()
        try:
            graphs = []
            for _ in range(20):
                graphs.append(
                    CudaGraph.capture(stream.handle, lambda: stream.copy_htod(a.ptr, host))
                )
            for g in graphs:
                g.launch(stream.handle)
            stream.synchronize()
        finally:
            stop.set()
            t.join()
            for g in graphs:
                g.free()
    print(f"\n20 captures beside {copies[0]} synchronous copies on another thread")
    assert errors == [] and copies[0] > 0


def test_finding_5_the_runtime_error_a_failed_capture_leaves(ctx):
    """After a capture that fails, the CUDA runtime's pending error (in the libcudart this
    process loaded, if any) is cleared; printed: which error it was."""
    from edgert.runtime.cuda.graph import CudaGraph, GraphCaptureFailed, clear_runtime_error
    from edgert.runtime.cuda.stream import Stream

    with ctx.active(), Stream() as stream:
        with pytest.raises(GraphCaptureFailed):
            CudaGraph.capture(stream.handle, stream.synchronize)
        code = clear_runtime_error()
        assert clear_runtime_error() == 0  # cleared: nothing pending the second time
        stream.synchronize()
    print(f"\npending CUDA runtime error after the failed capture: {code}")


def test_finding_16_preprocessing_without_a_sync_between_frames(ctx):
    """Two frames preprocessed back to back on one stream with no sync between (the staging
    buffer of the first is still being copied when the second arrives): both are right."""
    from edgert.runtime import Preprocessing
    from edgert.runtime.cuda.memory import DeviceBuffer
    from edgert.runtime.cuda.preprocess_kernel import GpuPreprocessor
    from edgert.runtime.cuda.stream import Stream
    from edgert.runtime.sample_data import load_photo

    pre = Preprocessing(
        size=(224, 224),
        resize="stretch",
        interpolation="bilinear",
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
    )
    frames = [load_photo("chelsea"), load_photo("astronaut")]
    frames[1] = frames[1][: frames[0].shape[0], : frames[0].shape[1]]  # the same size: reused
    from tests.runtime.images.preprocess_reference import reference_apply

    wants = [reference_apply(pre, f)[0] for f in frames]  # the kernel's float arithmetic
    gpu = GpuPreprocessor(pre)
    with contextlib.ExitStack() as stack:
        stack.enter_context(ctx.active())
        stream = stack.enter_context(Stream())
        outs = [stack.enter_context(DeviceBuffer(w.nbytes)) for w in wants]
        for i in range(2):
            gpu(frames[i], outs[i].ptr, stream)
        got = [np.empty_like(w) for w in wants]
        for i in range(2):
            stream.copy_dtoh(got[i], outs[i].ptr)
        stream.synchronize()
    gpu.free()
    for i in range(2):
        np.testing.assert_allclose(got[i], wants[i], atol=1e-3)


# -- with TensorRT ---------------------------------------------------------------------------------
def _tensorrt_reason():
    from edgert.runtime.backends.tensorrt import TensorRTBackend

    return TensorRTBackend.availability()


needs_trt = pytest.mark.skipif(
    REASON is None and _tensorrt_reason() is not None, reason="no TensorRT"
)


def _two_input_bundle(folder):
    """A bundle of y = a + b, both inputs [N, 4] with a dynamic batch (1 to 4)."""
    import onnx
    from onnx import TensorProto, helper

    from edgert.export import export_model

    spec = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 4]) for n in "ab"]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add", spec, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "add.onnx"))
    return export_model(str(folder / "add.onnx"), folder / "add.edgert", max_batch=4).bundle


@needs_trt
def test_finding_3_a_failed_shape_change_leaves_no_half_applied_shapes(tmp_path):
    from edgert.runtime.engine import Engine
    from edgert.runtime.errors import ShapeError

    bundle = _two_input_bundle(tmp_path)
    with Engine.load(bundle, backend="tensorrt", precision="fp32") as engine:
        a, b = np.ones((2, 4), np.float32), np.full((2, 4), 2.0, np.float32)
        assert (engine.infer({"a": a, "b": b})["y"] == 3).all()
        with pytest.raises(ShapeError):  # a changes, b is outside the profile
            engine.infer({"a": np.ones((3, 4), np.float32), "b": np.ones((5, 4), np.float32)})
        y = engine.infer({"a": a, "b": b})["y"]
    assert y.shape == (2, 4) and (y == 3).all()


@needs_trt
def test_finding_20_an_fp32_plan_is_fp32(tmp_path):
    """An fp32 plan (TF32 cleared) against ONNX Runtime's FP32 on one input."""
    from edgert.runtime.engine import Engine
    from tests.tiny import classifier_bundle

    bundle = classifier_bundle(tmp_path, size=32)
    x = np.random.default_rng(0).normal(size=(1, 3, 32, 32)).astype(np.float32)
    with Engine.load(bundle, backend="onnxruntime", precision="fp32") as ort:
        want = ort.infer(x)
    with Engine.load(bundle, backend="tensorrt", precision="fp32") as trt:
        got = trt.infer(x)
        print(f"\n{trt.backend_reason}")
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
