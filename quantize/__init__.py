"""edgert.quantize: INT8 / FP16 models with an accuracy gate, and TensorRT plans for them."""

from .builder import BuildReport, GateFailed, build

__all__ = ["BuildReport", "GateFailed", "build"]
