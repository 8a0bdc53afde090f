"""PyCUDA access and the device's primary context (shared with TensorRT and other libraries)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from ..errors import BackendUnavailable, CudaError, EdgertError, first_line

PIP_LINE = "pip install 'edgert[cuda]' (on Jetson build PyCUDA against JetPack's CUDA)"


def pycuda_driver():
    """``pycuda.driver``, initialised; BackendUnavailable with the reason when it cannot be."""
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        raise BackendUnavailable(import_failure(exc)) from exc
    try:
        cuda.init()
    except Exception as exc:  # pycuda.driver.Error: no driver, no device
        raise BackendUnavailable(f"CUDA cannot be initialised: {exc}") from exc
    if cuda.Device.count() == 0:
        raise BackendUnavailable("CUDA reports no devices")
    return cuda


def import_failure(exc: ImportError) -> str:
    """Why ``import pycuda.driver`` failed, in one sentence: not installed, or installed but its
    compiled part cannot load (built against a newer numpy than the one here, as a PyCUDA wheel
    built in isolation on Python 3.8 is against numpy 1.24, or against another CUDA)."""
    missing = isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "pycuda"
    if missing:
        return f"PyCUDA is not installed: {PIP_LINE}"
    return (
        f"PyCUDA is installed but cannot be loaded ({first_line(exc)}); rebuild it against this "
        "numpy and CUDA: pip install --no-build-isolation --force-reinstall pycuda"
    )


def availability() -> str | None:
    """None when PyCUDA and a CUDA device are usable, else why not."""
    try:
        pycuda_driver()
    except BackendUnavailable as exc:
        return str(exc)
    return None


class PrimaryContext:
    """The primary context of one device, retained once and pushed/popped per thread.

    Like ``pycuda.autoprimaryctx`` but not bound to the importing thread: any thread can run GPU
    work inside ``with ctx.active():``. TensorRT uses the same primary context.
    """

    _lock = threading.Lock()
    _retained: dict[int, PrimaryContext] = {}

    def __init__(self, device: int = 0) -> None:
        cuda = pycuda_driver()
        if not 0 <= device < cuda.Device.count():
            raise BackendUnavailable(
                f"CUDA device {device} does not exist ({cuda.Device.count()} present)"
            )
        self.cuda = cuda
        self.index = device
        self.device = cuda.Device(device)
        self.context = self.device.retain_primary_context()
        attrs = cuda.device_attribute
        self.integrated = bool(self.device.get_attribute(attrs.INTEGRATED))
        self.can_map_host_memory = bool(self.device.get_attribute(attrs.CAN_MAP_HOST_MEMORY))
        self.name = self.device.name()
        self.compute_capability = self.device.compute_capability()

    @classmethod
    def get(cls, device: int = 0) -> PrimaryContext:
        with cls._lock:
            ctx = cls._retained.get(device)
            if ctx is None:
                ctx = cls._retained[device] = cls(device)
            return ctx

    @property
    def zero_copy(self) -> bool:
        """Integrated GPU (Jetson) that can map pinned host memory: no copies needed."""
        return self.integrated and self.can_map_host_memory

    @contextlib.contextmanager
    def active(self) -> Iterator[PrimaryContext]:
        """Make this context current in the calling thread for the block (push/pop)."""
        self.context.push()
        try:
            yield self
        finally:
            self.cuda.Context.pop()


def translate(exc: Exception, what: str, nbytes: int | None = None) -> EdgertError:
    """A PyCUDA exception as one sentence; out-of-memory says how much was asked."""
    text = first_line(exc)
    if type(exc).__name__ == "MemoryError" or "out of memory" in text.lower():
        size = f" {nbytes / 2**20:.1f} MiB" if nbytes is not None else ""
        return CudaError(f"CUDA out of memory while allocating{size} for {what}")
    return CudaError(f"CUDA error in {what}: {text}")
