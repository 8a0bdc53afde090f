"""CUDA graphs through the driver API with ctypes (PyCUDA has no graph API).

    graph = CudaGraph.capture(stream, lambda: enqueue_work(stream))   # raises GraphCaptureFailed
    graph.launch(stream)

Capture uses thread-local mode, so other threads' CUDA calls do not break it. The calls are the CUDA
driver API's cuStreamBeginCapture_v2 / cuStreamEndCapture / cuGraphInstantiateWithFlags /
cuGraphLaunch on a PyCUDA stream's handle; tests/runtime/test_gpu.py (scripts/gpu-check.sh) checks
capture, replay and the fallback on a CUDA machine.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from ..errors import GraphCaptureFailed

CAPTURE_MODE_THREAD_LOCAL = 1


_lib = None


def libcuda():
    global _lib
    if _lib is None:
        try:
            _lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise GraphCaptureFailed("libcuda.so.1 is not available for CUDA graphs") from exc
        vp = ctypes.c_void_p
        _lib.cuStreamBeginCapture_v2.argtypes = [vp, ctypes.c_int]
        _lib.cuStreamEndCapture.argtypes = [vp, ctypes.POINTER(vp)]
        _lib.cuGraphInstantiateWithFlags.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_ulonglong]
        _lib.cuGraphLaunch.argtypes = [vp, vp]
        _lib.cuGraphExecDestroy.argtypes = [vp]
        _lib.cuGraphDestroy.argtypes = [vp]
    return _lib


def check(rc: int, what: str) -> None:
    if rc != 0:
        lib = libcuda()
        msg = ctypes.c_char_p()
        text = "unknown error"
        if lib.cuGetErrorString(rc, ctypes.byref(msg)) == 0 and msg.value:
            text = msg.value.decode()
        raise GraphCaptureFailed(f"{what} failed (CUresult {rc}: {text})")


def clear_runtime_error() -> int:
    """Clear the CUDA runtime's last error (``cudaGetLastError``) in the libcudart this process
    loaded (TensorRT's), as NVIDIA's trtexec does after a failed capture; the error's code, 0
    when none was pending or no shared libcudart is loaded (a runtime linked statically into a
    library keeps its own error state, out of reach here)."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "libcudart.so" in line})
    except OSError:
        return 0
    code = 0
    for path in paths:
        try:
            lib = ctypes.CDLL(path)  # already loaded: the same library, the same error state
            code = code or int(lib.cudaGetLastError())
        except (OSError, AttributeError):
            continue
    return code


class CudaGraph:
    """An instantiated graph; ``launch`` replays the captured work on a stream."""

    def __init__(self, graph: ctypes.c_void_p, exec_: ctypes.c_void_p) -> None:
        self._graph = graph
        self._exec = exec_

    @classmethod
    def capture(cls, stream_handle: int, enqueue: Callable[[], object]) -> CudaGraph:
        """Record what ``enqueue`` puts on the stream into a graph. Raises GraphCaptureFailed (and
        leaves the stream usable) when capture is not possible."""
        lib = libcuda()
        stream = ctypes.c_void_p(stream_handle)
        check(
            lib.cuStreamBeginCapture_v2(stream, CAPTURE_MODE_THREAD_LOCAL),
            "cuStreamBeginCapture_v2",
        )
        graph = ctypes.c_void_p()
        enqueue_error: BaseException | None = None
        try:
            enqueue()
        except BaseException as exc:  # noqa: BLE001 - capture must be ended whatever happened
            enqueue_error = exc
        rc = lib.cuStreamEndCapture(stream, ctypes.byref(graph))
        if enqueue_error is not None:
            if graph.value:
                lib.cuGraphDestroy(graph)
            raise GraphCaptureFailed(
                f"work failed during stream capture: {enqueue_error}"
            ) from enqueue_error
        check(rc, "cuStreamEndCapture")
        exec_ = ctypes.c_void_p()
        rc = lib.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, 0)
        if rc != 0:
            lib.cuGraphDestroy(graph)
            check(rc, "cuGraphInstantiateWithFlags")
        return cls(graph, exec_)

    def launch(self, stream_handle: int) -> None:
        check(libcuda().cuGraphLaunch(self._exec, ctypes.c_void_p(stream_handle)), "cuGraphLaunch")

    def free(self) -> None:
        lib = libcuda()
        if self._exec is not None and self._exec.value:
            lib.cuGraphExecDestroy(self._exec)
        if self._graph is not None and self._graph.value:
            lib.cuGraphDestroy(self._graph)
        self._exec = self._graph = None

    def __enter__(self) -> CudaGraph:
        return self

    def __exit__(self, *exc) -> None:
        self.free()
