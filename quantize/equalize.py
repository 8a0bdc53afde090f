"""Making an FP32 model friendlier to INT8 before it is quantized (the model computes the same):

- **Activation equalisation into depthwise convolutions** (cross-layer equalisation for
  depthwise-separable blocks). TensorRT's Q/DQ gives an activation one scale for all its channels;
  after ``Conv -> ReLU6`` some channels span [0, 6] and others [0, 0.05], and the small ones get a
  handful of INT8 levels. For ``Conv -> (ReLU | ReLU6) -> depthwise Conv`` channel i of the
  producer is multiplied by ``g_i = R / r_i`` (its range ``r_i`` brought up to the largest, ``R``,
  with the gain capped) and the depthwise filter of channel i divided by ``g_i``: the depthwise
  output is unchanged, the per-tensor scale now fits every channel, and per-channel weight scales
  absorb both changes exactly. ReLU commutes with a positive gain; ReLU6 becomes
  ``Min(ReLU(x), 6 g_i)``, per channel, so clipping happens where it did.
- **Bias correction**: quantizing weights shifts each output channel's mean by
  ``sum(W_q - W) * E[x]``; the expected shift, from the per-channel means of the layer's input on
  calibration data, is subtracted from the bias (Conv and Gemm), so INT8 outputs are not biased.

Both return a new ModelProto and a report; the builder measures which help and keeps those.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .onnx_graph import Graph, attr

MAX_GAIN = 32.0  # a channel's activation is multiplied by at most this (dead channels stay put)


def channel_stats(model, data: np.ndarray, tensors: list[str], batch: int = 16) -> dict[str, tuple]:
    """Per-channel (axis 1) absolute maximum and mean of ``tensors`` on ``data`` (one pass)."""
    from .evaluate import Exposed

    absmax: dict[str, np.ndarray] = {}
    total: dict[str, np.ndarray] = {}
    count: dict[str, int] = dict.fromkeys(tensors, 0)
    for outs in Exposed(model, tensors).batches(data, batch, "per-channel statistics"):
        for t, x in outs.items():
            axes = tuple(k for k in range(x.ndim) if k != 1)
            a = np.abs(x).max(axis=axes)
            s = x.sum(axis=axes, dtype=np.float64)
            absmax[t] = np.maximum(absmax[t], a) if t in absmax else a
            total[t] = total[t] + s if t in total else s
            count[t] += x.size // x.shape[1]
    return {t: (absmax[t], (total[t] / max(1, count[t])).astype(np.float32)) for t in tensors}


def depthwise_pairs(model, any_consumer: bool = False) -> list[tuple]:
    """(producer Conv, activation node or None, ReLU6 ceiling or None, consumer Conv) for every
    ``Conv -> [Relu | Clip(0, c)] -> depthwise Conv`` whose weights belong to them alone
    (``any_consumer``: any Conv consumer, e.g. a depthwise conv's pointwise projection)."""
    gr = Graph(model)
    pairs = []
    for conv in gr.g.node:
        if conv.op_type != "Conv" or len(conv.input) < 2:
            continue  # (a depthwise producer scales its channel i's filter alike)
        if not gr.owned(conv, 1) or (len(conv.input) > 2 and not gr.owned(conv, 2)):
            continue
        act, ceiling = gr.activation(conv)
        dw = gr.only_consumer((act or conv).output[0])
        if dw is None or dw.op_type != "Conv" or not gr.owned(dw, 1):
            continue
        w2 = gr.inits[dw.input[1]]
        channels = gr.inits[conv.input[1]].dims[0]
        depthwise = attr(dw, "group", 1) == channels and w2.dims[0] == channels and w2.dims[1] == 1
        regular = any_consumer and attr(dw, "group", 1) == 1 and w2.dims[1] == channels
        if not (depthwise or regular):
            continue
        pairs.append((conv, act, ceiling, dw))
    return pairs


def equalize(
    model, data: np.ndarray, max_gain: float = MAX_GAIN, any_consumer: bool = False
) -> tuple[object, dict]:
    """Activation equalisation into depthwise convolutions (see the module's text)."""
    import onnx
    from onnx import helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    pairs = depthwise_pairs(out, any_consumer)
    if not pairs:
        return out, {"pairs": 0}
    stats = channel_stats(out, data, [dw.input[0] for _, _, _, dw in pairs])
    gr = Graph(out)
    report = {"pairs": len(pairs), "gain_median": [], "gain_max": []}
    new_nodes: dict[str, list] = {}
    for conv, act, ceiling, dw in pairs:
        r = stats[dw.input[0]][0].astype(np.float64)
        top = float(r.max())
        if top <= 0:
            continue
        gain = np.clip(top / np.maximum(r, top / max_gain), 1.0, max_gain)
        w1 = gr.array(conv.input[1])
        gr.set(conv.input[1], w1 * gain.reshape(-1, *[1] * (w1.ndim - 1)))
        if len(conv.input) > 2:
            gr.set(conv.input[2], gr.array(conv.input[2]) * gain)
        w2 = gr.array(dw.input[1])
        if attr(dw, "group", 1) == 1:  # a regular conv: its input channels
            gr.set(dw.input[1], w2 / gain.reshape(1, -1, *[1] * (w2.ndim - 2)))
        else:  # depthwise: channel i's filter
            gr.set(dw.input[1], w2 / gain.reshape(-1, 1, *[1] * (w2.ndim - 2)))
        if ceiling is not None:  # ReLU6 -> Min(ReLU(x), 6 g) per channel
            cap_name = f"{act.name}_equalized_ceiling"
            shape = [1, len(gain)] + [1] * (w1.ndim - 2)
            cap = (ceiling * gain).astype(np.float32).reshape(shape)
            out.graph.initializer.append(onnx.numpy_helper.from_array(cap, cap_name))
            relu_out = f"{act.output[0]}_relu"
            new_nodes[act.name] = [
                helper.make_node("Relu", [act.input[0]], [relu_out], name=f"{act.name}_relu"),
                helper.make_node("Min", [relu_out, cap_name], [act.output[0]], name=act.name),
            ]
        report["gain_median"].append(round(float(np.median(gain)), 3))
        report["gain_max"].append(round(float(gain.max()), 3))
    if new_nodes:
        nodes = []
        for n in out.graph.node:
            nodes.extend(new_nodes.get(n.name, [n]) if n.op_type == "Clip" else [n])
        used = {t for n in nodes for t in n.input} | {o.name for o in out.graph.output}
        # the replaced Clips' bounds, where nothing else reads them
        nodes = [n for n in nodes if n.op_type != "Constant" or any(o in used for o in n.output)]
        del out.graph.node[:]
        out.graph.node.extend(nodes)
    return out, report


def correct_bias(
    model,
    data: np.ndarray,
    skip: frozenset[str] | set[str] = frozenset(),
    quantize_weight: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[object, dict]:
    """Subtract each Conv's / Gemm's expected output shift from INT8 weight rounding from its
    bias (one is added where there was none). ``skip``: nodes that stay in higher precision
    (their weights are not rounded, so nothing is corrected)."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    qw = quantize_weight or fake_quantize_per_channel
    gr = Graph(out)
    layers = []
    for n in out.graph.node:
        if n.op_type not in ("Conv", "Gemm") or n.name in skip or not gr.owned(n, 1):
            continue
        if n.input[0] in gr.inits or (len(n.input) > 2 and n.input[2] and not gr.owned(n, 2)):
            continue
        if n.op_type == "Gemm" and (
            attr(n, "transA", 0) or attr(n, "alpha", 1.0) != 1.0 or attr(n, "beta", 1.0) != 1.0
        ):
            continue
        layers.append(n)
    if not layers:
        return out, {"layers": 0}
    stats = channel_stats(out, data, sorted({n.input[0] for n in layers}))
    shifts = []
    for n in layers:
        mean = stats[n.input[0]][1].astype(np.float64)
        w = gr.array(n.input[1])
        if n.op_type == "Gemm":
            w_oi = w if attr(n, "transB", 0) else w.T  # [out, in]
            delta = (qw(w_oi) - w_oi).astype(np.float64) @ mean
        else:
            groups = attr(n, "group", 1)
            dw = (qw(w) - w).astype(np.float64).sum(axis=tuple(range(2, w.ndim)))  # [out, in/g]
            per_group = w.shape[0] // groups
            delta = np.empty(w.shape[0])
            for o in range(w.shape[0]):
                g = o // per_group
                delta[o] = dw[o] @ mean[g * dw.shape[1] : (g + 1) * dw.shape[1]]
        if len(n.input) > 2 and n.input[2]:
            gr.set(n.input[2], gr.array(n.input[2]) - delta)
        else:
            name = f"{n.name}_corrected_bias"
            out.graph.initializer.append(
                onnx.numpy_helper.from_array((-delta).astype(np.float32), name)
            )
            gr.inits[name] = out.graph.initializer[-1]
            n.input.append(name) if len(n.input) == 2 else n.input.__setitem__(2, name)
        shifts.append(float(np.abs(delta).max()))
    return out, {"layers": len(layers), "max_shift": round(max(shifts), 6)}


def fake_quantize_per_channel(w: np.ndarray) -> np.ndarray:
    """Symmetric INT8 per output channel (axis 0), as the Q/DQ model stores it."""
    axes = tuple(range(1, w.ndim))
    scale = np.abs(w).max(axis=axes, keepdims=True) / 127.0
    scale = np.where(scale > 0, scale, 1.0)
    return (np.clip(np.round(w / scale), -127, 127) * scale).astype(np.float32)
