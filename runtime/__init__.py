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
from .images.preprocess import Preprocessing, Transform
from .results import ClassScore, Result, SemanticMask
from .tasks import TASK_SPECS, TaskModel, TaskSpec, load_task_model
from .tasks.detection import Detection
from .tracking import Track, Tracker
from .tracking.counting import LineCounter, ZoneCounter

__all__ = [
    "TASK_SPECS",
    "BackendUnavailable",
    "Bundle",
    "BundleError",
    "ClassScore",
    "Detection",
    "EdgertError",
    "Engine",
    "EngineMismatch",
    "ExportError",
    "LineCounter",
    "Manifest",
    "MissingDependency",
    "ModelError",
    "OutputError",
    "ParityError",
    "Preprocessing",
    "Result",
    "SemanticMask",
    "SensorError",
    "ShapeError",
    "SourceError",
    "TaskModel",
    "TaskSpec",
    "TensorSpec",
    "Track",
    "Tracker",
    "Transform",
    "ZoneCounter",
    "load_task_model",
]
