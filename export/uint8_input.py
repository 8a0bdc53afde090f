"""``edgert export --uint8-input``: a model that takes uint8 pixels and normalises them itself.

The preprocessing's arithmetic (``(x * scale - mean) / std``, float32) becomes the first nodes of
the graph -- Cast to float, Mul, Sub, Div, each left out where it does nothing, and a Cast to
float16 for a float16 model -- in front of the original input, whose name the new uint8 input
keeps. The runtime then writes each frame's pixels as they are (a quarter of a float32 tensor's
bytes, no arithmetic on the CPU) and the engine does the rest: on a Jetson, on the GPU (TensorRT
takes uint8 network inputs through a Cast from 8.5, edgert's oldest; its ONNX parser imports them
from 8.5 too). The folded model is checked against the float one on real photos, each through
its own preprocessing, before anything is written.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from edgert.runtime.errors import ModelError, ParityError
from edgert.runtime.images.preprocess import Preprocessing, is_pixel_value
from edgert.runtime.sample_data import ALL_PHOTOS, load_photo

from .parity import ParityCase, ParityReport, compare

PREFIX = "edgert_uint8_input"  # names of the nodes and constants added in front


def folded_preprocessing(pre: Preprocessing) -> Preprocessing:
    """What the runtime does for the folded model: the same geometry and channels, pixels as
    they are."""
    n = len(pre.mean)
    return replace(pre, dtype="uint8", scale=1.0, mean=(0.0,) * n, std=(1.0,) * n)


def fold_normalisation(model, pre: Preprocessing | None):
    """``model`` with a uint8 image input that it normalises as ``pre`` says (a new model; the
    original is untouched); ModelError, one sentence, where that cannot be done."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    x = _image_input(model, pre)
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    graph = folded.graph
    names = _all_names(graph)
    inner = _fresh(f"{x.name}_normalised", names)
    _rename_uses(graph, x.name, inner)
    shape = (1, -1, 1, 1) if pre.layout == "NCHW" else (1, 1, 1, -1)
    steps = [("Cast", None)]
    if pre.scale != 1:
        steps.append(("Mul", np.float32(pre.scale)))
    if any(pre.mean):
        steps.append(("Sub", np.asarray(pre.mean, np.float32).reshape(shape)))
    if any(s != 1 for s in pre.std):
        steps.append(("Div", np.asarray(pre.std, np.float32).reshape(shape)))
    half = x.type.tensor_type.elem_type == TensorProto.FLOAT16
    if half:
        steps.append(("Cast16", None))
    nodes, value = [], x.name
    for i, (op, const) in enumerate(steps):
        out = inner if i == len(steps) - 1 else _fresh(f"{PREFIX}/{op.lower()}", names)
        name = _fresh(f"{PREFIX}/{op}", names)
        if op.startswith("Cast"):
            to = TensorProto.FLOAT16 if op == "Cast16" else TensorProto.FLOAT
            nodes.append(helper.make_node("Cast", [value], [out], name=name, to=to))
        else:
            c = _fresh(f"{PREFIX}/{op.lower()}_value", names)
            graph.initializer.append(numpy_helper.from_array(np.asarray(const, np.float32), c))
            nodes.append(helper.make_node(op, [value, c], [out], name=name))
        value = out
    rest = list(graph.node)
    del graph.node[:]
    graph.node.extend([*nodes, *rest])  # topological: the new nodes first
    x_new = next(i for i in graph.input if i.name == x.name)
    x_new.type.tensor_type.elem_type = TensorProto.UINT8
    return folded


def _image_input(model, pre: Preprocessing | None):
    from onnx import TensorProto

    graph = model.graph
    inits = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise ModelError(
            f"--uint8-input takes a model of one image input; this one has {len(inputs)} inputs"
        )
    x = inputs[0]
    elem = x.type.tensor_type.elem_type
    if elem not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        kind = TensorProto.DataType.Name(elem).lower()
        raise ModelError(
            f"--uint8-input folds the normalisation in front of a float input; input "
            f"{x.name!r} is {kind}"
        )
    if len(x.type.tensor_type.shape.dim) != 4:
        raise ModelError(
            f"--uint8-input takes an image input (4-D); input {x.name!r} has "
            f"{len(x.type.tensor_type.shape.dim)} dimensions"
        )
    if pre is None:
        raise ModelError(
            "--uint8-input folds the image preprocessing into the model, and this model records "
            "none (describe it with --resize, --size, --scale, ...)"
        )
    if any(o.name == x.name for o in graph.output):
        raise ModelError(f"--uint8-input: input {x.name!r} is also an output of the model")
    pad = pre.pad_value
    if pre.resize == "letterbox" and not is_pixel_value(pad):
        raise ModelError(
            f"--uint8-input: the letterbox's pad value {pad:g} is no uint8 pixel value (a whole "
            "number from 0 to 255)"
        )
    return x


def _all_names(graph) -> set[str]:
    names = {i.name for i in (*graph.input, *graph.output, *graph.initializer, *graph.value_info)}
    for node in _nodes(graph):
        names.update((*node.input, *node.output, node.name))
    return names


def _nodes(graph):
    """Every node, those of subgraphs (If, Loop, Scan bodies) included."""
    from onnx import AttributeProto

    for node in graph.node:
        yield node
        for attr in node.attribute:
            subs = (
                [attr.g]
                if attr.type == AttributeProto.GRAPH
                else list(attr.graphs)
                if attr.type == AttributeProto.GRAPHS
                else []
            )
            for sub in subs:
                yield from _nodes(sub)


def _rename_uses(graph, old: str, new: str) -> None:
    """Every node that reads ``old`` (subgraphs' references to the outer scope too) reads
    ``new``."""
    for node in _nodes(graph):
        for k, name in enumerate(node.input):
            if name == old:
                node.input[k] = new


def _fresh(base: str, names: set[str]) -> str:
    name, k = base, 1
    while name in names:
        name, k = f"{base}_{k}", k + 1
    names.add(name)
    return name


def check_folded(before, after, pre: Preprocessing, atol: float, rtol: float) -> ParityReport:
    """The float model on each photo through ``pre``, the folded one on the same photo through
    :func:`folded_preprocessing`: every output compared (ONNX Runtime on the CPU); ParityError
    when one differs beyond the export's tolerance."""
    from .onnx_export import cpu_session

    raw = folded_preprocessing(pre)
    ref, got = cpu_session(before), cpu_session(after)
    name = ref.get_inputs()[0].name
    outputs = [o.name for o in ref.get_outputs()]
    cases = []
    for label, images in _photo_batches(ref.get_inputs()[0].shape, pre):
        want = ref.run(outputs, {name: pre.batch(images)[0].astype(_dtype(ref))})
        have = got.run(outputs, {name: raw.batch(images)[0]})
        found = tuple(
            compare(n, w, h, atol, rtol) for n, w, h in zip(outputs, want, have, strict=True)
        )
        cases.append(ParityCase(label, len(images), found))
    report = ParityReport(
        atol, rtol, tuple(cases), title="uint8 input, normalised in the graph, vs the float model"
    )
    worst = report.worst_failure
    if worst is not None:
        raise ParityError(
            f"the model with the normalisation folded in differs from the float model on real "
            f"photos: output {worst.name} max abs error {worst.max_abs:.3e} (atol {atol:g}); "
            "nothing was written",
            report=report,
        )
    return report


def _dtype(session) -> str:
    return "float16" if session.get_inputs()[0].type == "tensor(float16)" else "float32"


def _photo_batches(shape, pre: Preprocessing):
    """(label, photos) batches the input takes: its fixed batch, else 1 and 3."""
    import cv2

    photos = [load_photo(p) for p in ALL_PHOTOS]
    h, w = pre.size
    if pre.resize == "none":  # the model takes its own size (or any: a smaller copy)
        photos = [cv2.resize(p, (w if w > 0 else 160, h if h > 0 else 120)) for p in photos]
    fixed = shape[0] if isinstance(shape[0], int) and shape[0] > 0 else None
    if fixed in (None, 1):  # every photo alone
        yield from ((f"photo {k + 1}", [p]) for k, p in enumerate(photos))
    if fixed != 1:  # one batch of several (the photos again where the batch is larger)
        b = fixed or 3
        yield f"photos, batch {b}", (photos * -(-b // len(photos)))[:b]
