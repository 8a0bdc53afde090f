"""Backends, chosen through one table (never a format switch spread over the code).

Each entry names the module and class, loaded lazily so that ``import edgert.runtime`` pulls in
neither TensorRT nor PyCUDA.
"""

from __future__ import annotations

import importlib

from .base import Backend

# name -> (module, class), in auto-selection order
TABLE: dict[str, tuple[str, str]] = {
    "tensorrt": ("edgert.runtime.backends.tensorrt", "TensorRTBackend"),
    "onnxruntime": ("edgert.runtime.backends.onnxruntime", "OnnxRuntimeBackend"),
}


def backend_class(name: str) -> type[Backend]:
    module, cls = TABLE[name]
    return getattr(importlib.import_module(module), cls)


__all__ = ["TABLE", "Backend", "backend_class"]
