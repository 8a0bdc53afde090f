"""A fake of edgert's own CUDA surface (``runtime/cuda``: ``PrimaryContext``, ``Stream``,
``TensorBuffers``, ``CudaGraph``) for running the TensorRT backend's set-up, inference and close on
stand-ins of each TensorRT version's real classes (tests/trt_fake.py; issue 51). It is the only
fake of edgert's own code the tests allow, because CUDA is absent here, and it is kept thin.

It behaves as CUDA does where edgert could get it wrong: "device memory" is numpy arrays at
made-up addresses, and a mapped (zero-copy) buffer is the host array itself; a stream queues its
work (copies, TensorRT's launch) and runs it at ``synchronize``, so a result read before the
stream synchronised is stale, and a copy reads the pinned host memory when it runs, not when it
was queued; work captured into a graph is recorded, not run, and replayed by ``launch``; every
allocation, copy, synchronisation and free needs the context current on the calling thread (a
CUDA call without one fails). Tests only.
"""

from __future__ import annotations

import contextlib
import itertools
import threading

import numpy as np


class NoContext(RuntimeError):
    """A CUDA call on a thread with no current context (PyCUDA's LogicError then)."""


class Device:
    """One fake GPU: its memory by address, its streams by handle, what is allocated."""

    def __init__(self, name: str = "Orin", cc: tuple = (8, 7), integrated: bool = False) -> None:
        self.name, self.cc, self.integrated = name, cc, integrated
        self.memory: dict[int, np.ndarray] = {}
        self.streams: dict[int, Stream] = {}
        self._addresses = itertools.count(0x7F00_0000, 0x10_0000)
        self._local = threading.local()
        self.graphs_live = 0

    def current(self, what: str) -> None:
        if not getattr(self._local, "depth", 0):
            raise NoContext(f"{what} with no CUDA context current on this thread")

    def push(self, step: int) -> None:
        self._local.depth = getattr(self._local, "depth", 0) + step

    def alloc(self, array: np.ndarray) -> int:
        self.current("an allocation")
        address = next(self._addresses)
        self.memory[address] = array.reshape(-1).view(np.uint8)
        return address

    def free(self, address: int) -> None:
        self.current("a free")
        del self.memory[address]

    def view(self, address: int, shape: tuple, dtype) -> np.ndarray:
        """``shape`` elements of ``dtype`` at ``address`` (what a kernel, TensorRT's, reads)."""
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return self.memory[address][:n].view(dtype).reshape(shape)


DEVICE = Device()


class PrimaryContext:
    def __init__(self, device: int = 0) -> None:
        self.index = device
        self.name, self.compute_capability = DEVICE.name, DEVICE.cc
        self.zero_copy = DEVICE.integrated

    @classmethod
    def get(cls, device: int = 0) -> PrimaryContext:
        return cls(device)

    @contextlib.contextmanager
    def active(self):
        DEVICE.push(1)
        try:
            yield self
        finally:
            DEVICE.push(-1)


class Stream:
    def __init__(self) -> None:
        DEVICE.current("creating a stream")
        self.handle = next(DEVICE._addresses)
        self.pycuda = self
        self.pending: list = []
        self.capture: list | None = None  # the work recorded while captured into a graph
        DEVICE.streams[self.handle] = self

    def queue(self, work) -> None:
        """``work`` (a callable) put on the stream: run at synchronize, or recorded in capture."""
        DEVICE.current("work on a stream")
        (self.capture if self.capture is not None else self.pending).append(work)

    def copy_htod(self, device_ptr: int, host: np.ndarray) -> None:
        self.queue(lambda: np.copyto(DEVICE.view(device_ptr, host.shape, host.dtype), host))

    def copy_dtoh(self, host: np.ndarray, device_ptr: int) -> None:
        self.queue(lambda: np.copyto(host, DEVICE.view(device_ptr, host.shape, host.dtype)))

    def synchronize(self, blocking: bool = False) -> None:
        DEVICE.current("a stream synchronisation")
        work, self.pending = self.pending, []
        for w in work:
            w()

    def free(self) -> None:
        DEVICE.current("freeing a stream")
        DEVICE.streams.pop(self.handle, None)


class TensorBuffers:
    """runtime/cuda/memory.TensorBuffers' interface over fake memory."""

    def __init__(self, name: str, max_shape: tuple, dtype, zero_copy: bool) -> None:
        self.name, self.dtype, self.max_shape = name, np.dtype(dtype), tuple(max_shape)
        self.capacity = int(np.prod(self.max_shape)) * self.dtype.itemsize
        self.fallback_reason, self.zero_copy = None, zero_copy
        self.host = np.zeros(int(np.prod(self.max_shape)), self.dtype)
        self._host_ptr = DEVICE.alloc(self.host)  # pinned (and mapped when zero-copy)
        self._device_ptr = None if zero_copy else DEVICE.alloc(np.zeros(self.capacity, np.uint8))

    @property
    def device_ptr(self) -> int:
        return self._host_ptr if self.zero_copy else self._device_ptr

    def host_view(self, shape: tuple) -> np.ndarray:
        return self.host[: int(np.prod(shape))].reshape(shape)

    def upload(self, array: np.ndarray, stream: Stream) -> None:
        view = self.host_view(array.shape)
        np.copyto(view, array, casting="no")
        if not self.zero_copy:
            stream.copy_htod(self._device_ptr, view)

    def download(self, shape: tuple, stream: Stream) -> np.ndarray:
        view = self.host_view(shape)
        if not self.zero_copy:
            stream.copy_dtoh(view, self._device_ptr)
        return view

    def free(self) -> None:
        for address in (self._host_ptr, self._device_ptr):
            if address is not None:
                DEVICE.free(address)
        self._host_ptr = self._device_ptr = None


class GraphCaptureFailed(RuntimeError):
    pass


class CudaGraph:
    fail_capture: str | None = None  # set: the next capture fails with this reason

    def __init__(self, work: list) -> None:
        self.work = work
        DEVICE.graphs_live += 1

    @classmethod
    def capture(cls, stream_handle: int, enqueue) -> CudaGraph:
        stream = DEVICE.streams[stream_handle]
        stream.capture = []
        try:
            enqueue()
        finally:
            work, stream.capture = stream.capture, None
        if cls.fail_capture:
            reason, cls.fail_capture = cls.fail_capture, None
            raise GraphCaptureFailed(reason)
        return cls(work)

    def launch(self, stream_handle: int) -> None:
        for w in self.work:
            DEVICE.streams[stream_handle].queue(w)

    def free(self) -> None:
        DEVICE.current("freeing a graph")
        if self.work is not None:
            DEVICE.graphs_live -= 1
        self.work = None


def install(device: Device) -> None:
    """edgert's ``runtime/cuda`` surface replaced by this fake, on ``device``."""
    global DEVICE
    DEVICE = device
    from edgert.runtime.cuda import driver, graph, memory, stream

    driver.PrimaryContext = PrimaryContext
    stream.Stream = Stream
    memory.TensorBuffers = TensorBuffers
    graph.CudaGraph = CudaGraph
    graph.GraphCaptureFailed = GraphCaptureFailed
    graph.clear_runtime_error = lambda: 0
