"""GPU preprocessing: one fused kernel from a uint8 HWC frame to the normalised float input.

Bilinear (or nearest) resize at pixel centres, resize+centre-crop / letterbox / stretch geometry,
channel swap, ``(x * scale - mean) / std`` and NCHW or NHWC layout, written straight into a device
pointer (the engine's input buffer). The geometry comes from the CPU path's own :class:`Transform`,
so both paths agree for ``interpolation`` ``bilinear`` and ``nearest``: the kernel computes
bilinear in float (within 1e-3 of the float reference, checked by a GPU test); the CPU path
resizes uint8 frames with OpenCV's fixed-point kernel, within one level (1/255 before
normalisation) of it, and nearest is the same integer formula on both. The CPU path's
``linear`` averages when shrinking (antialiasing), which this kernel does not do: it refuses
such a manifest rather than silently computing something else.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..images.preprocess import Preprocessing, Transform
from .driver import PrimaryContext, translate
from .memory import DeviceBuffer, PinnedBuffer

KERNEL_SOURCE = r"""
extern "C" __global__ void edgert_preprocess(
    const unsigned char* __restrict__ src, int src_h, int src_w, int src_c,
    float* __restrict__ dst, int dst_h, int dst_w, int out_c, int nhwc,
    float sx, float sy, float ox, float oy,
    int x0, int x1, int y0, int y1, int rw, int rh, int iox, int ioy,
    int nearest, int swap_rb, int gray,
    float scale, float m0, float m1, float m2, float is0, float is1, float is2, float pad)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= dst_w || y >= dst_h) return;
    float mean[3] = {m0, m1, m2};
    float inv_std[3] = {is0, is1, is2};
    float px[3] = {pad, pad, pad};
    if (x >= x0 && x < x1 && y >= y0 && y < y1) {
        float fx = (x + 0.5f - ox) / sx - 0.5f;
        float fy = (y + 0.5f - oy) / sy - 0.5f;
        if (nearest) {
            /* floor((i + 0.5) * src / scaled) in exact integers, as the CPU path
               (Preprocessing's nearest_index); float32 picked the neighbour for 11-15 % of
               pixels at camera sizes */
            long long i = x - iox, j = y - ioy;
            int ix = (int)min(max((2 * i + 1) * src_w / (2LL * rw), 0LL), (long long)(src_w - 1));
            int iy = (int)min(max((2 * j + 1) * src_h / (2LL * rh), 0LL), (long long)(src_h - 1));
            const unsigned char* p = src + ((size_t)iy * src_w + ix) * src_c;
            for (int c = 0; c < 3; ++c) px[c] = p[c < src_c ? c : 0];
        } else {
            fx = fminf(fmaxf(fx, 0.f), (float)(src_w - 1));
            fy = fminf(fmaxf(fy, 0.f), (float)(src_h - 1));
            int ix = (int)floorf(fx), iy = (int)floorf(fy);
            int ix1 = min(ix + 1, src_w - 1), iy1 = min(iy + 1, src_h - 1);
            float ax = fx - ix, ay = fy - iy;
            const unsigned char* p00 = src + ((size_t)iy * src_w + ix) * src_c;
            const unsigned char* p01 = src + ((size_t)iy * src_w + ix1) * src_c;
            const unsigned char* p10 = src + ((size_t)iy1 * src_w + ix) * src_c;
            const unsigned char* p11 = src + ((size_t)iy1 * src_w + ix1) * src_c;
            for (int c = 0; c < 3; ++c) {
                int k = c < src_c ? c : 0;
                float top = p00[k] + (p01[k] - (float)p00[k]) * ax;
                float bot = p10[k] + (p11[k] - (float)p10[k]) * ax;
                px[c] = top + (bot - top) * ay;
            }
        }
    }
    size_t plane = (size_t)dst_h * dst_w;
    size_t pix = (size_t)y * dst_w + x;
    if (gray) {  /* BGR in, luminance out (ITU-R 601, as the CPU path) */
        float v = 0.114f * px[0] + 0.587f * px[1] + 0.299f * px[2];
        dst[pix] = (v * scale - mean[0]) * inv_std[0];
        return;
    }
    for (int c = 0; c < out_c; ++c) {
        float v = px[swap_rb ? 2 - c : c];
        v = (v * scale - mean[c]) * inv_std[c];
        if (nhwc) dst[pix * out_c + c] = v; else dst[c * plane + pix] = v;
    }
}
"""

_modules: dict = {}  # device -> the kernel compiled and loaded in that device's context


def _kernel(device: int):
    """The kernel in ``device``'s context (call with that context current): a module is loaded
    into one context, and launching device 0's function on device 1 fails."""
    if device not in _modules:
        from pycuda.compiler import SourceModule

        _modules[device] = SourceModule(KERNEL_SOURCE, no_extern_c=True, options=["-O3"])
    return _modules[device].get_function("edgert_preprocess")


class GpuPreprocessor:
    """Preprocess frames on the GPU into a device pointer; reuses its staging buffers."""

    BLOCK = (16, 16, 1)

    def __init__(self, pre: Preprocessing, device: int = 0) -> None:
        if -1 in pre.size:
            raise ShapeError(
                "GPU preprocessing writes inputs of one size; this model takes images of any size "
                "(use the CPU path)"
            )
        if pre.interpolation not in ("bilinear", "nearest"):
            raise ShapeError(
                f"GPU preprocessing computes bilinear or nearest resizing; this model records "
                f"{pre.interpolation!r} (use the CPU path, or export with interpolation 'bilinear')"
            )
        if pre.dtype != "float32":
            raise ShapeError(
                f"GPU preprocessing writes float32 inputs; the model takes {pre.dtype}"
            )
        self.pre = pre
        self.ctx = PrimaryContext.get(device)
        self._staging: PinnedBuffer | None = None
        self._src: DeviceBuffer | None = None
        self._done = None  # an event after the last call's upload and kernel, on its stream
        with self.ctx.active():
            self._fn = _kernel(device)

    @property
    def output_shape(self) -> tuple[int, ...]:
        h, w = self.pre.size
        c = self.pre.channels
        return (c, h, w) if self.pre.layout == "NCHW" else (h, w, c)

    def _wait(self) -> None:
        """The previous call's copy and kernel, done: its staging buffer is read by the copy
        until then, and must not be overwritten or freed before (a caller need not sync)."""
        if self._done is not None:
            self._done.synchronize()

    def _ensure(self, nbytes: int) -> None:
        self._wait()
        if self._src is None or self._src.nbytes < nbytes:
            self.free()
            self._staging = PinnedBuffer(nbytes, np.uint8)
            self._src = DeviceBuffer(nbytes)

    def __call__(self, frame: np.ndarray, out_ptr: int, stream) -> Transform:
        """Queue upload + kernel on ``stream``; ``out_ptr`` receives one image (no batch axis)."""
        frame = np.asarray(frame)
        if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] not in (1, 3, 4):
            raise ShapeError(
                f"GPU preprocessing takes uint8 HxWxC frames; got {frame.dtype} {list(frame.shape)}"
            )
        geometry = self.pre.geometry(frame.shape[:2])
        h, w, c = frame.shape
        with self.ctx.active():
            self._ensure(frame.nbytes)
            staging = self._staging.host[: frame.nbytes]
            np.copyto(staging, frame.reshape(-1))
            stream.copy_htod(self._src.ptr, staging)
            th, tw = self.pre.size
            x0, y0, x1, y1 = _content_box(geometry, self.pre)
            mean = list(self.pre.mean) + [0.0] * (3 - len(self.pre.mean))
            inv = [1.0 / s for s in self.pre.std] + [1.0] * (3 - len(self.pre.std))
            swap = int(
                self.pre.channel_order != "GRAY" and self.pre.channel_order != self.pre.input_order
            )
            grid = (
                (tw + self.BLOCK[0] - 1) // self.BLOCK[0],
                (th + self.BLOCK[1] - 1) // self.BLOCK[1],
                1,
            )
            i32, f32 = np.int32, np.float32
            try:
                self._fn(
                    np.uintp(self._src.ptr),
                    i32(h),
                    i32(w),
                    i32(c),
                    np.uintp(out_ptr),
                    i32(th),
                    i32(tw),
                    i32(self.pre.channels),
                    i32(self.pre.layout == "NHWC"),
                    f32(geometry.sx),
                    f32(geometry.sy),
                    f32(geometry.ox),
                    f32(geometry.oy),
                    i32(x0),
                    i32(x1),
                    i32(y0),
                    i32(y1),
                    *(i32(v) for v in _nearest_args(geometry)),
                    i32(self.pre.interpolation == "nearest"),
                    i32(swap),
                    i32(self.pre.channel_order == "GRAY"),
                    f32(self.pre.scale),
                    *(f32(v) for v in mean[:3]),
                    *(f32(v) for v in inv[:3]),
                    f32(self.pre.pad_value),
                    block=self.BLOCK,
                    grid=grid,
                    stream=stream.pycuda,
                )
            except Exception as exc:
                raise translate(exc, "the preprocessing kernel") from exc
            if self._done is None:
                from .driver import pycuda_driver

                cuda = pycuda_driver()
                self._done = cuda.Event(cuda.event_flags.DISABLE_TIMING)
            self._done.record(stream.pycuda)
        return geometry

    def free(self) -> None:
        """Free the staging buffers once the last call's work is done (on this thread, with the
        context current)."""
        with self.ctx.active():
            self._wait()
            if self._src is not None:
                self._src.free()
                self._staging.free()
            self._src = self._staging = self._done = None


def _nearest_args(t: Transform) -> tuple[int, int, int, int]:
    """(scaled width, scaled height, x offset, y offset) in whole pixels: the kernel's nearest
    branch maps model pixel x to source ``((2 (x - ox) + 1) * src_w) // (2 * scaled_w)``."""
    nw, nh = t.resized_wh
    return nw, nh, round(t.ox), round(t.oy)


def kernel_nearest_index(x: np.ndarray, offset: int, src_len: int, scaled_len: int) -> np.ndarray:
    """The kernel's nearest-neighbour index arithmetic, in numpy (64-bit integers, C division of
    non-negative numbers), so the CPU can check it against the CPU path for any camera size."""
    i = np.asarray(x, dtype=np.int64) - offset
    return np.clip((2 * i + 1) * src_len // (2 * scaled_len), 0, src_len - 1)


def _content_box(t: Transform, pre: Preprocessing) -> tuple[int, int, int, int]:
    """Model-pixel box (x0, y0, x1, y1) covered by the image; the rest is letterbox padding."""
    th, tw = pre.size
    if pre.resize != "letterbox":
        return 0, 0, tw, th
    nw, nh = t.resized_wh
    return int(t.ox), int(t.oy), int(t.ox) + nw, int(t.oy) + nh
