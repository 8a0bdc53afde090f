"""Ultralytics' own description of an ONNX it exported: ``metadata_props`` with ``task``,
``names``, ``imgsz``, ``stride``, ``kpt_shape``, ``end2end`` (values written with Python's
``str()``: read here with :func:`ast.literal_eval`, which evaluates literals only, never code).

What it gives a bundle: the task (Ultralytics' ``segment`` is edgert's ``segment-instances``),
the labels, the input size, the preprocessing its predictor uses (letterbox with pad 114 and
plain bilinear resizing, RGB, /255; RT-DETR stretches; classifiers resize the short side and
centre-crop) and the head (YOLO, end-to-end or DETR; a pose model's keypoint shape).
"""

from __future__ import annotations

import ast

from edgert.runtime.errors import ModelError
from edgert.runtime.heads import Head
from edgert.runtime.preprocess import Preprocessing

from .source_model import SourceModel

TASKS = {
    "detect": "detect",
    "segment": "segment-instances",
    "pose": "pose",
    "obb": "obb",
    "classify": "classify",
}
FROM = "Ultralytics metadata"


def is_ultralytics(props: dict) -> bool:
    return props.get("author") == "Ultralytics" or {"task", "names", "imgsz"} <= set(props)


def _literal(props: dict, key: str, where: str):
    try:
        return ast.literal_eval(props[key])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise ModelError(f"{where}: {key} {props[key][:60]!r} is not a Python literal") from None


def _labels(names: object, where: str) -> list:
    if not isinstance(names, dict) or sorted(names) != list(range(len(names))):
        raise ModelError(f"{where}: names must map the class ids 0..N-1 to names")
    return [str(names[i]) for i in range(len(names))]


def _size(imgsz: object, where: str) -> tuple:
    if isinstance(imgsz, int):
        imgsz = [imgsz, imgsz]
    if (
        not isinstance(imgsz, (list, tuple))
        or len(imgsz) != 2
        or not all(type(v) is int and 1 <= v <= 16384 for v in imgsz)
    ):
        raise ModelError(f"{where}: imgsz {str(imgsz)[:40]} is not a size [height, width]")
    return int(imgsz[0]), int(imgsz[1])


def read(props: dict, outputs: list, src: SourceModel) -> None:
    """Describe ``src`` from Ultralytics' metadata ``props`` (``outputs``: the graph's output
    shapes, lists of ints, 0 or negative where symbolic), or ModelError with one sentence where
    the metadata is unreadable or contradicts the graph."""
    where = f"{src.spec}'s Ultralytics metadata"
    task = props.get("task")
    if task not in TASKS:
        raise ModelError(f"{where} names the task {task!r}; edgert runs {', '.join(sorted(TASKS))}")
    labels = _labels(_literal(props, "names", where), where)
    size = _size(_literal(props, "imgsz", where), where)
    end2end = props.get("end2end", "False") == "True"
    nc = len(labels)
    kpt = None
    if task == "pose":
        kpt = _literal(props, "kpt_shape", where) if "kpt_shape" in props else None
        if not (
            isinstance(kpt, (list, tuple)) and len(kpt) == 2 and kpt[1] in (2, 3) and kpt[0] >= 1
        ):
            raise ModelError(f"{where}: a pose model needs kpt_shape [K, 2 or 3], not {kpt!r}")
        kpt = (int(kpt[0]), int(kpt[1]))
    first = outputs[0] if outputs else []
    form = "end2end" if end2end else "yolo"
    if task == "detect" and not end2end and _detr(props, first, nc):
        form = "detr"
    _check(task, form, first, outputs, nc, kpt, where)
    src.task = TASKS[task]
    src.labels = labels
    src.head = Head(form, kpt, FROM) if task != "classify" else None
    if task == "classify":
        # the predictor: the short side resized to the size (PIL's antialiased bilinear), centre crop
        src.preprocessing = Preprocessing(
            size=size, resize="resize_crop", resize_short=min(size), interpolation="linear"
        )
    else:
        src.preprocessing = Preprocessing(
            size=size,
            resize="stretch" if form == "detr" else "letterbox",
            interpolation="bilinear",
            pad_value=114.0,
        )
    bits = [f"task {src.task}", f"{nc} labels", f"input {size[0]}x{size[1]}"]
    bits.append(
        src.preprocessing.resize + (" (pad 114)" if form != "detr" and task != "classify" else "")
    )
    if kpt:
        bits.append(f"keypoints {kpt[0]}x{kpt[1]}")
    if form != "yolo":
        bits.append({"end2end": "end-to-end head (no NMS)", "detr": "DETR head (no NMS)"}[form])
    version = props.get("version")
    src.read_from = f"{', '.join(bits)}: from the model's metadata (Ultralytics {version or '?'})"


def _detr(props: dict, first: list, nc: int) -> bool:
    """An RT-DETR head ([B, queries, 4 + nc]): by the output's shape where it is concrete, else
    by the model Ultralytics names in its description ("Ultralytics rtdetr-l model")."""
    if len(first) == 3 and all(d > 0 for d in first[1:]):
        return first[-1] == 4 + nc and first[1] != 4 + nc
    return "rtdetr" in props.get("description", "").lower()


def _check(task, form, first, outputs, nc, kpt, where) -> None:
    """The metadata against the graph's first output (symbolic dimensions are not checked)."""
    if len(first) < 2 or any(d <= 0 for d in first[1:]):
        return
    if task == "classify":
        if first[-1] != nc:
            raise ModelError(f"{where} names {nc} classes but the model scores {first[-1]}")
        return
    extra = {"pose": kpt[0] * kpt[1] if kpt else 0, "obb": 1, "detect": 0}.get(task, 0)
    if task == "segment":
        protos = [o for o in outputs[1:] if len(o) == 4]
        if not protos:
            raise ModelError(
                f"{where} says segment, and the model has no prototype output [B, P, h, w]"
            )
        extra = protos[0][1]
    if len(first) != 3:
        raise ModelError(f"{where} says {task}, and the first output {first} is not [batch, ., .]")
    if form == "detr":
        return
    if form == "end2end":
        want = 6 + extra
        if first[-1] != want:
            raise ModelError(
                f"{where} describes an end-to-end {task} head of {want} values per object "
                f"(box, score, class{', ' + str(extra) + ' extras' if extra else ''}); "
                f"the model gives {first[-1]}"
            )
        return
    if first[1] != 4 + nc + extra:
        what = f" + {kpt[0]}x{kpt[1]} keypoints" if kpt else f" + {extra}" if extra else ""
        raise ModelError(
            f"{where} describes {nc} classes{what}: {4 + nc + extra} values per candidate, and "
            f"the model's output gives {first[1]}"
        )
