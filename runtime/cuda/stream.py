"""A CUDA stream with async copies."""

from __future__ import annotations

import numpy as np

from .driver import pycuda_driver, translate


class Stream:
    def __init__(self) -> None:
        self.cuda = pycuda_driver()
        self._stream = self.cuda.Stream()

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

    def synchronize(self) -> None:
        try:
            self._stream.synchronize()
        except Exception as exc:
            raise translate(exc, "stream synchronisation") from exc

    def free(self) -> None:
        self._stream = None

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc) -> None:
        self.free()
