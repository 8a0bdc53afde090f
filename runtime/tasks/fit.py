"""Whether a bundle's description (task, labels, head, preprocessing) fits its graph's shapes.

One check, asked where ``edgert export`` writes a bundle and where the runtime opens one for its
task (:func:`check_bundle`, from ``load_task_model``: ``edgert run``, ``camera``, ``bench``,
``serve``), so that export never writes what every ``run`` would then
refuse, and the two never disagree. It refuses what the decoders and the engine would fail on
for every frame (an input of another size, a head whose channels are not 4 + classes + extras,
a pose head with no keypoint shape, a detector with no class at all); only concrete dimensions
are compared: a symbolic one (-1) may be anything.
"""

from __future__ import annotations

from typing import NamedTuple


class Misfit(NamedTuple):
    """What does not fit: ``part`` (``size``, ``classes``, ``keypoints`` or ``task``: which part
    of the description is at odds with the graph) and the sentence saying how."""

    part: str
    text: str


def _dims(shape) -> str:
    return "x".join("?" if d < 0 else str(d) for d in shape)


def misfit(task, labels, head, preprocessing, inputs, outputs) -> Misfit | None:
    """The first thing in the description that contradicts the graph, or None. ``head``: a
    :class:`~.heads.Head` or None; ``inputs`` / ``outputs``: the graph's TensorSpecs."""
    from . import TASK_SPECS

    spec = TASK_SPECS.get(task)
    if spec is None or spec.model is not None:  # a bundle of several networks checks its own
        return None
    if labels is not None and not len(labels):
        return Misfit("classes", "the labels name no class (a model has at least one)")
    found = _input_misfit(preprocessing, inputs) if spec.images else None
    return found or _head_misfit(spec, labels, head, [tuple(o.shape) for o in outputs or ()])


def _input_misfit(pre, inputs) -> Misfit | None:
    """The tensor the preprocessing makes (:meth:`~.preprocess.Preprocessing.output_shape`, what
    the engine is handed) against the first input's shape."""
    if pre is None or not inputs or len(inputs[0].shape) != 4:
        return None
    spec = inputs[0]
    want = pre.output_shape(pre.size)  # (C, H, W) or (H, W, C); -1 where it takes any size
    got = tuple(spec.shape[1:])
    if all(w < 0 or g < 0 or w == g for w, g in zip(want, got)):
        return None
    what = "grey" if pre.channels == 1 else "colour"
    return Misfit(
        "size",
        f"the preprocessing makes {what} {pre.size[0]}x{pre.size[1]} {pre.layout} tensors "
        f"({_dims(want)}) and input {spec.name!r} takes {_dims(spec.shape)}",
    )


def _head_misfit(spec, labels, head, shapes: list) -> Misfit | None:
    """A detector-family head against the first output, as the task's decoder reads it."""
    from .heads import Head

    if spec.head_extras is None or not shapes:
        return None
    head = head or Head()
    if spec.keypoints and head.kpt_shape is None:
        return Misfit("keypoints", f"a {spec.kind} model records its keypoint shape (K x D)")
    first = shapes[0]
    if len(first) != 3:
        return Misfit(
            "task", f"a {spec.kind} head's first output is [batch, ., .], not {_dims(first)}"
        )
    nc = len(labels) if labels else None
    if spec.name == "detect" and (head.form == "yolo" or len(shapes) != 1):
        return _detect_misfit(first, nc, len(shapes))
    extra = spec.head_extras(head.kpt_shape, shapes)
    if extra is None:
        return Misfit("task", f"a {spec.kind} model has a prototype output [B, P, h, w] too")
    if head.form == "end2end":
        if first[2] > 0 and first[2] != 6 + extra:
            return Misfit(
                "classes",
                f"an end-to-end head's rows hold 6 + {extra} values (box, score, class, extras); "
                f"output {_dims(first)} holds {first[2]}",
            )
        return None
    if head.form == "detr":
        return _no_classes(first, first[2], first[2] - 4, nc)
    if first[1] > 0 and nc is not None and first[1] != 4 + nc + extra:
        return Misfit(
            "classes",
            f"output {list(first)} is not [batch, 4 + {nc} classes + {extra}, candidates]",
        )
    return _no_classes(first, first[1], first[1] - 4 - extra, nc)


def _detect_misfit(first, nc, outputs: int) -> Misfit | None:
    """A YOLO detector's one output (:func:`~.detection.yolo_layout`, the decoder's own test),
    or an SSD pair (boxes, scores: not checked here)."""
    from ..errors import ShapeError
    from .detection import yolo_layout

    if outputs == 2:
        return None
    if outputs != 1:
        return Misfit(
            "task",
            f"a detector has one YOLO output or two SSD outputs (boxes, scores), not {outputs}",
        )
    if first[1] <= 0 or first[2] <= 0:
        return None
    if nc is not None:
        try:
            yolo_layout(first, nc)
        except ShapeError as exc:
            return Misfit("classes", str(exc))
        return None
    v8 = yolo_layout(first, None) == "v8"
    return _no_classes(first, 1, first[1] - 4 if v8 else first[2] - 5, nc)


def _no_classes(first, dim: int, classes: int, nc) -> Misfit | None:
    """Where no labels say how many classes there are, the output's shape must leave one
    (``classes``: what its dimension ``dim`` leaves, unknown where that is symbolic)."""
    if nc is not None or dim < 0 or classes >= 1:
        return None
    return Misfit(
        "classes", f"output {_dims(first)} leaves no class scores (a model has one at least)"
    )


def check_bundle(manifest, where: str) -> None:
    """BundleError where a bundle's description contradicts its graph's shapes (a head of other
    classes, an input of another size): every frame would fail, so it is refused when opened."""
    from ..errors import BundleError

    found = misfit(
        manifest.task,
        manifest.labels,
        manifest.head,
        manifest.preprocessing,
        manifest.inputs,
        manifest.outputs,
    )
    if found is not None:
        raise BundleError(f"{where}: {found.text}, so no frame could run; export the model again")
