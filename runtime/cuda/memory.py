"""Pinned host, device and mapped (zero-copy) buffers with explicit lifetimes.

Each buffer exposes ``.ptr`` (a device address usable by kernels and TensorRT), ``.nbytes``,
``.free()`` and works as a context manager. Pinned and mapped buffers also expose ``.host``, a
numpy array over the same memory.
"""

from __future__ import annotations

import numpy as np

from .driver import pycuda_driver, translate


class _Buffer:
    ptr: int
    nbytes: int

    def free(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.free()


class DeviceBuffer(_Buffer):
    """``nbytes`` of device memory (cuMemAlloc)."""

    def __init__(self, nbytes: int) -> None:
        cuda = pycuda_driver()
        self.nbytes = int(nbytes)
        try:
            self._alloc = cuda.mem_alloc(max(self.nbytes, 1))
        except Exception as exc:
            raise translate(exc, "a device buffer", self.nbytes) from exc
        self.ptr = int(self._alloc)

    def free(self) -> None:
        alloc, self._alloc = getattr(self, "_alloc", None), None
        if alloc is not None:
            alloc.free()
            self.ptr = 0


class PinnedBuffer(_Buffer):
    """Page-locked host memory (fast, async copies). ``mapped=True`` also maps it into the device
    address space (cuMemHostAlloc with DEVICEMAP): on integrated GPUs kernels read it directly."""

    def __init__(self, shape: tuple[int, ...] | int, dtype, mapped: bool = False) -> None:
        cuda = pycuda_driver()
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        flags = cuda.host_alloc_flags.DEVICEMAP if mapped else 0
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        try:
            self.host = cuda.pagelocked_empty(shape, dtype, mem_flags=flags)
        except Exception as exc:
            raise translate(exc, "a pinned host buffer", nbytes) from exc
        self.nbytes = self.host.nbytes
        self.mapped = mapped
        self.ptr = int(self.host.base.get_device_pointer()) if mapped else 0

    def free(self) -> None:
        host, self.host = getattr(self, "host", None), None
        if host is not None and host.base is not None:
            host.base.free()
            self.ptr = 0


class TensorBuffers:
    """Host + device memory for one I/O tensor, sized for its largest shape.

    ``zero_copy``: one mapped pinned buffer serves both sides (Jetson); no copies are issued.
    Otherwise a pinned host buffer and a device buffer with async copies on the given stream.
    If mapping fails, falls back to copies and records why in ``fallback_reason``.
    """

    def __init__(self, name: str, max_shape: tuple[int, ...], dtype, zero_copy: bool) -> None:
        self.name = name
        self.dtype = np.dtype(dtype)
        self.max_shape = tuple(max_shape)
        self.capacity = int(np.prod(self.max_shape)) * self.dtype.itemsize
        self.fallback_reason: str | None = None
        self.zero_copy = False
        self.device: DeviceBuffer | None = None
        if zero_copy:
            try:
                self.pinned = PinnedBuffer(int(np.prod(self.max_shape)), self.dtype, mapped=True)
                self.zero_copy = True
            except Exception as exc:  # noqa: BLE001 - fall back to copies, say why
                self.fallback_reason = f"mapping pinned memory failed ({exc}); using copies"
        if not self.zero_copy:
            self.pinned = PinnedBuffer(int(np.prod(self.max_shape)), self.dtype)
            self.device = DeviceBuffer(self.capacity)

    @property
    def device_ptr(self) -> int:
        return self.pinned.ptr if self.zero_copy else self.device.ptr

    def host_view(self, shape: tuple[int, ...]) -> np.ndarray:
        """The first prod(shape) elements of the host buffer, shaped."""
        n = int(np.prod(shape))
        return self.pinned.host[:n].reshape(shape)

    def upload(self, array: np.ndarray, stream) -> None:
        """Copy ``array`` into the pinned buffer, then (unless zero-copy) to the device, async."""
        view = self.host_view(array.shape)
        np.copyto(view, array, casting="no")
        if not self.zero_copy:
            stream.copy_htod(self.device.ptr, view)

    def download(self, shape: tuple[int, ...], stream) -> np.ndarray:
        """Queue the device -> pinned copy (unless zero-copy); read the view after the stream syncs."""
        view = self.host_view(shape)
        if not self.zero_copy:
            stream.copy_dtoh(view, self.device.ptr)
        return view

    def free(self) -> None:
        if self.device is not None:
            self.device.free()
        self.pinned.free()
