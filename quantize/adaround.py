"""Adaptive rounding of weights (AdaRound, Nagel et al. 2020), layer by layer, on the host's CPU.

Rounding every weight to its nearest INT8 level is not what keeps a layer's output closest to
FP32: for each Conv / Gemm, a per-weight choice between rounding down and up is learned that
minimises the layer's output error (after its ReLU / ReLU6) on calibration data, with the layer's
input quantized as the Q/DQ model will quantize it. The continuous relaxation ``h(V)`` (a
stretched sigmoid) is pushed to 0 or 1 by an annealed regulariser, then rounded hard.

The result is written as FP32 weights that sit exactly on each channel's INT8 grid (symmetric,
scale = max|W| / 127, the largest weight kept at +-127), so the Q/DQ quantizer recomputes the same
scales and stores exactly these integers: ONNX Runtime and TensorRT reproduce the learned
rounding.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import progress
from .onnx_graph import Graph, attr

ZETA, GAMMA = 1.1, -0.1  # the rectified sigmoid's stretch


@dataclass
class Settings:
    iterations: int = 300
    batch: int = 8
    samples: int = 32
    reg_weight: float = 0.01
    warmup: float = 0.2  # fraction of iterations without the rounding regulariser
    beta: tuple[float, float] = (20.0, 2.0)
    lr: float = 1e-2
    seed: int = 0


def _layers(model) -> list[tuple]:
    """(node, activation after it: None | "relu" | ceiling, output tensor to match) for every
    Conv2d / Gemm with a constant weight used by it alone."""
    gr = Graph(model)
    out = []
    for n in model.graph.node:
        if n.op_type not in ("Conv", "Gemm") or not gr.owned(n, 1) or n.input[0] in gr.inits:
            continue
        w = gr.inits[n.input[1]]
        if n.op_type == "Conv" and (
            len(w.dims) != 4 or attr(n, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")
        ):
            continue
        if n.op_type == "Gemm" and (
            attr(n, "transA", 0) or not attr(n, "transB", 0) or attr(n, "alpha", 1.0) != 1.0
        ):
            continue  # per-channel scales are per row of a transB weight
        act, ceiling = gr.activation(n)
        if act is None:
            out.append((n, None, n.output[0]))
        else:
            out.append((n, "relu" if ceiling is None else ceiling, act.output[0]))
    return out


def _capture(model, data: np.ndarray, tensors: list[str]) -> dict[str, np.ndarray]:
    from .evaluate import Exposed

    parts: dict[str, list] = {t: [] for t in tensors}
    for outs in Exposed(model, tensors).batches(data, 8, "layer inputs for adaptive rounding"):
        for t, v in outs.items():
            parts[t].append(v)
    return {t: np.concatenate(v) for t, v in parts.items()}


def adaround(
    model,
    data: np.ndarray,
    thresholds: dict[str, float] | None = None,
    settings: Settings | None = None,
    skip: set[str] = frozenset(),
    say: Callable[[str], None] = lambda s: None,
) -> tuple[object, dict]:
    """A copy of ``model`` whose Conv / Gemm weights are adaptively rounded to INT8 levels.
    ``thresholds``: the activation thresholds the Q/DQ model will use (inputs are fake-quantized
    with them while learning); ``skip``: nodes left alone (kept in higher precision)."""
    import onnx
    import torch

    cfg = settings or Settings()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    layers = [t for t in _layers(out) if t[0].name not in skip]
    if not layers:
        return out, {"layers": 0}
    start = time.perf_counter()
    sub = data[: cfg.samples]
    tensors = sorted({n.input[0] for n, _, _ in layers} | {t for _, _, t in layers})
    acts = _capture(out, sub, tensors)
    gr = Graph(out)
    torch.manual_seed(cfg.seed)
    report = {
        "layers": len(layers),
        "iterations": cfg.iterations,
        "samples": len(sub),
        "flipped": 0,
        "weights": 0,
    }
    gains = []
    for k, (node, act, target) in enumerate(
        progress.each(layers, "adaptive rounding", len(layers), "layers", name=lambda t: t[0].name)
    ):
        w = gr.array(node.input[1])
        b = gr.array(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        x = acts[node.input[0]]
        th = (thresholds or {}).get(node.input[0])
        fn = _layer_fn(node, act)
        new_w, before, after, flipped = _optimise(fn, w, b, x, acts[target], th, cfg, torch)
        gr.set(node.input[1], new_w)
        report["flipped"] += flipped
        report["weights"] += w.size
        gains.append(before / max(after, 1e-20))
        if (k + 1) % 10 == 0 or k + 1 == len(layers):
            say(
                f"  adaptive rounding: {k + 1}/{len(layers)} layers ({time.perf_counter() - start:.0f} s)"
            )
    report["seconds"] = round(time.perf_counter() - start, 1)
    report["error_reduction_median"] = round(float(np.median(gains)), 3)
    return out, report


def _layer_fn(node, act):
    """The layer (and its activation) as a torch function of (x, w, b)."""
    import torch.nn.functional as F

    if node.op_type == "Gemm":
        trans_b = attr(node, "transB", 0)
        beta = attr(node, "beta", 1.0)

        def linear(x, w, b):
            y = x.reshape(len(x), -1) @ (w.t() if trans_b else w)
            return y + beta * b if b is not None else y

        core = linear
    else:
        strides = tuple(attr(node, "strides", [1, 1]))
        dil = tuple(attr(node, "dilations", [1, 1]))
        pads = list(attr(node, "pads", [0, 0, 0, 0]))
        group = attr(node, "group", 1)

        def conv(x, w, b):
            if pads[0] != pads[2] or pads[1] != pads[3]:
                x = F.pad(x, (pads[1], pads[3], pads[0], pads[2]))
                pad = 0
            else:
                pad = (pads[0], pads[1])
            return F.conv2d(x, w, b, strides, pad, dil, group)

        core = conv
    if act is None:
        return core
    if act == "relu":
        return lambda x, w, b: core(x, w, b).clamp_min(0)
    return lambda x, w, b: core(x, w, b).clamp(0, act)


def _optimise(fn, w, b, x, y, threshold, cfg: Settings, torch):
    """(weights on the INT8 grid, MSE with nearest rounding, MSE with learned rounding, how many
    weights round the other way than nearest)."""
    wt = torch.from_numpy(w)
    axes = tuple(range(1, w.ndim))
    scale = torch.from_numpy(np.abs(w).max(axis=axes, keepdims=True) / 127.0).clamp_min(1e-12)
    base = torch.floor(wt / scale)
    rest = (wt / scale - base).clamp(0, 1)
    # V such that h(V) = rest: the relaxation starts at the FP32 weights
    v0 = -torch.log((ZETA - GAMMA) / (rest - GAMMA).clamp(1e-4, ZETA - GAMMA - 1e-4) - 1)
    v = v0.clone().requires_grad_(True)
    bt = torch.from_numpy(b) if b is not None else None
    xs = torch.from_numpy(x)
    if threshold is not None:  # the input as the Q/DQ model sees it
        s = threshold / 127.0
        xs = torch.clamp(torch.round(xs / s), -128, 127) * s
    ys = torch.from_numpy(y)

    def h(v):
        return torch.clamp(torch.sigmoid(v) * (ZETA - GAMMA) + GAMMA, 0, 1)

    def weights(rounding):
        return torch.clamp(base + rounding, -127, 127) * scale

    opt = torch.optim.Adam([v], lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    warm = int(cfg.iterations * cfg.warmup)
    for it in range(cfg.iterations):
        idx = torch.randint(0, len(xs), (min(cfg.batch, len(xs)),), generator=gen)
        hv = h(v)
        rec = torch.sum((fn(xs[idx], weights(hv), bt) - ys[idx]) ** 2) / len(
            idx
        )  # per sample, as in the paper
        loss = rec
        if it >= warm:
            frac = (it - warm) / max(1, cfg.iterations - warm)
            beta = cfg.beta[1] + 0.5 * (cfg.beta[0] - cfg.beta[1]) * (1 + np.cos(np.pi * frac))
            loss = loss + cfg.reg_weight * torch.sum(1 - torch.abs(2 * hv - 1) ** beta)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        hard = (h(v) >= 0.5).to(base.dtype)
        learned = base + hard
        nearest = torch.round(wt / scale)
        # each channel's largest weight stays at +-127: the quantizer recomputes the same scale
        flat = wt.reshape(len(wt), -1)
        top = flat.abs().argmax(dim=1)
        lf = learned.reshape(len(wt), -1)
        lf[torch.arange(len(wt)), top] = torch.sign(flat[torch.arange(len(wt)), top]) * 127
        learned = lf.reshape(wt.shape).clamp(-127, 127)
        err_near = float(torch.mean((fn(xs, nearest.clamp(-127, 127) * scale, bt) - ys) ** 2))
        err_learned = float(torch.mean((fn(xs, learned * scale, bt) - ys) ** 2))
        if err_learned > err_near:  # never worse than nearest rounding on this data
            learned, err_learned = nearest.clamp(-127, 127), err_near
        flipped = int((learned != nearest.clamp(-127, 127)).sum())
    return (learned * scale).numpy().astype(np.float32), err_near, err_learned, flipped
