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

from edgert.runtime.bundle import CONTROL, MAX_LABELS
from edgert.runtime.errors import ModelError, escape_controls
from edgert.runtime.images.preprocess import Preprocessing
from edgert.runtime.tasks.heads import Head

from .describe import MAX_KEYPOINTS
from .source_model import SourceModel

TASKS = {
    "detect": "detect",
    "segment": "segment-instances",
    "pose": "pose",
    "obb": "obb",
    "classify": "classify",
}
FROM = "Ultralytics metadata"


# What is read of the metadata is bounded before it is parsed (``ast.literal_eval`` holds 70 to
# 120 bytes per character of text: 18 MiB of names took 2.2 GB): ``names`` of MAX_LABELS
# classes whose names average 30 characters ("99999: 'a name of 30 characters', ": 41 bytes a
# class) fit in 4 MiB (3.9 MiB of them: 1.8 s, 285 MB); every other value read is a few
# characters.
MAX_NAMES_BYTES = 4 << 20
MAX_VALUE_BYTES = 4 << 10
READ = ("task", "imgsz", "kpt_shape", "end2end", "version")
SHOWN = 60  # characters of a value shown in a sentence


def is_ultralytics(props: dict) -> bool:
    return props.get("author") == "Ultralytics" or {"task", "names", "imgsz"} <= set(props)


def shown(value: object, limit: int = SHOWN) -> str:
    """``value`` as a sentence or the manifest may hold it: its ``str`` with control characters
    escaped (an ANSI escape or a line break never reaches a terminal) and at most ``limit``
    characters of it."""
    text = value if isinstance(value, str) else repr(value)
    cut = escape_controls(text[:limit])
    return cut + ("..." if len(text) > limit else "")


def quoted(value: object) -> str:
    """``repr`` of ``value`` (control characters escaped by it), a string cut at ``SHOWN``."""
    if isinstance(value, str):
        return repr(value[:SHOWN]) + ("..." if len(value) > SHOWN else "")
    return shown(value)


def _bounded(props: dict, where: str) -> None:
    """ModelError for a value over its bound, before anything parses it."""
    for key in ("names", *READ):
        limit = MAX_NAMES_BYTES if key == "names" else MAX_VALUE_BYTES
        text = props.get(key)
        if text is None or len(text) <= limit // 4 or len(text.encode("utf-8", "replace")) <= limit:
            continue
        why = (
            f"{MAX_LABELS} labels of about 30 characters" if key == "names" else "a few characters"
        )
        raise ModelError(
            f"{where}: {key} is {_amount(len(text.encode('utf-8', 'replace')))} of text; edgert "
            f"reads at most {_amount(limit)} there ({why})"
        )


def _amount(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB" if size >= 1 << 20 else f"{size / 1024:.1f} KiB"


def _literal(props: dict, key: str, where: str):
    try:
        return ast.literal_eval(props[key])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise ModelError(f"{where}: {key} {quoted(props[key])} is not a Python literal") from None


def _labels(names: object, where: str) -> list:
    """The class names of ``names`` ({0: 'person', 1: 'bicycle', ...}), or ModelError saying
    what is wrong with it in one sentence."""
    if not isinstance(names, dict) or not names:
        what = "empty" if isinstance(names, dict) else f"a {type(names).__name__}"
        raise ModelError(
            f"{where}: names is {what}; it must map the class ids 0..N-1 to names (one class "
            "at least)"
        )
    if len(names) > MAX_LABELS:
        raise ModelError(f"{where}: names has {len(names):,} classes; at most {MAX_LABELS:,}")
    odd = [k for k in names if type(k) is not int]
    if odd:
        raise ModelError(
            f"{where}: names has the key {quoted(odd[0])}; class ids are the integers 0..N-1"
        )
    n = len(names)
    outside = sorted(k for k in names if not 0 <= k < n)
    if outside:
        missing = sorted(set(range(n)) - set(names))
        raise ModelError(
            f"{where}: names must map the class ids 0..N-1 (0..{n - 1} for its {n} classes): "
            f"{_some(missing)} missing, {_some(outside)} beyond"
        )
    labels = [names[i] for i in range(n)]
    seen: dict = {}
    for i, label in enumerate(labels):
        if not isinstance(label, str):
            raise ModelError(f"{where}: names[{i}] is {shown(label)}, not a string")
        if not label.strip() or len(label) > 1000 or CONTROL.search(label):
            raise ModelError(
                f"{where}: names[{i}] {quoted(label)} must be 1-1000 characters on one line, "
                "not blank, without control characters"
            )
        if label in seen:
            raise ModelError(
                f"{where}: names[{seen[label]}] and names[{i}] are both {quoted(label)}; each "
                "class needs a name of its own"
            )
        seen[label] = i
    return labels


def _some(ids: list) -> str:
    more = f" and {len(ids) - 5:,} more" if len(ids) > 5 else ""
    return ", ".join(map(str, ids[:5])) + more


def _size(imgsz: object, where: str) -> tuple:
    if isinstance(imgsz, int):
        imgsz = [imgsz, imgsz]
    if (
        not isinstance(imgsz, (list, tuple))
        or len(imgsz) != 2
        or not all(type(v) is int and 1 <= v <= 16384 for v in imgsz)
    ):
        raise ModelError(f"{where}: imgsz {shown(imgsz, 40)} is not a size [height, width]")
    return int(imgsz[0]), int(imgsz[1])


def read(props: dict, outputs: list, src: SourceModel) -> None:
    """Describe ``src`` from Ultralytics' metadata ``props`` (``outputs``: the graph's output
    shapes, lists of ints, 0 or negative where symbolic), or ModelError with one sentence where
    the metadata is unreadable or contradicts the graph."""
    from edgert.runtime.tasks import TASK_SPECS

    where = f"{src.spec}'s Ultralytics metadata"
    _bounded(props, where)
    task = props.get("task")
    if task not in TASKS:
        raise ModelError(
            f"{where} names the task {quoted(task)}; edgert runs {', '.join(sorted(TASKS))}"
        )
    spec = TASK_SPECS[TASKS[task]]
    if "names" not in props:
        raise ModelError(f"{where} has no names (the class names: {{0: 'person', ...}})")
    labels = _labels(_literal(props, "names", where), where)
    size = _size(_literal(props, "imgsz", where), where)
    end2end = props.get("end2end", "False") == "True"
    nc = len(labels)
    kpt = _keypoints(props, where) if spec.keypoints else None
    first = outputs[0] if outputs else []
    extra = spec.head_extras(kpt, outputs) if spec.head_extras is not None else None
    form = "end2end" if end2end else "yolo"
    if extra == 0 and not end2end and _detr(props, first, nc):
        form = "detr"
    _check(spec, form, first, extra, nc, where, kpt)
    src.task = spec.name
    src.labels = labels
    src.head = Head(form, kpt, FROM) if spec.head_extras is not None else None
    if spec.class_scores:
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
    resize = src.preprocessing.resize
    bits = [f"task {src.task}", f"{nc} labels", f"input {size[0]}x{size[1]}"]
    bits.append(resize + (" (pad 114)" if resize == "letterbox" else ""))
    if kpt:
        bits.append(f"keypoints {kpt[0]}x{kpt[1]}")
    if form != "yolo":
        bits.append({"end2end": "end-to-end head (no NMS)", "detr": "DETR head (no NMS)"}[form])
    version = shown(props.get("version") or "?", 40)
    src.read_from = f"{', '.join(bits)}: from the model's metadata (Ultralytics {version})"


def _keypoints(props: dict, where: str) -> tuple:
    kpt = _literal(props, "kpt_shape", where) if "kpt_shape" in props else None
    if not (
        isinstance(kpt, (list, tuple))
        and len(kpt) == 2
        and all(type(v) is int for v in kpt)
        and 1 <= kpt[0] <= MAX_KEYPOINTS
        and kpt[1] in (2, 3)
    ):
        raise ModelError(
            f"{where}: a pose model needs kpt_shape [K, 2 or 3] with K from 1 to "
            f"{MAX_KEYPOINTS}, not {shown(kpt, 40)}"
        )
    return int(kpt[0]), int(kpt[1])


def _detr(props: dict, first: list, nc: int) -> bool:
    """An RT-DETR head ([B, queries, 4 + nc]): by the output's shape where it is concrete, else
    by the model Ultralytics names in its description ("Ultralytics rtdetr-l model")."""
    if len(first) == 3 and all(d > 0 for d in first[1:]):
        return first[-1] == 4 + nc and first[1] != 4 + nc
    return "rtdetr" in props.get("description", "")[:MAX_VALUE_BYTES].lower()


def _check(spec, form, first, extra, nc, where, kpt=None) -> None:
    """The metadata against the graph's first output (symbolic dimensions are not checked)."""
    if len(first) < 2 or any(d <= 0 for d in first[1:]):
        return
    if spec.class_scores:
        if first[-1] != nc:
            raise ModelError(f"{where} names {nc} classes but the model scores {first[-1]}")
        return
    if extra is None:
        raise ModelError(
            f"{where} says {spec.name}, and the model has no prototype output [B, P, h, w]"
        )
    if len(first) != 3:
        raise ModelError(
            f"{where} says {spec.name}, and the first output {first} is not [batch, ., .]"
        )
    if form == "end2end" and first[-1] != 6 + extra:
        raise ModelError(
            f"{where} describes an end-to-end {spec.name} head of {6 + extra} values per object "
            f"(box, score, class{', ' + str(extra) + ' extras' if extra else ''}); "
            f"the model gives {first[-1]}"
        )
    what = f"{kpt[0]}x{kpt[1]} keypoints" if kpt else f"{extra} values"
    if form == "yolo" and first[1] != 4 + nc + extra:
        raise ModelError(
            f"{where} describes {nc} classes + {what}: {4 + nc + extra} values per candidate, "
            f"and the model's output gives {first[1]}"
        )
