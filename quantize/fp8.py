"""FP8 (E4M3) Q/DQ models in TensorRT's form, for GPUs with FP8 tensor cores (compute capability
8.9 and later: Ada, Hopper, Blackwell, Jetson Thor):

- ONNX opset 19+ ``QuantizeLinear`` / ``DequantizeLinear`` with ``float8e4m3fn`` zero points (all
  0) and FP32 scales;
- the same placement as INT8 (:mod:`int8`): only the data inputs of weighted operators (Conv,
  ConvTranspose, Gemm, MatMul), per-tensor activation scales (threshold / 448, from calibration),
  per-channel weight scales (max|W| / 448), weights stored in FP8; biases stay FP32.

ONNX Runtime runs it on a CPU (so it is gated like INT8 anywhere); TensorRT builds it where the GPU
has FP8 (:func:`edgert.runtime.backends.tensorrt_compat.fp8_unsupported_reason` says where not).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .ranges import at_least_opset, quantizable_nodes

E4M3_MAX = 448.0
OPSET = 19


def fp8_tensor(name: str, values: np.ndarray):
    """A FLOAT8E4M3FN initializer of ``values`` (saturated to +-448, rounded to nearest even)."""
    import ml_dtypes
    from onnx import TensorProto, helper

    clipped = np.clip(values.astype(np.float32), -E4M3_MAX, E4M3_MAX)
    raw = clipped.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).tobytes()
    return helper.make_tensor(name, TensorProto.FLOAT8E4M3FN, list(values.shape), raw, raw=True)


def fp8_round(values: np.ndarray) -> np.ndarray:
    """``values`` as FP8 E4M3 stores them (saturated), back in FP32."""
    import ml_dtypes

    clipped = np.clip(values.astype(np.float32), -E4M3_MAX, E4M3_MAX)
    return clipped.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)


def round_weights(w: np.ndarray) -> np.ndarray:
    """Conv / Gemm (transB) weights as the FP8 model stores them: per output channel (axis 0),
    scale max|W| / 448 (what bias correction corrects for)."""
    axes = tuple(range(1, w.ndim))
    scale = np.abs(w).max(axis=axes, keepdims=True) / E4M3_MAX
    scale = np.where(scale > 0, scale, 1.0)
    return fp8_round(w / scale) * scale


def _weight_axis(node, weight: np.ndarray) -> int:
    """The output-channel axis of a weighted node's weight."""
    from .onnx_graph import attr

    if node.op_type == "Gemm":
        return 0 if attr(node, "transB", 0) else 1
    if node.op_type == "MatMul":
        return weight.ndim - 1
    if node.op_type == "ConvTranspose":
        return 1 if attr(node, "group", 1) == 1 else 0
    return 0


def quantize(
    model,
    thresholds: dict[str, float],
    sample: np.ndarray | None = None,
    exclude: Iterable[str] = (),
    only: Iterable[str] | None = None,
):
    """FP32 ModelProto -> FP8 Q/DQ ModelProto (opset 19+). ``exclude`` keeps those nodes in the
    original precision; ``only`` quantizes just those nodes (one node's sensitivity). ``sample``
    is not needed (the same call as :func:`int8.quantize`)."""
    import onnx
    from onnx import helper, numpy_helper

    out = at_least_opset(model, OPSET, "FP8 Q/DQ")
    if out is model:  # nodes are inserted below: never into the caller's model
        out = onnx.ModelProto()
        out.CopyFrom(model)
    skip, wanted = set(exclude), set(only) if only is not None else None
    inits = {i.name: i for i in out.graph.initializer}
    targets = [
        n
        for n in quantizable_nodes(out)
        if n.name not in skip and (wanted is None or n.name in wanted)
    ]
    new_inits, before = [], {}  # node name -> Q/DQ nodes to insert before it
    activations: dict[str, str] = {}  # tensor -> its dequantized name
    for n in targets:
        t = n.input[0]
        if t not in inits and t in thresholds:
            if t not in activations:
                base = f"{t}_fp8"
                scale = max(float(thresholds[t]), 1e-12) / E4M3_MAX
                new_inits += [
                    numpy_helper.from_array(np.array(scale, np.float32), f"{base}_scale"),
                    fp8_tensor(f"{base}_zero_point", np.zeros((), np.float32)),
                ]
                before.setdefault(n.name, []).extend(
                    [
                        helper.make_node(
                            "QuantizeLinear",
                            [t, f"{base}_scale", f"{base}_zero_point"],
                            [f"{base}_q"],
                            name=f"{base}_QuantizeLinear",
                        ),
                        helper.make_node(
                            "DequantizeLinear",
                            [f"{base}_q", f"{base}_scale", f"{base}_zero_point"],
                            [f"{base}_dq"],
                            name=f"{base}_DequantizeLinear",
                        ),
                    ]
                )
                activations[t] = f"{base}_dq"
            n.input[0] = activations[t]
        w_name = n.input[1]
        w = numpy_helper.to_array(inits[w_name]).astype(np.float32)
        axis = _weight_axis(n, w)
        amax = np.abs(np.moveaxis(w, axis, 0)).reshape(w.shape[axis], -1).max(axis=1)
        scale = np.where(amax > 0, amax / E4M3_MAX, 1.0).astype(np.float32)
        shape = [1] * w.ndim
        shape[axis] = -1
        base = f"{w_name}_fp8"
        new_inits += [
            fp8_tensor(f"{base}_quantized", w / scale.reshape(shape)),
            numpy_helper.from_array(scale, f"{base}_scale"),
            fp8_tensor(f"{base}_zero_point", np.zeros(len(scale), np.float32)),
        ]
        before.setdefault(n.name, []).append(
            helper.make_node(
                "DequantizeLinear",
                [f"{base}_quantized", f"{base}_scale", f"{base}_zero_point"],
                [f"{base}_dq"],
                name=f"{base}_DequantizeLinear",
                axis=axis,
            )
        )
        n.input[1] = f"{base}_dq"
    nodes = []
    for n in out.graph.node:
        nodes.extend(before.get(n.name, []))
        nodes.append(n)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    used = {t for n in nodes for t in n.input}
    kept = [i for i in out.graph.initializer if i.name in used]  # FP32 weights now stored in FP8
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept + new_inits)
    return out


def quantized_nodes(model) -> list[str]:
    """Weighted nodes whose weight comes through an FP8 DequantizeLinear."""
    from onnx import TensorProto

    fp8 = {i.name for i in model.graph.initializer if i.data_type == TensorProto.FLOAT8E4M3FN}
    producers = {o: n for n in model.graph.node for o in n.output}
    out = []
    for n in model.graph.node:
        if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul") and len(n.input) > 1:
            p = producers.get(n.input[1])
            if p is not None and p.op_type == "DequantizeLinear" and p.input[0] in fp8:
                out.append(n.name)
    return out
