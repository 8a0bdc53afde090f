"""edgert.export: PyTorch -> ONNX bundles, checked against PyTorch, with preprocessing and labels."""

from .exporter import ExportResult, export_model, parse_shape
from .parity import OutputParity, ParityCase, ParityReport

__all__ = [
    "ExportResult",
    "OutputParity",
    "ParityCase",
    "ParityReport",
    "export_model",
    "parse_shape",
]
