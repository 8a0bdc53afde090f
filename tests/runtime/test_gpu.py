"""GPU-only paths (PyCUDA on a CUDA device). Skipped cleanly where there is no CUDA; run them on a
CUDA machine with `bash .device/gpu-check.sh` (see the shared device README)."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest

from edgert.runtime import Preprocessing
from edgert.runtime.cuda.driver import availability

REASON = availability()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"no CUDA: {REASON}")]

ADD_ONE = r"""
extern "C" __global__ void add_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
"""


@pytest.fixture(scope="module")
def ctx():
    from edgert.runtime.cuda.driver import PrimaryContext

    return PrimaryContext.get(0)


@pytest.fixture(scope="module")
def add_one(ctx):
    from pycuda.compiler import SourceModule

    with ctx.active():
        return SourceModule(ADD_ONE, no_extern_c=True).get_function("add_one")


def launch(fn, ptr, n, stream):
    fn(
        np.uintp(ptr),
        np.int32(n),
        block=(256, 1, 1),
        grid=((n + 255) // 256, 1, 1),
        stream=stream.pycuda,
    )


def test_pinned_device_and_mapped_round_trip(ctx, add_one):
    from edgert.runtime.cuda.memory import DeviceBuffer, PinnedBuffer
    from edgert.runtime.cuda.stream import Stream

    n = 150_528  # a 224x224x3 float tensor
    data = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    with contextlib.ExitStack() as stack:  # Python 3.8 (JetPack 5): no parenthesised with
        stack.enter_context(ctx.active())
        stream = stack.enter_context(Stream())
        src = stack.enter_context(PinnedBuffer(n, np.float32))
        dst = stack.enter_context(PinnedBuffer(n, np.float32))
        with DeviceBuffer(data.nbytes) as dev:
            assert dev.ptr != 0 and dev.nbytes == data.nbytes
            src.host[:] = data
            stream.copy_htod(dev.ptr, src.host)
            launch(add_one, dev.ptr, n, stream)
            stream.copy_dtoh(dst.host, dev.ptr)
            stream.synchronize()
            np.testing.assert_allclose(dst.host, data + 1, rtol=1e-6)
        with PinnedBuffer(n, np.float32, mapped=True) as mapped:
            assert mapped.ptr != 0
            mapped.host[:] = data
            launch(add_one, mapped.ptr, n, stream)  # the kernel works on host memory directly
            stream.synchronize()
            np.testing.assert_allclose(mapped.host, data + 1, rtol=1e-6)


def test_tensor_buffers_zero_copy_and_copy_modes(ctx, add_one):
    from edgert.runtime.cuda.memory import TensorBuffers
    from edgert.runtime.cuda.stream import Stream

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for zero_copy in (False, True):
        with ctx.active(), Stream() as stream:
            buf = TensorBuffers("x", (8, 4), np.float32, zero_copy=zero_copy)
            assert buf.zero_copy == zero_copy and buf.capacity == 8 * 4 * 4
            buf.upload(x, stream)
            launch(add_one, buf.device_ptr, x.size, stream)
            view = buf.download(x.shape, stream)
            stream.synchronize()
            np.testing.assert_array_equal(view, x + 1)
            buf.free()


def test_graph_capture_and_replay(ctx, add_one):
    from edgert.runtime.cuda.graph import CudaGraph
    from edgert.runtime.cuda.memory import DeviceBuffer, PinnedBuffer
    from edgert.runtime.cuda.stream import Stream

    n = 1024
    with contextlib.ExitStack() as stack:
        stack.enter_context(ctx.active())
        stream = stack.enter_context(Stream())
        host = stack.enter_context(PinnedBuffer(n, np.float32))
        dev = stack.enter_context(DeviceBuffer(n * 4))
        host.host[:] = 0
        stream.copy_htod(dev.ptr, host.host)

        def work():
            launch(add_one, dev.ptr, n, stream)
            stream.copy_dtoh(host.host, dev.ptr)

        with CudaGraph.capture(stream.handle, work) as graph:
            stream.synchronize()
            assert host.host.max() == 0  # capture records, it does not run
            for expected in (1, 2, 3):
                graph.launch(stream.handle)
                stream.synchronize()
                assert (host.host == expected).all()


def test_graph_capture_failure_falls_back(ctx, add_one):
    from edgert.runtime.cuda.graph import CudaGraph, GraphCaptureFailed
    from edgert.runtime.cuda.memory import DeviceBuffer
    from edgert.runtime.cuda.stream import Stream

    n = 256
    with ctx.active(), Stream() as stream, DeviceBuffer(n * 4) as dev:
        pageable = np.zeros(n, np.float32)

        def illegal():  # a stream being captured cannot be synchronised (CUDA refuses it)
            stream.synchronize()

        with pytest.raises(GraphCaptureFailed):
            CudaGraph.capture(stream.handle, illegal)
        # the stream is still usable afterwards
        ctx.cuda.memcpy_htod(dev.ptr, pageable)
        launch(add_one, dev.ptr, n, stream)
        out = np.empty(n, np.float32)
        stream.synchronize()
        ctx.cuda.memcpy_dtoh(out, dev.ptr)
        assert (out == 1).all()


@pytest.mark.parametrize(
    "pre",
    [
        Preprocessing(
            size=(224, 224),
            resize="resize_crop",
            resize_short=256,
            interpolation="bilinear",
            mean=(0.485, 0.456, 0.406),
            std=(0.229, 0.224, 0.225),
        ),
        Preprocessing(size=(320, 320), resize="letterbox", interpolation="bilinear", layout="NHWC"),
        Preprocessing(
            size=(96, 160), resize="stretch", interpolation="bilinear", channel_order="BGR"
        ),
        Preprocessing(
            size=(64, 64),
            resize="stretch",
            interpolation="nearest",
            channel_order="GRAY",
            mean=(0.5,),
            std=(0.5,),
        ),
    ],
    ids=["resize_crop", "letterbox_nhwc", "stretch_bgr", "nearest_gray"],
)
def test_gpu_preprocessing_equals_cpu(ctx, pre):
    from edgert.runtime.cuda.memory import DeviceBuffer
    from edgert.runtime.cuda.preprocess_kernel import GpuPreprocessor
    from edgert.runtime.cuda.stream import Stream
    from edgert.runtime.sample_data import load_photo
    from tests.runtime.images.preprocess_reference import reference_apply

    frame = load_photo("chelsea")
    # the kernel computes in float: held to the float reference (the CPU path, which resizes
    # uint8 frames with OpenCV's fixed-point kernels, is within a level of it: test_preprocess_parity)
    want, t_cpu = reference_apply(pre, frame)
    assert pre.apply(frame)[1] == t_cpu
    gpu = GpuPreprocessor(pre)
    with ctx.active(), Stream() as stream, DeviceBuffer(want.nbytes) as out:
        t_gpu = gpu(frame, out.ptr, stream)
        got = np.empty_like(want)
        stream.copy_dtoh(got, out.ptr)
        stream.synchronize()
    gpu.free()
    assert t_gpu == t_cpu
    np.testing.assert_allclose(got, want, atol=1e-3)


def test_engine_style_loop_from_a_worker_thread(ctx, add_one):
    """Buffers made on the main thread, work queued from another thread on the primary context."""
    from edgert.runtime.cuda.memory import TensorBuffers
    from edgert.runtime.cuda.stream import Stream

    with ctx.active():
        stream = Stream()
        buf = TensorBuffers("x", (4, 1000), np.float32, zero_copy=ctx.zero_copy)
    results, errors = [], []

    def worker():
        try:
            with ctx.active():
                for i in range(20):
                    x = np.full((4, 1000), i, np.float32)
                    buf.upload(x, stream)
                    launch(add_one, buf.device_ptr, x.size, stream)
                    view = buf.download(x.shape, stream)
                    stream.synchronize()
                    results.append(float(view.mean()))
        except Exception as exc:  # noqa: BLE001 - reported to the main thread below
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(60)
    assert not errors, errors
    assert results == [float(i + 1) for i in range(20)]
    with ctx.active():
        buf.free()
        stream.free()
