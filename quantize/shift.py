"""Shifting non-negative activations so symmetric INT8 uses all its levels (``--prepare shift``).

TensorRT's INT8 is symmetric: every zero point is 0, so an activation after ReLU or ReLU6, which
never goes below 0, is quantized on the levels 0..127 only — half of INT8's resolution. Here such
an input of a weighted node is moved to the middle of its range before it is quantized:
``x' = x - c`` with ``c = T / 2`` (``T`` its calibrated threshold), so ``x'`` spans ``[-T/2, T/2]``
on all 255 levels with half the step; the node's bias takes the shift back (``b + c * sum(W)``
per output channel); a convolution with zero padding, whose border taps would read ``x' = 0``
where the input had ``x = 0`` (``x' = -c``), instead gets ``c *`` (the weights whose taps fall
inside the input) added back per output position, from three small constants multiplied out
(:func:`_border_terms`; needs the input's height and width fixed). The FP32 model computes the
same (to float rounding); the Q/DQ model keeps TensorRT's form (Q/DQ only at the weighted nodes'
inputs) with one ``Sub`` before each shifted Q and, for padded convolutions, one ``Add`` of a
folded constant after them: element-wise work TensorRT can fuse into the neighbouring
convolutions. The shifted inputs' thresholds are pinned to ``c`` (:class:`Pinned`), whatever
calibration method is chosen for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .onnx_graph import Graph, attr
from .ranges import ActivationStats, quantizable_nodes

_PASS_THROUGH = {
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Flatten",
    "Reshape",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Identity",
}


@dataclass
class Pinned(ActivationStats):
    """Activation statistics whose thresholds for some tensors are fixed (the shifted inputs)."""

    pins: dict[str, float] = field(default_factory=dict)

    def thresholds(self, method: str) -> dict[str, float]:
        return {**super().thresholds(method), **self.pins}


def pinned(stats: ActivationStats, pins: dict[str, float]) -> ActivationStats:
    return (
        Pinned(stats.absmax, stats.hist, stats.samples, stats.tops, dict(pins)) if pins else stats
    )


def nonnegative(gr: Graph, tensor: str, depth: int = 0) -> bool:
    """Whether ``tensor`` can never be negative, by what makes it: ReLU, ``Clip(0, c)``, the
    ``Min(ReLU(x), cap)`` equalisation writes, or pooling / reshaping of such a tensor."""
    p = gr.producer.get(tensor)
    if p is None or depth > 16:
        return False
    if p.op_type == "Relu":
        return True
    if p.op_type == "Clip":
        lo = gr.const(p.input[1]) if len(p.input) > 1 and p.input[1] else None
        return lo is not None and lo >= 0
    if p.op_type == "Min":  # every constant cap >= 0 and one input never negative
        caps = [gr.array(i) for i in p.input if i in gr.inits]
        data = [i for i in p.input if i not in gr.inits]
        return all(bool((c >= 0).all()) for c in caps) and any(
            nonnegative(gr, i, depth + 1) for i in data
        )
    if p.op_type in _PASS_THROUGH:
        return nonnegative(gr, p.input[0], depth + 1)
    return False


def _in_bounds(size: int, out: int, k: int, stride: int, pad: int, dilation: int) -> np.ndarray:
    """[out, k]: 1 where tap ``k`` of output position ``out`` reads inside an input of ``size``."""
    pos = np.arange(out)[:, None] * stride - pad + np.arange(k)[None, :] * dilation
    return ((pos >= 0) & (pos < size)).astype(np.float32)


def _border_terms(node, w: np.ndarray, c: float, in_hw: tuple[int, int]):
    """(U [1, 1, H', kh], c * sum of W over its input channels [1, out, kh, kw], V [1, 1, kw, W'])
    of a 2-D Conv: ``U @ cW @ V`` is, per output position, ``c`` times the sum of the weights
    whose taps read inside the input — what the shifted input's zero padding leaves out. Three
    small constants instead of an [out, H', W'] map (ONNX Runtime and TensorRT fold them)."""
    (h, wd), (kh, kw) = in_hw, w.shape[2:]
    sh, sw = attr(node, "strides", [1, 1])
    dh, dw = attr(node, "dilations", [1, 1])
    pt, pl, pb, pr = attr(node, "pads", [0, 0, 0, 0])
    out_h = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    out_w = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    u = _in_bounds(h, out_h, kh, sh, pt, dh)
    v = _in_bounds(wd, out_w, kw, sw, pl, dw).T
    cw = (c * w.sum(axis=1)).astype(np.float32)
    return u[None, None], cw[None], v[None, None]


def shift_activations(model, thresholds: dict[str, float], sample: np.ndarray):
    """(the model with its non-negative weighted-node inputs shifted, a report, {shifted input:
    its pinned threshold}). ``thresholds``: calibrated thresholds of ``model``'s activations;
    ``sample``: one input, for the spatial sizes of padded convolutions' inputs."""
    import onnx
    from onnx import helper, numpy_helper

    from .evaluate import Exposed

    out = onnx.ModelProto()
    out.CopyFrom(model)
    gr = Graph(out)
    candidates = []
    for n in quantizable_nodes(out):
        t = n.input[0]
        if t not in thresholds or thresholds[t] <= 0 or not nonnegative(gr, t):
            continue
        if not gr.owned(n, 1) or (len(n.input) > 2 and n.input[2] and not gr.owned(n, 2)):
            continue
        if n.op_type == "Gemm" and (
            attr(n, "transA", 0) or attr(n, "alpha", 1.0) != 1.0 or attr(n, "beta", 1.0) != 1.0
        ):
            continue
        if n.op_type not in ("Conv", "Gemm"):
            continue
        padded = n.op_type == "Conv" and any(attr(n, "pads", [0]))
        if padded and (
            len(gr.inits[n.input[1]].dims) != 4
            or attr(n, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")
        ):
            continue
        candidates.append((n, padded))
    dims = out.graph.input[0].type.tensor_type.shape.dim
    static = len(dims) > 1 and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims[1:])
    shapes: dict[str, tuple] = {}
    padded_inputs = sorted({n.input[0] for n, padded in candidates if padded})
    if padded_inputs and static:
        shapes = {
            t: v.shape for t, v in next(Exposed(out, padded_inputs).batches(sample[:1], 1)).items()
        }
    before, after, pins = {}, {}, {}
    report = {"shifted": 0, "with_border_terms": 0, "skipped_dynamic_size": 0}
    for n, padded in candidates:
        t = n.input[0]
        c = float(thresholds[t]) / 2
        w = gr.array(n.input[1]).astype(np.float64)
        if n.op_type == "Conv":
            total = w.sum(axis=tuple(range(1, w.ndim)))
        else:
            total = w.sum(axis=1) if attr(n, "transB", 0) else w.sum(axis=0)
        if padded:
            if t not in shapes:  # the model takes any image size: no border terms fit all
                report["skipped_dynamic_size"] += 1
                continue
            # zero padding reads x' = 0 where x was 0 (x' = -c): the conv's output takes back
            # c * (the weights inside) per position, and its bias stays as it is
            terms = _border_terms(n, w, c, shapes[t][2:])
            names = [f"{n.name}_shift_border_{k}" for k in ("rows", "weights", "cols")]
            for name, value in zip(names, terms, strict=True):
                out.graph.initializer.append(numpy_helper.from_array(value, name))
            raw, half = f"{n.output[0]}_before_shift_border", f"{n.name}_shift_border_half"
            after[n.name] = [
                helper.make_node("MatMul", names[:2], [half], name=f"{half}_matmul"),
                helper.make_node(
                    "MatMul",
                    [half, names[2]],
                    [f"{n.name}_shift_border"],
                    name=f"{n.name}_shift_border_matmul",
                ),
                helper.make_node(
                    "Add",
                    [raw, f"{n.name}_shift_border"],
                    [n.output[0]],
                    name=f"{n.name}_shift_border_add",
                ),
            ]
            n.output[0] = raw
            report["with_border_terms"] += 1
            total = np.zeros_like(total)
        bias = gr.array(n.input[2]).astype(np.float64) if len(n.input) > 2 and n.input[2] else 0.0
        b_name = n.input[2] if len(n.input) > 2 and n.input[2] else f"{n.name}_shift_bias"
        if b_name not in gr.inits:
            out.graph.initializer.append(
                numpy_helper.from_array(np.zeros(len(total), np.float32), b_name)
            )
            gr.inits[b_name] = out.graph.initializer[-1]
            n.input.append(b_name) if len(n.input) == 2 else n.input.__setitem__(2, b_name)
        gr.set(b_name, bias + c * total)
        c_name, shifted = f"{n.name}_shift", f"{t}_shifted_for_{n.name}"
        out.graph.initializer.append(numpy_helper.from_array(np.array(c, np.float32), c_name))
        before[n.name] = helper.make_node("Sub", [t, c_name], [shifted], name=c_name)
        n.input[0] = shifted
        pins[shifted] = c
        report["shifted"] += 1
    nodes = []
    for n in out.graph.node:
        nodes.extend([before[n.name]] if n.name in before else [])
        nodes.append(n)
        nodes.extend(after.get(n.name, []))
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out, report, pins
