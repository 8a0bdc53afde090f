"""FP16 as an ONNX model (what TensorRT 11's strongly typed networks need; earlier TensorRT uses
the FP16 builder flag on the FP32 model instead).

Made with onnxruntime's float16 converter: FP32 inputs and outputs kept (``keep_io_types``), and
overflow-prone operators kept in FP32 (exponentials, powers, reductions, normalisations, softmax).

:func:`qdq_to_fp16` does the same to an INT8 Q/DQ model: what is not INT8 (nodes kept out of it,
residual adds, activations, pooling) computes in FP16 instead of FP32, with FP16 Q/DQ scales
(opset 19) -- the form NVIDIA Model Optimizer writes with ``high_precision_dtype="fp16"``, and
what TensorRT 11 needs for INT8 engines whose other layers run in FP16 (it takes every type from
the model; TensorRT 8.5/10 get the FP16 builder flag instead).
"""

from __future__ import annotations

import heapq

import numpy as np

from edgert.runtime.errors import ModelError, first_line

from .onnx_graph import attr
from .ranges import at_least_opset

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
        out = convert_float_to_float16(
            model,
            keep_io_types=True,
            op_block_list=sorted(set(DEFAULT_OP_BLOCK_LIST) | set(FP32_OPS)),
            disable_shape_infer=False,
        )
    except Exception as exc:
        raise ModelError(f"FP16 conversion failed: {first_line(exc)}") from exc
    sort_nodes(out.graph)  # the converter appends the casts of the graph inputs at the end
    return out


QDQ_FP16_OPSET = 19  # QuantizeLinear / DequantizeLinear take FP16 scales from opset 19


def qdq_to_fp16(model):
    """An INT8 (or FP8) Q/DQ model with everything outside INT8 (FP8) in FP16 and FP16 scales;
    FP32 I/O."""
    from onnx import TensorProto, numpy_helper

    model = at_least_opset(model, QDQ_FP16_OPSET, "FP16 Q/DQ scales")
    before = {i.name: i for i in model.graph.initializer}
    out = to_fp16(model)
    inits = {i.name: i for i in out.graph.initializer}
    uses: dict[str, int] = {}
    for n in out.graph.node:
        for t in n.input:
            uses[t] = uses.get(t, 0) + 1
    for n in out.graph.node:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear") or n.input[1] not in inits:
            continue
        half, full = inits[n.input[1]], before.get(n.input[1])
        if half.data_type != TensorProto.FLOAT16 or full is None:
            raise ModelError(f"{n.name}: its scale did not become FP16")
        h = numpy_helper.to_array(half).astype(np.float64)
        f = numpy_helper.to_array(full).astype(np.float64)
        if not np.all(h > 0):
            raise ModelError(f"{n.name}: a scale is 0 in FP16")
        weights = inits.get(n.input[0]) if n.op_type == "DequantizeLinear" else None
        if weights is not None and uses[n.input[0]] == 1 and uses[n.input[1]] == 1:
            # constant INT8 / FP8 weights: re-quantized on the FP16 scales where those moved (FP16
            # rounds scales, and raises those below 6e-8, typically dead channels', to 6e-8), so
            # the dequantized weights stay the nearest to the calibrated ones
            _requantize(weights, f, h, attr(n, "axis", 1))
        elif not np.all(np.abs(h - f) <= 0.01 * np.abs(f)):
            # an activation's scale: its calibrated range would not be the one quantized
            raise ModelError(
                f"{n.name}: its scale ({float(np.min(f)):.3g}) is smaller than FP16 holds to "
                "1 % (the tensor's range is too small for FP16 scales)"
            )
    return out


def _requantize(weights, old, new, axis: int) -> None:
    """Constant INT8 or FP8 (E4M3) ``weights`` re-quantized from scales ``old`` to ``new``."""
    from onnx import TensorProto, numpy_helper

    from .fp8 import fp8_round, fp8_tensor

    fp8 = weights.data_type == TensorProto.FLOAT8E4M3FN
    if fp8:
        import ml_dtypes

        raw = np.frombuffer(weights.raw_data, dtype=ml_dtypes.float8_e4m3fn)
        q = raw.astype(np.float64).reshape(tuple(weights.dims))
    else:
        q = numpy_helper.to_array(weights).astype(np.float64)
    if old.size > 1:  # per channel along ``axis``
        shape = [1] * q.ndim
        shape[axis] = old.size
        old, new = old.reshape(shape), new.reshape(shape)
    if fp8:
        weights.CopyFrom(fp8_tensor(weights.name, fp8_round(q * old / new)))
        return
    requantized = np.clip(np.round(q * old / new), -127, 127).astype(np.int8)
    weights.CopyFrom(numpy_helper.from_array(requantized, weights.name))


def sort_nodes(graph) -> None:
    """Put ``graph``'s nodes in topological order (the ONNX IR requires it; tools that read nodes
    in order, such as onnx.checker, reject a graph that uses a tensor before its producer),
    keeping the existing order wherever it already is valid."""
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    waits = [
        {producer[t] for t in n.input if t in producer and producer[t] != i}
        for i, n in enumerate(graph.node)
    ]
    users: dict[int, list[int]] = {}
    for i, deps in enumerate(waits):
        for d in deps:
            users.setdefault(d, []).append(i)
    order: list[int] = []
    ready = [i for i, d in enumerate(waits) if not d]  # a heap: the lowest original index first
    heapq.heapify(ready)
    left = [len(d) for d in waits]
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, []):
            left[u] -= 1
            if left[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(graph.node):
        raise ModelError("the model's graph has a cycle: it is not a valid ONNX model")
    nodes = [graph.node[i] for i in order]
    del graph.node[:]
    graph.node.extend(nodes)
