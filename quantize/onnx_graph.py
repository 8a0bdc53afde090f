"""Lookups over an ONNX graph that the model passes share (equalisation, bias correction,
AdaRound, shift, FP16 and FP8 conversion): producers, consumers, initializers, scalar constants,
a node's attributes."""

from __future__ import annotations

import numpy as np

__all__ = ["Graph", "attr"]


class Graph:
    """Lookups over a ModelProto's graph: producers, consumers, initializers by name."""

    def __init__(self, model) -> None:
        from onnx import numpy_helper

        self.g = model.graph
        self.inits = {i.name: i for i in self.g.initializer}
        self.producer = {o: n for n in self.g.node for o in n.output}
        self.consumers: dict[str, list] = {}
        for n in self.g.node:
            for t in n.input:
                self.consumers.setdefault(t, []).append(n)
        self.array = lambda name: numpy_helper.to_array(self.inits[name]).copy()
        self.outputs = {o.name for o in self.g.output}

    def set(self, name: str, value: np.ndarray) -> None:
        from onnx import numpy_helper

        self.inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))

    def const(self, node_input: str) -> float | None:
        """The scalar value of a Constant node's output or an initializer, else None."""
        from onnx import numpy_helper

        if node_input in self.inits:
            v = numpy_helper.to_array(self.inits[node_input])
        else:
            p = self.producer.get(node_input)
            if p is None or p.op_type != "Constant" or not p.attribute:
                return None
            v = numpy_helper.to_array(p.attribute[0].t)
        return float(v) if v.size == 1 else None

    def only_consumer(self, tensor: str):
        users = self.consumers.get(tensor, [])
        return users[0] if len(users) == 1 and tensor not in self.outputs else None

    def owned(self, node, k: int) -> bool:
        """Whether input ``k`` of ``node`` is an initializer read by that node alone (so changing
        it changes nothing else)."""
        name = node.input[k] if len(node.input) > k else ""
        return name in self.inits and len(self.consumers.get(name, [])) == 1

    def activation(self, node) -> tuple[object, float | None]:
        """(the ReLU or ReLU6 that alone reads ``node``'s output, its ceiling: None for ReLU);
        (None, None) when there is none. ReLU6 is ``Clip(x, 0, c)`` with constant bounds."""
        act = self.only_consumer(node.output[0])
        if act is None or act.op_type not in ("Relu", "Clip"):
            return None, None
        if act.op_type == "Relu":
            return act, None
        lo = self.const(act.input[1]) if len(act.input) > 1 and act.input[1] else None
        hi = self.const(act.input[2]) if len(act.input) > 2 and act.input[2] else None
        return (act, hi) if lo == 0.0 and hi is not None else (None, None)


def attr(node, name: str, default):
    """A node's attribute by name (its Python value), or ``default``."""
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default
