"""FP16 as an ONNX model (what TensorRT 11's strongly typed networks need; earlier TensorRT uses
the FP16 builder flag on the FP32 model instead).

Made with onnxruntime's float16 converter: FP32 inputs and outputs kept (``keep_io_types``), and
overflow-prone operators kept in FP32 (exponentials, powers, reductions, normalisations, softmax).
"""

from __future__ import annotations

import heapq

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
