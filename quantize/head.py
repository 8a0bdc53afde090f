"""A detector's head, found from the graph, kept out of INT8 by rule.

A YOLO-family head ends in arithmetic on a few convolutions' outputs: per scale, the last
convolution of the box branch (distributions over distances), of the class branch (logits), and
of the mask-coefficient, keypoint or angle branch; then DFL (a softmax over each distance's bins
and a fixed 1x1 convolution that takes its expectation), the sigmoid, the anchor grid and the
strides, concatenated into the output. Those convolutions write coordinates in pixels and logits
whose small differences decide which box survives NMS: INT8 on them moves boxes (NVIDIA's and
Ultralytics' own quantization work keeps them in higher precision).

Found by walking back from the graph's outputs through every operator without weights (the
decode arithmetic): the weighted nodes where the walk stops are the head's output convolutions. A
weighted node fed by a softmax (through reshapes and transposes) is decode arithmetic too (DFL's
expectation): the walk goes on through it. It is a head only where the walk joins two or more
convolutions in a concatenation (several scales or branches); a classifier's last Gemm, or a
single-convolution output, is not one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ranges import quantizable_nodes

# what lies between a softmax and DFL's expectation convolution
_RESHAPES = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"}


@dataclass(frozen=True)
class Head:
    outputs: tuple[str, ...]  # the output convolutions: kept out of INT8 by rule
    decode: tuple[str, ...]  # weighted nodes that are decode arithmetic (DFL): kept out too
    arithmetic: int  # operators without weights between them and the outputs

    @property
    def nodes(self) -> list[str]:
        return [*self.outputs, *self.decode]

    def describe(self) -> str:
        dfl = f" and {len(self.decode)} DFL convolution(s)" if self.decode else ""
        return (
            f"the head's {len(self.outputs)} output convolutions{dfl}, before "
            f"{self.arithmetic} decode operators"
        )


def find_head(model) -> Head | None:
    """The YOLO-family head of ``model`` (an ONNX ModelProto), or None where there is none."""
    weighted = {n.name for n in quantizable_nodes(model)}
    producer = {o: n for n in model.graph.node for o in n.output if o}
    outputs: list[str] = []
    decode: list[str] = []
    seen_nodes: set[str] = set()
    arithmetic = 0
    concat_joins = False
    stack = [o.name for o in model.graph.output]
    seen_tensors: set[str] = set()
    while stack:
        t = stack.pop()
        if t in seen_tensors:
            continue
        seen_tensors.add(t)
        node = producer.get(t)
        if node is None or node.name in seen_nodes:
            continue
        seen_nodes.add(node.name)
        if node.name in weighted:
            if _after_softmax(node, producer):
                decode.append(node.name)
                stack.append(node.input[0])
            else:
                outputs.append(node.name)
            continue
        arithmetic += 1
        if node.op_type == "Concat":
            concat_joins = True
        stack.extend(i for i in node.input if i)
    if len(outputs) < 2 or not concat_joins:
        return None
    order = {n.name: i for i, n in enumerate(model.graph.node)}
    return Head(
        tuple(sorted(outputs, key=order.get)), tuple(sorted(decode, key=order.get)), arithmetic
    )


def _after_softmax(node, producer) -> bool:
    t = node.input[0]
    while (p := producer.get(t)) is not None and p.op_type in _RESHAPES:
        t = p.input[0]
    return p is not None and p.op_type == "Softmax"
