"""edgert.runtime: what ships to the device.

It imports nothing heavy at import time (no torch, tensorrt, pycuda or pynvml); a test checks.
"""

from .bundle import Bundle, Manifest, TensorSpec
from .engine import Engine
from .errors import (
    BackendUnavailable,
    BundleError,
    EdgertError,
    EngineMismatch,
    ExportError,
    MissingDependency,
    ModelError,
    OutputError,
    ParityError,
    SensorError,
    ShapeError,
    SourceError,
)
from .preprocess import Preprocessing, Transform

__all__ = [
    "BackendUnavailable",
    "Bundle",
    "BundleError",
    "EdgertError",
    "Engine",
    "EngineMismatch",
    "ExportError",
    "Manifest",
    "MissingDependency",
    "ModelError",
    "OutputError",
    "ParityError",
    "Preprocessing",
    "SensorError",
    "ShapeError",
    "SourceError",
    "TensorSpec",
    "Transform",
]
