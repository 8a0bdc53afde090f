"""Encoders for the embed task: a model cut at a named layer (``--embed-layer``), and the
manifest's record of its vectors.

An ONNX model is cut in its graph at the tensor of that name (``onnx.utils.Extractor``: the
subgraph from the inputs to that tensor, which becomes the only output). A PyTorch model is cut
at the module of that name (``model.named_modules()``: ``classifier.0``, ``avgpool``), its
output taken by a forward hook while the model is traced: the names a PyTorch user knows, not
the tracer's tensor names (``/classifier/classifier.0/...``, which change between PyTorch
versions), and export's parity check compares the ONNX graph with that module's own output.
"""

from __future__ import annotations

import dataclasses

from edgert.runtime.errors import ModelError, require
from edgert.runtime.tasks import TASK_SPECS

from .source_model import SourceModel

OUTPUT = "embedding"


def _near(name: str, names: list, n: int = 5) -> str:
    import difflib

    close = difflib.get_close_matches(name, names, n=n, cutoff=0.4) or names[-n:]
    return ", ".join(repr(c) for c in close)


def cut_onnx(model, tensor: str):
    """``model`` cut at ``tensor``: its inputs to that tensor, the tensor the only output
    (renamed nothing: it keeps its graph name)."""
    import onnx
    from onnx.utils import Extractor

    produced = [out for node in model.graph.node for out in node.output if out]
    if tensor not in produced:
        raise ModelError(
            f"--embed-layer {tensor!r} names no tensor of the ONNX graph; tensors near it: "
            f"{_near(tensor, produced)}"
        )
    inferred = onnx.shape_inference.infer_shapes(model)
    inputs = [i.name for i in model.graph.input if i.name not in _initializers(model)]
    cut = Extractor(inferred).extract_model(inputs, [tensor])
    return cut


def _initializers(model) -> set:
    return {t.name for t in model.graph.initializer}


def cut_torch(src: SourceModel, layer: str) -> SourceModel:
    """``src`` whose module returns the output of its submodule ``layer`` (a forward hook),
    as an encoder: task embed, no labels, one output named ``embedding``."""
    torch = require("torch", "pip install 'edgert[export]'", "--embed-layer")
    modules = dict(src.module.named_modules())
    if not layer or layer not in modules:
        names = [n for n in modules if n]
        raise ModelError(
            f"--embed-layer {layer!r} names no module of the PyTorch model; modules near it: "
            f"{_near(layer, names)}"
        )

    class Cut(torch.nn.Module):
        def __init__(self, model, part):
            super().__init__()
            self.model, self.part = model, part

        def forward(self, *inputs):
            taken = []
            hook = self.part.register_forward_hook(lambda m, i, o: taken.append(o))
            try:
                self.model(*inputs)
            finally:
                hook.remove()
            if len(taken) != 1 or not isinstance(taken[0], torch.Tensor):
                raise ModelError(
                    f"--embed-layer {layer!r} must run once per call and give one tensor"
                )
            return taken[0]

    return dataclasses.replace(
        src,
        module=Cut(src.module, modules[layer]).eval(),
        output_names=[OUTPUT],
        task="embed",
        labels=None,
        spec=f"{src.spec} cut at {layer}",
        metrics={**src.metrics, "embed_layer": layer},
    )


def section(task: str, outputs: list, metrics: dict) -> dict:
    """The manifest's ``embedding`` section of an encoder (empty for other tasks): the vector's
    size, that edgert L2-normalises it after the graph, and the layer it was cut at (the
    source's ``embed_layer``)."""
    if not TASK_SPECS[task].vectors or not outputs:
        return {}
    size = 1
    for d in outputs[0].shape[1:]:
        size = size * d if d > 0 and size > 0 else -1
    return {
        "embedding": {
            "size": size,
            "normalized": "L2, after the graph, by edgert (the raw norm is reported)",
            "layer": metrics.get("embed_layer"),
        }
    }
