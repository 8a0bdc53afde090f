"""A CUDA stream with async copies."""

from __future__ import annotations

import numpy as np

from .driver import pycuda_driver, translate

CU_STREAM_NON_BLOCKING = 1


class Stream:
    """A non-blocking stream (CU_STREAM_NON_BLOCKING): no implicit synchronisation with the legacy
    default stream, and while it is captured into a CUDA graph another thread's use of the
    default stream (a synchronous copy, ONNX Runtime's CUDA provider) neither fails nor breaks
    the capture, which a blocking stream's capture makes "unusable" for the whole process."""

    def __init__(self) -> None:
        self.cuda = pycuda_driver()
        self._stream = self.cuda.Stream(flags=CU_STREAM_NON_BLOCKING)
        self._blocking_event = None

    @property
    def handle(self) -> int:
        """The raw CUstream, for TensorRT's execute_async_v3 and the driver API."""
        return int(self._stream.handle)

    @property
    def pycuda(self):
        return self._stream

    def copy_htod(self, device_ptr: int, host: np.ndarray) -> None:
        try:
            self.cuda.memcpy_htod_async(device_ptr, host, self._stream)
        except Exception as exc:
            raise translate(exc, "a host-to-device copy") from exc

    def copy_dtoh(self, host: np.ndarray, device_ptr: int) -> None:
        try:
            self.cuda.memcpy_dtoh_async(host, device_ptr, self._stream)
        except Exception as exc:
            raise translate(exc, "a device-to-host copy") from exc

    def synchronize(self, blocking: bool = False) -> None:
        """Wait for the stream. ``blocking``: sleep in the driver until the GPU is done (an event
        with CU_EVENT_BLOCKING_SYNC) instead of spinning a CPU core, which is CUDA's default and
        costs power while waiting (what a power cap needs)."""
        try:
            if not blocking:
                self._stream.synchronize()
                return
            if self._blocking_event is None:
                flags = self.cuda.event_flags
                self._blocking_event = self.cuda.Event(flags.BLOCKING_SYNC | flags.DISABLE_TIMING)
            self._blocking_event.record(self._stream)
            self._blocking_event.synchronize()
        except Exception as exc:
            raise translate(exc, "stream synchronisation") from exc

    def free(self) -> None:
        """Drop the stream and its event; call with the context current (their destructors
        free them then, on this thread)."""
        self._blocking_event = None
        self._stream = None

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc) -> None:
        self.free()
