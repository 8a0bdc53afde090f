"""FP16 as an ONNX model (what TensorRT 11's strongly typed networks need; earlier TensorRT uses
the FP16 builder flag on the FP32 model instead).

Made with onnxruntime's float16 converter: FP32 inputs and outputs kept (``keep_io_types``), and
overflow-prone operators kept in FP32 (exponentials, powers, reductions, normalisations, softmax).
"""

from __future__ import annotations

from edgert.runtime.errors import ModelError, first_line

FP32_OPS = [
    "Exp",
    "Pow",
    "Log",
    "Softmax",
    "LogSoftmax",
    "ReduceSum",
    "ReduceMean",
    "ReduceProd",
    "ReduceSumSquare",
    "ReduceL2",
    "LayerNormalization",
    "InstanceNormalization",
    "Sqrt",
    "Reciprocal",
    "Range",
    "Resize",
    "TopK",
    "NonMaxSuppression",
]


def to_fp16(model):
    try:
        from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16
    except ImportError as exc:
        raise ModelError(
            "this onnxruntime has no float16 converter (onnxruntime.transformers)"
        ) from exc
    try:
        return convert_float_to_float16(
            model,
            keep_io_types=True,
            op_block_list=sorted(set(DEFAULT_OP_BLOCK_LIST) | set(FP32_OPS)),
            disable_shape_infer=False,
        )
    except Exception as exc:
        raise ModelError(f"FP16 conversion failed: {first_line(exc)}") from exc
