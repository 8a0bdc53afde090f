"""Tiny real encoders (ONNX graphs built node by node) for the embed task's tests: a healthy one
and the three the health check refuses (constant, NaN, collapsed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

SIZE = 16
DIM = 8
KINDS = ("healthy", "constant", "nan", "collapsed")
# what the health check says of each broken one (the start of its sentence)
SAID = {
    "constant": "the encoder returns the same vector for all",
    "nan": "the encoder returns NaN or infinite values for",
    "collapsed": "the encoder's vectors are nearly the same for all",
}


def weights(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The healthy encoder's conv weights (DIM x 3 x 3 x 3, zero-mean per filter) and bias."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((DIM, 3, 3, 3)).astype(np.float32)
    w -= w.mean(axis=(1, 2, 3), keepdims=True)
    return w, rng.standard_normal(DIM).astype(np.float32) * 0.1


def encoder(path: Path, kind: str = "healthy", batch: int | str = "N") -> Path:
    """x: float32[batch, 3, SIZE, SIZE] -> v: float32[batch, DIM]. healthy: conv 3x3 (edge
    filters) -> |.| -> global mean; constant: the same vector for every input; nan: the healthy
    vector's log of a negative number; collapsed: a fixed vector plus 1e-4 of the healthy one."""
    w, b = weights()
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Abs", ["c"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["g"]),
        helper.make_node("Flatten", ["g"], ["h"]),
    ]
    init = [
        helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
        helper.make_tensor("b", TensorProto.FLOAT, b.shape, b),
    ]
    fixed = np.linspace(1.0, 2.0, DIM).astype(np.float32)
    if kind == "healthy":
        nodes.append(helper.make_node("Identity", ["h"], ["v"]))
    elif kind == "constant":
        init += [helper.make_tensor("z", TensorProto.FLOAT, [1], [0.0])]
        init += [helper.make_tensor("k", TensorProto.FLOAT, [DIM], fixed)]
        nodes += [
            helper.make_node("Mul", ["h", "z"], ["hz"]),
            helper.make_node("Add", ["hz", "k"], ["v"]),
        ]
    elif kind == "nan":
        init += [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])]
        nodes += [
            helper.make_node("Neg", ["h"], ["n"]),
            helper.make_node("Sub", ["n", "one"], ["m"]),
            helper.make_node("Log", ["m"], ["v"]),
        ]
    elif kind == "collapsed":
        init += [helper.make_tensor("e", TensorProto.FLOAT, [1], [1e-4])]
        init += [helper.make_tensor("k", TensorProto.FLOAT, [DIM], fixed)]
        nodes += [
            helper.make_node("Mul", ["h", "e"], ["he"]),
            helper.make_node("Add", ["he", "k"], ["v"]),
        ]
    else:
        raise ValueError(kind)
    graph = helper.make_graph(
        nodes,
        f"{kind}_encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, [batch, DIM])],
        initializer=init,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return Path(path)


def reference(x: np.ndarray) -> np.ndarray:
    """The healthy encoder in numpy (x: [N, 3, SIZE, SIZE]) -> [N, DIM]."""
    w, b = weights()
    pad = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((len(x), DIM, SIZE, SIZE), np.float64)
    for dy in range(3):
        for dx in range(3):
            patch = pad[:, :, dy : dy + SIZE, dx : dx + SIZE]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, dy, dx])
    out += b[None, :, None, None]
    return np.abs(out).mean(axis=(2, 3))


PREPROCESS = {"resize": "stretch", "size": f"{SIZE}x{SIZE}", "scale": 1 / 255}


def encoder_bundle(
    folder: Path, kind: str = "healthy", batch: int | str = "N", name: str | None = None
) -> Path:
    """An embed bundle of :func:`encoder` (stretch to SIZE, RGB 0..1), named ``name`` (default:
    its kind)."""
    from edgert.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    onnx_path = encoder(folder / f"{kind}.onnx", kind, batch)
    return export_model(
        str(onnx_path),
        folder / f"{kind}.edgert",
        name=name,
        task="embed",
        preprocess=dict(PREPROCESS),
    ).bundle


def classifier(path: Path) -> Path:
    """The healthy encoder with a classifier's head after it (Gemm to 3 logits): cut at the
    tensor ``h`` (--embed-layer h), it is the healthy encoder again."""
    model = onnx.load(str(encoder(path, "healthy")))
    gw = np.random.default_rng(4).standard_normal((3, DIM)).astype(np.float32)
    model.graph.initializer.append(
        helper.make_tensor("gw", TensorProto.FLOAT, gw.shape, gw.ravel())
    )
    model.graph.node.append(helper.make_node("Gemm", ["v", "gw"], ["logits"], transB=1))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3]))
    onnx.save(model, str(path))
    return Path(path)
