"""GPU buffer path vs raw PyCUDA, pinned bandwidth, CUDA graphs, GPU vs CPU preprocessing.

Needs PyCUDA and a CUDA device (run on the CUDA machine after `bash .device/gpu-check.sh`, with
the same PYTHONPATH). Targets (issue 3): our H2D 602 KB + kernel + D2H 4 KB + sync within 1.15x
of the same raw PyCUDA calls (raw measured ~32 us on an H200), with and without graphs; pinned
copy bandwidth >= 90 % of raw.

    python benchmarks/gpu_buffers.py [--json $OUT/gpu_buffers.json] [--iters 2000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from json_report import write_json

KERNEL = r"""
extern "C" __global__ void reduce_rows(const float* x, float* y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.f;
    for (int c = 0; c < cols; ++c) s += x[(size_t)r * cols + c];
    y[r] = s;
}
"""
IN_SHAPE = (1000, 150)  # 150,000 float32 = 600 KB in (a 224x224x3 image is 602 KB)
OUT_N = 1000  # 4 KB out


def median_us(fn, iters: int) -> float:
    for _ in range(50):
        fn()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples)) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", default="reports/gpu_buffers.json")
    ap.add_argument("--iters", type=int, default=2000)
    args = ap.parse_args()

    import pycuda.driver as cuda
    from pycuda.compiler import SourceModule

    from edgert.runtime import Preprocessing
    from edgert.runtime.cuda.driver import PrimaryContext
    from edgert.runtime.cuda.graph import CudaGraph
    from edgert.runtime.cuda.memory import DeviceBuffer, PinnedBuffer, TensorBuffers
    from edgert.runtime.cuda.preprocess_kernel import GpuPreprocessor
    from edgert.runtime.cuda.stream import Stream

    ctx = PrimaryContext.get(0)
    results: dict[str, float] = {}
    with ctx.active():
        fn = SourceModule(KERNEL, no_extern_c=True, options=["-O3"]).get_function("reduce_rows")
        rows, cols = IN_SHAPE
        x = np.random.default_rng(0).standard_normal(IN_SHAPE).astype(np.float32)
        block, grid = (256, 1, 1), ((rows + 255) // 256, 1, 1)

        # raw PyCUDA: the calls a hand-written loop makes
        raw_stream = cuda.Stream()
        raw_in = cuda.pagelocked_empty(IN_SHAPE, np.float32)
        raw_out = cuda.pagelocked_empty(OUT_N, np.float32)
        d_in, d_out = cuda.mem_alloc(x.nbytes), cuda.mem_alloc(OUT_N * 4)

        def raw():
            raw_in[:] = x
            cuda.memcpy_htod_async(d_in, raw_in, raw_stream)
            fn(
                d_in,
                d_out,
                np.int32(rows),
                np.int32(cols),
                block=block,
                grid=grid,
                stream=raw_stream,
            )
            cuda.memcpy_dtoh_async(raw_out, d_out, raw_stream)
            raw_stream.synchronize()

        # ours: TensorBuffers + Stream, as the TensorRT backend uses them
        stream = Stream()
        tin = TensorBuffers("x", IN_SHAPE, np.float32, zero_copy=ctx.zero_copy)
        tout = TensorBuffers("y", (OUT_N,), np.float32, zero_copy=ctx.zero_copy)

        def enqueue():
            tin.upload(x, stream)
            fn(
                np.uintp(tin.device_ptr),
                np.uintp(tout.device_ptr),
                np.int32(rows),
                np.int32(cols),
                block=block,
                grid=grid,
                stream=stream.pycuda,
            )
            return tout.download((OUT_N,), stream)

        def ours():
            enqueue()
            stream.synchronize()

        raw()
        ours()
        np.testing.assert_allclose(tout.host_view((OUT_N,)), raw_out, rtol=1e-5)
        results["raw_pycuda_us"] = median_us(raw, args.iters)
        results["edgert_buffers_us"] = median_us(ours, args.iters)

        graph = CudaGraph.capture(stream.handle, enqueue)

        def ours_graph():
            np.copyto(tin.host_view(IN_SHAPE), x)
            graph.launch(stream.handle)
            stream.synchronize()

        results["edgert_graph_us"] = median_us(ours_graph, args.iters)
        graph.free()

        # pinned bandwidth: 64 MiB H2D, raw vs our Stream.copy_htod
        big = 64 << 20
        hp = PinnedBuffer(big, np.uint8)
        dv = DeviceBuffer(big)

        def bw(copy) -> float:
            copy()
            t0 = time.perf_counter()
            for _ in range(20):
                copy()
            return 20 * big / (time.perf_counter() - t0) / 1e9

        results["raw_pinned_h2d_gbps"] = bw(
            lambda: (cuda.memcpy_htod_async(dv.ptr, hp.host, raw_stream), raw_stream.synchronize())
        )
        results["edgert_pinned_h2d_gbps"] = bw(
            lambda: (stream.copy_htod(dv.ptr, hp.host), stream.synchronize())
        )
        hp.free()
        dv.free()

        # preprocessing a 1920x1080 frame: GPU kernel (incl. upload) vs CPU
        frame = (np.random.default_rng(1).uniform(0, 255, (1080, 1920, 3))).astype(np.uint8)
        pre = Preprocessing(size=(640, 640), resize="letterbox", interpolation="bilinear")
        gpu = GpuPreprocessor(pre)
        out = DeviceBuffer(3 * 640 * 640 * 4)

        def gpu_pre():
            gpu(frame, out.ptr, stream)
            stream.synchronize()

        results["gpu_preprocess_1080p_us"] = median_us(gpu_pre, max(200, args.iters // 10))
        results["cpu_preprocess_1080p_us"] = median_us(lambda: pre.apply(frame), 50)
        results["cpu_preprocess_1080p_linear_us"] = median_us(
            lambda: Preprocessing(size=(640, 640), resize="letterbox").apply(frame), 50
        )
        gpu.free()
        out.free()
        tin.free()
        tout.free()

    results["ratio_buffers_vs_raw"] = results["edgert_buffers_us"] / results["raw_pycuda_us"]
    results["ratio_graph_vs_raw"] = results["edgert_graph_us"] / results["raw_pycuda_us"]
    results["bandwidth_fraction"] = (
        results["edgert_pinned_h2d_gbps"] / results["raw_pinned_h2d_gbps"]
    )
    print(f"{'measure':<34}{'value':>12}")
    for k, v in results.items():
        print(f"{k:<34}{v:>12.3f}")
    write_json(args.json, {"device": ctx.name, "zero_copy": ctx.zero_copy, "results": results})


if __name__ == "__main__":
    main()
