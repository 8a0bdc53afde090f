"""edgert.quantize: INT8 / FP16 models with an accuracy gate, and TensorRT plans for them."""

from edgert.runtime.errors import GateFailed

from .builder import BuildReport, build

__all__ = ["BuildReport", "GateFailed", "build"]
