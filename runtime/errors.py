"""The one exception tree of edgert.

Every error a user can cause is an :class:`EdgertError` carrying one clear sentence. The CLI prints
that sentence and exits with ``exit_code``; third-party errors are translated at the boundary with
``raise ... from exc`` so ``--debug`` can still show where they came from.
"""

from __future__ import annotations

import re


class EdgertError(Exception):
    """Base of all edgert errors: the message is one sentence meant for the user."""

    exit_code = 2


class SignalStop(KeyboardInterrupt):
    """SIGTERM or SIGHUP ending work the way Ctrl-C does (every ``except KeyboardInterrupt`` still
    finishes outputs). Not KeyboardInterrupt itself: CPython ends a ``python -m`` process with
    SIGINT, whatever its exit code, once a KeyboardInterrupt of exactly that type has left code run
    through ``PyRun_String`` (C extensions do, pybind11's ``py::exec``), even if caught later."""


class ModelError(EdgertError):
    """A model file or factory is missing, corrupt, or not what it claims to be."""


class ShapeError(EdgertError):
    """An input has the wrong name, shape or dtype for the model."""


class ExportError(EdgertError):
    """PyTorch -> ONNX export failed (unsupported operator, tracing failure, ...)."""


class ParityError(ExportError):
    """The exported ONNX model does not match PyTorch within tolerance."""

    def __init__(self, message: str, report: object | None = None) -> None:
        super().__init__(message)
        self.report = report


class BundleError(EdgertError):
    """A bundle folder or its manifest is missing, corrupt or of an unknown format."""


class OutputError(EdgertError):
    """An output path cannot be written (permissions, full disk, not a bundle folder)."""


class EngineMismatch(EdgertError):
    """A TensorRT plan was built for another GPU or TensorRT version."""


class BackendUnavailable(EdgertError):
    """A backend was asked for but cannot run here; the message says what to install."""

    exit_code = 1


class MissingDependency(EdgertError):
    """An optional dependency is not installed; the message holds the exact pip line."""

    exit_code = 1


class SourceError(EdgertError):
    """A camera, stream, video or image source cannot be opened or stopped delivering frames."""


class SensorError(EdgertError):
    """A power sensor is absent, unreadable or vanished."""


class GeometryError(SourceError):
    """A --line or --zone that cannot be one."""


class StreamLost(SourceError):
    """A network stream ended, failed or stalled (``stalled``); the source reconnects."""

    def __init__(self, reason: str, stalled: bool = False) -> None:
        super().__init__(reason)
        self.stalled = stalled


class CudaError(EdgertError):
    """A CUDA call failed (out of memory, launch failure, ...)."""


class GraphCaptureFailed(EdgertError):
    """Stream capture or graph instantiation failed; run the work without a graph instead."""


class BuildError(EdgertError):
    """TensorRT could not parse or build the network."""


class GateFailed(EdgertError):
    """The quantized model (or plan) is further from FP32 than the gate allows."""


def escape_controls(text: str) -> str:
    """``text`` with its control characters escaped (``\\r``, ``\\n``, an ANSI escape): what a
    user put in a URI, a file name or a model's metadata cannot start a line of its own, or act
    on a terminal, in a log, a message or on a wire."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first non-empty line of an exception's message (or its type name), at most ``limit``
    characters: third-party errors become part of one sentence."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    # ONNX Runtime prefixes the reason with "[ONNXRuntimeError] : 1 : FAIL :" and, for many
    # errors, a C++ source location and function signature that would push the reason past the limit
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(r"/onnxruntime_src/\S+:\d+ .*?\) (?=[A-Z])", "", text)
    return text[:limit]


def require(module: str, pip_line: str, purpose: str):
    """Import an optional dependency or raise MissingDependency with the install line."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(
            f"{purpose} needs {module}, which is not installed: {pip_line}"
        ) from exc
