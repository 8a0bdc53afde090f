"""What the TensorRT modules share: importing TensorRT, and one logger for the whole process.

TensorRT's plugin library keeps the raw pointer of the logger given to
``trt.init_libnvinfer_plugins``; a logger that belongs to one engine dangles once that engine is
collected. So there is one logger, created on first use and kept for the life of the process, and
the plugins are initialised once with it. Each operation reads the errors logged since its own
:meth:`ProcessLogger.mark`.
"""

from __future__ import annotations

import collections
import logging
import threading

from ..errors import BackendUnavailable

log = logging.getLogger(__name__)

_lock = threading.Lock()
_logger = None
_plugins_ready = False


def import_tensorrt():
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise BackendUnavailable(
            "TensorRT is not importable (it comes with JetPack or NVIDIA's TensorRT packages, not pip)"
        ) from exc
    return trt


class ErrorLog:
    """The errors TensorRT logged, numbered, the last ``keep`` of them."""

    def __init__(self, keep: int = 200) -> None:
        self._items: collections.deque = collections.deque(maxlen=keep)
        self._count = 0
        self._lock = threading.Lock()

    def add(self, message: str) -> None:
        with self._lock:
            self._count += 1
            self._items.append((self._count, message))

    def mark(self) -> int:
        with self._lock:
            return self._count

    def since(self, mark: int) -> list[str]:
        with self._lock:
            return [m for n, m in self._items if n > mark]


def process_logger():
    """The one TensorRT logger of this process (an ``ILogger`` with ``mark()`` / ``since()``)."""
    global _logger
    with _lock:
        if _logger is None:
            trt = import_tensorrt()

            class ProcessLogger(trt.ILogger):
                def __init__(self) -> None:
                    trt.ILogger.__init__(self)
                    self.errors = ErrorLog()
                    self.warnings = ErrorLog()

                def mark(self) -> tuple[int, int]:
                    return self.errors.mark(), self.warnings.mark()

                def since(self, mark: tuple[int, int]) -> list[str]:
                    """The errors logged since ``mark``."""
                    return self.errors.since(mark[0])

                def warnings_since(self, mark: tuple[int, int]) -> list[str]:
                    return self.warnings.since(mark[1])

                def log(self, severity, msg) -> None:
                    if severity in (
                        trt.ILogger.Severity.ERROR,
                        trt.ILogger.Severity.INTERNAL_ERROR,
                    ):
                        self.errors.add(str(msg))
                        log.debug("TensorRT: %s", msg)
                    elif severity == trt.ILogger.Severity.WARNING:
                        self.warnings.add(str(msg))
                        # the warnings a user must see (a plan from another model of device,
                        # DLA layers falling back to the GPU) at warning level, the rest at debug
                        level = logging.WARNING if warning_matters(str(msg)) else logging.DEBUG
                        log.log(level, "TensorRT warning: %s", msg)

            _logger = ProcessLogger()
        return _logger


# TensorRT warnings that change what the user gets: said at warning level (the rest at debug)
WARNINGS_THAT_MATTER = (
    "different models of devices",  # a plan built on another module of the same GPU family
    "falling back to gpu",  # a layer DLA cannot run
    "not supported on dla",
    "dla does not support",
    "missing scale and zero-point",  # INT8 calibration that leaves a tensor in FP16
)


def warning_matters(message: str) -> bool:
    text = message.lower()
    return any(pattern in text for pattern in WARNINGS_THAT_MATTER)


def init_plugins() -> None:
    """``trt.init_libnvinfer_plugins`` once per process, with the process-wide logger."""
    global _plugins_ready
    logger = process_logger()
    with _lock:
        if not _plugins_ready:
            import_tensorrt().init_libnvinfer_plugins(logger, "")
            _plugins_ready = True
