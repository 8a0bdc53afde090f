"""Activation ranges for INT8: statistics collected once, thresholds by method.

Only the activations TensorRT wants quantized are measured: the data inputs of weighted
operators (Conv, ConvTranspose, Gemm, MatMul with constant weights). Per tensor we keep the
absolute maximum and a 2048-bin histogram of |x|; each method turns that into a symmetric
threshold (scale = threshold / 127, zero point 0):

- ``minmax``: the absolute maximum;
- ``percentile``: the 99.99th percentile of |x|;
- ``entropy``: TensorRT's KL-divergence method (the threshold whose 128-level quantized histogram
  diverges least from the original);
- ``mse``: the threshold with the least expected squared error, clipping beyond it plus rounding
  inside it (step = threshold / 127; exact zeros cost nothing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edgert.runtime.errors import ModelError

WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
METHODS = ("minmax", "percentile", "entropy", "mse")
BINS = 2048
PERCENTILE = 99.99


def opset_of(model) -> int:
    """The model's default-domain opset (0 when it names none)."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def at_least_opset(model, opset: int, what: str):
    """``model`` itself when its opset is ``opset`` or newer, else a copy converted to ``opset``
    (ONNX's version converter); ``what`` says in the error what needs it."""
    have = opset_of(model)
    if have >= opset:
        return model
    from onnx import version_converter

    from edgert.runtime.errors import ModelError, first_line

    try:
        return version_converter.convert_version(model, opset)
    except Exception as exc:  # noqa: BLE001 - the converter raises whatever its adapters raise
        raise ModelError(
            f"cannot convert the model from opset {have} to {opset} for {what}: {first_line(exc)}"
        ) from exc


def quantizable_nodes(model) -> list:
    """Weighted nodes whose weight (input 1) is a constant and whose data (input 0) is not: the
    ones INT8 pays off for (a product of constants is folded before it ever runs)."""
    inits = {i.name for i in model.graph.initializer}
    constant = set(inits)
    for n in model.graph.node:  # topological order: constants computed from constants
        if n.op_type == "Constant" or (n.input and all(not i or i in constant for i in n.input)):
            constant.update(n.output)
    return [
        n
        for n in model.graph.node
        if n.op_type in WEIGHTED_OPS
        and len(n.input) > 1
        and n.input[1] in inits
        and n.input[0] not in constant
    ]


def node_macs(model) -> dict[str, int]:
    """Multiply-accumulates of each quantizable node for one sample, from ONNX's shape inference
    (a dimension it cannot tell counts as 1): what the share of the model's arithmetic in INT8
    is measured in."""
    import onnx

    g = onnx.shape_inference.infer_shapes(model).graph
    shapes = {
        v.name: [d.dim_value or 1 for d in v.type.tensor_type.shape.dim]
        for v in (*g.input, *g.value_info, *g.output)
    }
    dims = {i.name: list(i.dims) for i in g.initializer}
    out = {}
    for n in quantizable_nodes(model):
        w = dims[n.input[1]]
        y, x = shapes.get(n.output[0], []), shapes.get(n.input[0], [])
        if n.op_type == "Conv":  # every output element: Cin/group x kernel
            macs = int(np.prod(y[1:])) * int(np.prod(w[1:])) if y else 0
        elif n.op_type == "ConvTranspose":  # every input element: Cout/group x kernel
            macs = int(np.prod(x[1:])) * int(np.prod(w[1:])) if x else 0
        else:  # Gemm, MatMul: every output element of a sample takes K products
            k = (
                w[1]
                if n.op_type == "Gemm" and any(a.name == "transB" and a.i for a in n.attribute)
                else w[0]
            )
            macs = int(np.prod(y[1:])) * int(k) if y else 0
        out[n.name] = macs
    return out


def activation_inputs(model, nodes) -> list[str]:
    inits = {i.name for i in model.graph.initializer}
    seen: list[str] = []
    for n in nodes:
        if n.input[0] not in inits and n.input[0] not in seen:
            seen.append(n.input[0])
    return seen


def float_activations(model) -> list[str]:
    """Every float tensor the model computes (its inputs and every node's outputs, not its
    weights): what TensorRT's own INT8 calibrator measures. Implicit INT8 (DLA on TensorRT < 11)
    needs a scale for each tensor it runs in INT8; a tensor without one stays FP16, with
    reformats around it ("Missing scale and zero-point for tensor ..., expect fall back")."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16}
    types = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.value_info, *g.output)}
    inits = {i.name for i in g.initializer}
    names = [i.name for i in g.input if i.name not in inits]
    names += [o for n in g.node if n.op_type != "Constant" for o in n.output if o]
    return [t for t in dict.fromkeys(names) if types.get(t) in floats]


@dataclass
class ActivationStats:
    absmax: dict[str, float]
    hist: dict[str, np.ndarray]
    samples: int
    tops: dict[str, float] | None = None  # each histogram's upper edge (default: the maximum)

    def subset(self, tensors) -> ActivationStats:
        """These statistics for ``tensors`` alone (one pass collected more: the DLA path's)."""
        keep = list(tensors)
        return ActivationStats(
            {t: self.absmax[t] for t in keep},
            {t: self.hist[t] for t in keep},
            self.samples,
            None if self.tops is None else {t: self.tops[t] for t in keep},
        )

    def thresholds(self, method: str) -> dict[str, float]:
        if method == "minmax":
            return {t: max(a, 1e-8) for t, a in self.absmax.items()}
        fn = {
            "percentile": lambda h, top: _percentile(h, top, PERCENTILE),
            "entropy": _entropy,
            "mse": _mse,
        }.get(method)
        if fn is None:
            raise ValueError(
                f"unknown calibration method {method!r}; choose one of {', '.join(METHODS)}"
            )
        tops = self.tops or self.absmax
        # a histogram wider than the maximum (its edge doubled as larger values came) never
        # gives a threshold above the maximum
        return {t: max(min(fn(h, tops[t]), self.absmax[t]), 1e-8) for t, h in self.hist.items()}


# elements of one tensor per batch that its histogram reads: beyond it, an evenly strided sample
# (a YOLOv8s-size detector at 640 has ~40 M activation values per image to histogram; 2 M per
# batch of 16 still puts hundreds of values above the 99.99th percentile)
HIST_SAMPLE = 1 << 21


def collect(
    model, data: np.ndarray, tensors: list[str], batch: int = 16, say=None
) -> ActivationStats:
    """Run the FP32 model on ``data`` once with ``tensors`` exposed as outputs: each tensor's
    absolute maximum (exact) and a histogram of |x| over [0, edge], the edge doubled (bins merged
    in pairs) whenever a batch holds larger values, so one pass suffices; ``say`` gets progress."""
    from .evaluate import Exposed

    exposed = Exposed(model, tensors)
    absmax = dict.fromkeys(tensors, 0.0)
    hist = {t: np.zeros(BINS, np.int64) for t in tensors}
    tops: dict[str, float] = {}
    total, done = exposed.usable(len(data)), 0
    for outs in exposed.batches(data, batch, "calibration statistics"):
        for t, a in outs.items():
            if not a.size:
                continue
            a = a.ravel()
            top = max(float(a.max()), -float(a.min()))
            if not math.isfinite(top):  # NaN, or inf: np.histogram's range would refuse it
                raise ModelError(_not_finite(model, t, a, done))
            absmax[t] = max(absmax[t], top)
            sample = np.abs(a[:: max(1, a.size // HIST_SAMPLE)])
            edge = tops.get(t)
            if edge is None:
                edge = tops[t] = max(top, 1e-8)
            while top > edge:
                hist[t] = np.concatenate(
                    [hist[t].reshape(-1, 2).sum(1), np.zeros(BINS // 2, np.int64)]
                )
                edge = tops[t] = edge * 2
            hist[t] += np.histogram(sample, bins=BINS, range=(0.0, edge))[0]
        before, done = done, done + (len(next(iter(outs.values()))) if outs else 0)
        if say and (done * 4 // max(total, 1) > before * 4 // max(total, 1) or done >= total):
            say(f"calibration statistics {min(done, total)}/{total} samples")  # each quarter
    return ActivationStats(absmax, hist, total, {t: tops.get(t, 1e-8) for t in tensors})


def _not_finite(model, tensor: str, values: np.ndarray, done: int) -> str:
    """One sentence: the FP32 model itself computes NaN or infinity in ``tensor``."""
    what = "NaN" if np.isnan(values).any() else "infinite values"
    outputs = {o.name for o in model.graph.output}
    where = "outputs" if tensor in outputs else "computes"
    return (
        f"the FP32 model itself {where} {what} in {tensor!r} on the calibration data (from "
        f"sample {done + 1} on): no INT8 range can be measured from it; check the model "
        "(edgert run it on those inputs) before quantizing it"
    )


def _percentile(hist: np.ndarray, top: float, pct: float) -> float:
    cdf = np.cumsum(hist)
    if cdf[-1] == 0:
        return max(top, 1e-8)
    idx = int(np.searchsorted(cdf, cdf[-1] * pct / 100.0))
    return max((idx + 1) / len(hist) * top, 1e-8)


def _mse(hist: np.ndarray, top: float, stride: int = 8) -> float:
    """The clip point with the least expected squared quantization error over the histogram."""
    h = hist.astype(np.float64)
    if h.sum() == 0:
        return max(top, 1e-8)
    n = len(h)
    centers = (np.arange(n) + 0.5) / n * top
    best, best_err = top, np.inf
    for i in range(32, n + 1, stride):
        t = i / n * top
        clipped = centers > t
        err = float(np.sum(h[clipped] * (centers[clipped] - t) ** 2))
        inside = h[~clipped].copy()
        inside[0] = 0.0  # (near-)zeros are exact in symmetric INT8
        err += float(inside.sum()) * (t / 127.0) ** 2 / 12.0
        if err < best_err:
            best, best_err = t, err
    return max(best, 1e-8)


def _entropy(hist: np.ndarray, top: float, levels: int = 128, stride: int = 16) -> float:
    """TensorRT's entropy calibration on a |x| histogram: minimise KL(P || Q) over clip points."""
    hist = hist.astype(np.float64)
    hist[0] = 0.0  # (near-)zeros are exact in symmetric INT8; after ReLU they would swamp the KL
    if hist.sum() == 0:
        return max(top, 1e-8)
    best_i, best_kl = len(hist), np.inf
    for i in range(levels, len(hist) + 1, stride):
        kept = hist[:i]
        p = kept.copy()
        p[-1] += hist[i:].sum()  # P: clipped outliers land in the last bin
        nonzero = kept > 0
        # Q: the kept bins (without outliers) squeezed into `levels` levels, each level's sum
        # spread evenly over its non-empty bins (i >= levels: every level has a bin)
        edges = np.linspace(0, i, levels + 1).astype(int)
        sums = np.add.reduceat(kept, edges[:-1])
        counts = np.add.reduceat(nonzero.astype(np.float64), edges[:-1])
        share = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
        q = np.repeat(share, np.diff(edges)) * nonzero
        if q.sum() == 0:
            continue
        ps, qs = p / p.sum(), q / q.sum()
        mask = ps > 0
        kl = float(np.sum(ps[mask] * np.log(ps[mask] / np.maximum(qs[mask], 1e-12))))
        if kl < best_kl:
            best_i, best_kl = i, kl
    return max(best_i / len(hist) * top, 1e-8)
