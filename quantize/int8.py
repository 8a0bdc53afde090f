"""The Q/DQ (explicit quantization) model, made with ONNX Runtime's quantization tools in the
form TensorRT 8.5-11 builds and ONNX Runtime runs:

- QDQ format, opset >= 13, INT8 activations and weights, symmetric (all zero points 0);
- per-channel weight scales, FP32 scales; biases left in FP32 (TensorRT's Dequantize takes INT8,
  not INT32);
- Q/DQ only on the inputs of weighted operators (Conv, ConvTranspose, Gemm, MatMul), never on
  their outputs — TensorRT's placement rules (what NVIDIA Model Optimizer does too): quantizing
  every tensor, as a plain ``quantize_static`` does, adds error TensorRT does not need;
- activation ranges from edgert's own calibration (:mod:`ranges`), passed as overrides, so the
  sensitivity search can re-quantize cheaply without re-running calibration.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
from collections.abc import Iterable

import numpy as np

from edgert.runtime.errors import ModelError, first_line

from .ranges import WEIGHTED_OPS, opset_of, quantizable_nodes


class _OneSample:
    """quantize_static insists on a reader; with every range overridden one sample suffices."""

    def __init__(self, name: str, sample: np.ndarray) -> None:
        self._items = iter([{name: sample}])

    def get_next(self):
        return next(self._items, None)


def quantize(
    model,
    thresholds: dict[str, float],
    sample: np.ndarray,
    exclude: Iterable[str] = (),
    only: Iterable[str] | None = None,
):
    """FP32 ModelProto -> Q/DQ ModelProto. ``exclude`` keeps those nodes in FP32; ``only``
    quantizes just those nodes (used to measure one node's sensitivity)."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(_OneSample, CalibrationDataReader):
        pass

    overrides = {
        t: [{"rmin": np.array(-a, np.float32), "rmax": np.array(a, np.float32)}]
        for t, a in thresholds.items()
    }
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "fp32.onnx"), os.path.join(tmp, "int8.onnx")
        onnx.save(model, src)
        try:
            # ONNX Runtime's quantizer prints progress and logs advice on the root logger
            with contextlib.redirect_stdout(io.StringIO()), _quiet_root_logger():
                quantize_static(
                    src,
                    dst,
                    Reader(model.graph.input[0].name, sample[:1]),
                    quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=list(WEIGHTED_OPS),
                    per_channel=True,
                    activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8,
                    nodes_to_exclude=list(exclude),
                    # only these: never the products of constants quantizable_nodes leaves out
                    nodes_to_quantize=list(only)
                    if only is not None
                    else [n.name for n in quantizable_nodes(model)],
                    extra_options={
                        "ActivationSymmetric": True,
                        "WeightSymmetric": True,
                        "QuantizeBias": False,
                        "OpTypesToExcludeOutputQuantization": list(WEIGHTED_OPS),
                        "TensorQuantOverrides": overrides,
                    },
                )
        except Exception as exc:
            raise ModelError(f"ONNX Runtime's quantizer failed: {first_line(exc)}") from exc
        return onnx.load(dst)


@contextlib.contextmanager
def _quiet_root_logger():
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def check_structure(model) -> list[str]:
    """What in a Q/DQ model TensorRT would reject; empty when it is in TensorRT form."""
    from onnx import TensorProto, numpy_helper

    problems = []
    opset = opset_of(model)
    if opset < 13:
        problems.append(f"opset {opset} < 13 (per-channel Q/DQ needs 13)")
    inits = {i.name: i for i in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        scale = inits.get(n.input[1])
        if scale is not None and scale.data_type != TensorProto.FLOAT:
            problems.append(f"{n.name}: scale is not FP32")
        if len(n.input) > 2 and n.input[2] in inits:
            zp = numpy_helper.to_array(inits[n.input[2]])
            if np.any(zp != 0):
                problems.append(f"{n.name}: zero point is not 0")
            if zp.dtype != np.int8:
                problems.append(f"{n.name}: zero point type {zp.dtype} is not int8")
    producers = {o: n for n in model.graph.node for o in n.output}
    for n in model.graph.node:
        if n.op_type in ("Conv", "ConvTranspose", "Gemm") and len(n.input) > 2:
            p = producers.get(n.input[2])
            if p is not None and p.op_type == "DequantizeLinear":
                problems.append(f"{n.name}: bias is quantized (TensorRT needs it in FP32)")
    return problems


def quantized_nodes(model) -> list[str]:
    """Names of weighted nodes whose weight comes through a DequantizeLinear."""
    producers = {o: n for n in model.graph.node for o in n.output}
    out = []
    for n in model.graph.node:
        if n.op_type in WEIGHTED_OPS and len(n.input) > 1:
            p = producers.get(n.input[1])
            if p is not None and p.op_type == "DequantizeLinear":
                out.append(n.name)
    return out
