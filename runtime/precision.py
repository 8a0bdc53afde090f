"""The precisions a bundle can hold, and the one place that names their model files."""

from __future__ import annotations

PRECISIONS = ("fp32", "fp16", "int8", "fp8")  # what a bundle holds, in this order
CHOICES = ("auto", *PRECISIONS)  # --precision where the bundle's best is picked (auto)
QDQ = ("int8", "fp8")  # calibrated: quantize/dequantize pairs around the quantized nodes
REDUCED = tuple(p for p in PRECISIONS if p != "fp32")  # a model file of its own; FP16 outside Q/DQ
# what --precision auto prefers among a bundle's TensorRT plans (FP8 only when asked for)
AUTO_ORDER = ("fp16", "int8", "fp32")


def model_file(precision: str, variant: str | None = None) -> str:
    """The bundle's model file for ``precision``: ``model.onnx`` (fp32), ``model.fp16.onnx``,
    ``model.int8.onnx``, ``model.fp8.onnx``; ``variant="fp16"``: a Q/DQ model with everything
    else in FP16 (``model.int8.fp16.onnx``, what a strongly typed TensorRT 11 network needs)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; one of {', '.join(PRECISIONS)}")
    if variant is not None:
        if variant != "fp16" or precision not in QDQ:
            raise ValueError(f"no {variant} variant of the {precision} model")
        return f"model.{precision}.fp16.onnx"
    return "model.onnx" if precision == "fp32" else f"model.{precision}.onnx"
