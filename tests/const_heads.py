"""Hostile detector heads: an ONNX whose ``output0`` is a constant array (plus 0 x the input's
mean, so it depends on the input) carrying Ultralytics' metadata: the helper of the round-6
review (fault-battery-6.md, ``const_onnx.py``), to put NaN, inf or huge values where a real
model would put boxes, scores, classes, keypoints, angles or mask coefficients.

    python -m tests.const_heads OUT.onnx 'META_JSON' 'NUMPY_EXPR' [SIZE]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def meta(task: str, names: int = 1, **more) -> dict:
    """Ultralytics' metadata for a 640 model of ``task`` with ``names`` classes a, b, c, ..."""
    labels = {i: chr(ord("a") + i) for i in range(names)}
    return {
        "author": "Ultralytics",
        "task": task,
        "names": str(labels),
        "imgsz": "[640, 640]",
        **more,
    }


def const_onnx(path, props: dict, value, size: int = 640, protos=None) -> Path:
    """An ONNX [1, 3, size, size] -> ``output0`` = ``value`` (float32, any shape), and
    ``output1`` = ``protos`` where given (an instance-segmentation model's prototypes)."""
    c = np.asarray(value, np.float32)
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], keepdims=0),
        helper.make_node("Mul", ["m", "zero"], ["z"]),
        helper.make_node("Add", ["c", "z"], ["output0"]),
    ]
    outputs = [helper.make_tensor_value_info("output0", TensorProto.FLOAT, list(c.shape))]
    inits = [
        numpy_helper.from_array(c, "c"),
        helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
    ]
    if protos is not None:
        p = np.asarray(protos, np.float32)
        inits.append(numpy_helper.from_array(p, "p"))
        nodes.append(helper.make_node("Add", ["p", "z"], ["output1"]))
        outputs.append(helper.make_tensor_value_info("output1", TensorProto.FLOAT, list(p.shape)))
    graph = helper.make_graph(
        nodes,
        "const",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        outputs,
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, {k: str(v) for k, v in props.items()})
    onnx.save(model, str(path))
    return Path(path)


def const_bundle(folder: Path, name: str, props: dict, value, **kw) -> Path:
    """:func:`const_onnx` exported to ``folder/name.edgert`` (edgert's own export)."""
    from edgert.export import export_model

    onnx_path = const_onnx(Path(folder) / f"{name}.onnx", props, value, **kw)
    return Path(export_model(str(onnx_path), Path(folder) / f"{name}.edgert").bundle)


def main(argv: list) -> None:
    out, props, expr = argv[0], json.loads(argv[1]), argv[2]
    size = int(argv[3]) if len(argv) > 3 else 640
    value = eval(expr, {"np": np, "nan": np.nan, "inf": np.inf})  # noqa: S307 (a test tool)
    const_onnx(out, props, value, size)


if __name__ == "__main__":
    main(sys.argv[1:])
