"""What the bundle says about a model beyond its graph: task, labels and preprocessing.

Zoo models bring their own; for other models the export command's options set them
(``--task detect --labels coco.txt --resize letterbox``), with the input size and layout taken from
the model's input shape.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from edgert.runtime.bundle import TensorSpec, valid_labels
from edgert.runtime.errors import BundleError, ModelError
from edgert.runtime.images.preprocess import Preprocessing
from edgert.runtime.tasks import TASK_SPECS, task_spec

from .source_model import SourceModel

MAX_KEYPOINTS = 1000  # what a manifest's head.kpt_shape may say (runtime/tasks/heads.py)
PREPROCESS_KEYS = (
    "resize",
    "size",
    "resize_short",
    "interpolation",
    "channel_order",
    "layout",
    "scale",
    "mean",
    "std",
    "pad_value",
)


def read_labels(path: str | Path) -> list[str]:
    """Class names from a JSON list or a text file with one name per line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a BOM (Notepad's UTF-8) is not in a label
    except OSError as exc:
        raise ModelError(f"cannot read labels file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise ModelError(
            f"labels file {path} is not UTF-8 text (a JSON list or one name per line)"
        ) from None
    if "\x00" in text:
        raise ModelError(
            f"labels file {path} is binary, not text (a JSON list or one name per line)"
        )
    if path.suffix.lower() == ".json":
        try:
            labels = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ModelError(f"labels file {path} is not valid JSON: {exc}") from exc
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise ModelError(f"labels file {path} must hold a JSON list of strings")
    else:
        labels = [line.strip() for line in text.splitlines() if line.strip()]
    if not labels:
        raise ModelError(f"labels file {path} is empty")
    try:  # what the manifest will hold: said here naming the file, not the manifest
        valid_labels(labels, f"labels file {path}")
    except BundleError as exc:
        raise ModelError(str(exc)) from None
    return labels


def check_labels(task: str, labels, outputs: list[TensorSpec]) -> None:
    """A classifier's labels must match its number of classes (the first output's last axis)."""
    if not TASK_SPECS[task].class_scores or not labels or not outputs or not outputs[0].shape:
        return
    classes = outputs[0].shape[-1]
    if classes > 0 and classes != len(labels):
        raise ModelError(
            f"the labels name {len(labels)} classes but the model's output {outputs[0].name} has "
            f"{classes}; give a labels file with one name per class"
        )


def check_head_labels(src: SourceModel, outputs: list[TensorSpec]) -> None:
    """A YOLO head's channels (4 + classes + the task's extras, per candidate) must leave as
    many classes as the labels name, or every frame's decode would fail."""
    spec = TASK_SPECS[src.task]
    head = src.head
    if spec.head_extras is None or head is None or head.form != "yolo" or not src.labels:
        return
    first = tuple(outputs[0].shape) if outputs else ()
    if len(first) != 3 or not first[2] > first[1] > 0:
        return
    extra = spec.head_extras(head.kpt_shape, [tuple(o.shape) for o in outputs])
    if extra is None or first[1] - 4 - extra == len(src.labels):
        return
    what = f" and {extra} values after them" if extra else ""
    raise ModelError(
        f"the labels name {len(src.labels)} classes but the model's output {outputs[0].name} "
        f"({'x'.join(map(str, first))}) holds 4 box values, {first[1] - 4 - extra} classes"
        f"{what}; give a labels file with one name per class"
    )


# which options, and which field of the model's own metadata, decide each part of the description
_DECIDED_BY = {
    "size": (("task", "size", "resize", "channel_order", "layout"), "imgsz"),
    "classes": (("task", "labels", "keypoints"), "names"),
    "keypoints": (("task", "keypoints"), "kpt_shape"),
    "task": (("task",), "task"),
}


def check_fit(src: SourceModel, inputs: list, outputs: list, given: dict) -> None:
    """The bundle's final description (task, labels, head, preprocessing) against the graph's
    concrete shapes: the check the runtime makes when it opens the bundle
    (runtime/tasks/fit.py), made before anything is written, so that export never writes a
    bundle every run refuses. ModelError naming the options (``given``: option -> value, None
    where not given) or the metadata the contradicting part came from."""
    from edgert.runtime.tasks.fit import misfit

    found = misfit(src.task, src.labels, src.head, src.preprocessing, inputs, outputs)
    if found is None:
        return
    options, field = _DECIDED_BY[found.part]
    said = [f"--{k.replace('_', '-')} {given[k]}" for k in options if given.get(k) is not None]
    if src.read_from:
        said.append(f"the Ultralytics metadata's {field}")
    by = f" (as {' and '.join(said)} describe{'s' if len(said) == 1 else ''} it)" if said else ""
    raise ModelError(f"the bundle would not run: {found.text}{by}; nothing was written")


def default_preprocessing(spec: TensorSpec, task: str) -> Preprocessing:
    """A starting point from the input's shape: NCHW or NHWC, 1 or 3 channels, its spatial size;
    the task's spec says whether it letterboxes (detectors)."""
    shape = spec.shape
    letterbox = TASK_SPECS[task].letterbox
    if len(shape) != 4:
        raise ModelError(
            f"input {spec.name} has shape {list(shape)}; image preprocessing needs a 4-D input"
        )
    if shape[1] in (1, 3):
        layout, channels, hw = "NCHW", shape[1], shape[2:]
    elif shape[3] in (1, 3):
        layout, channels, hw = "NHWC", shape[3], shape[1:3]
    else:
        raise ModelError(f"input {spec.name} shape {list(shape)} has no channel axis of 1 or 3")
    return Preprocessing(
        size=(max(hw[0], 1), max(hw[1], 1)),
        resize="letterbox" if letterbox else "stretch",
        # YOLO-style detectors are trained on plain bilinear resizing (no area averaging)
        interpolation="bilinear" if letterbox else "linear",
        layout=layout,
        channel_order="GRAY" if channels == 1 else "RGB",
        mean=(0.0,) * channels,
        std=(1.0,) * channels,
        # the tensor the input takes: a half-precision model float16; a model that takes pixels
        # (uint8) gets them as they are
        dtype=spec.dtype if spec.dtype in ("float16", "uint8") else "float32",
        **({"scale": 1.0} if spec.dtype == "uint8" else {}),
    )


def describe(
    src: SourceModel,
    inputs: list[TensorSpec],
    task: str | None = None,
    labels: str | Path | None = None,
    preprocess: dict | None = None,
    outputs: list[TensorSpec] | None = None,
    keypoints: str | None = None,
) -> list:
    """Apply the user's task / labels / preprocessing / keypoint options to ``src`` (in place);
    where they differ from what the model's own metadata said, they win: the sentences saying so
    are returned."""
    notes = []
    if task is not None:
        chosen = task_spec(task).name
        if src.read_from and chosen != src.task:
            notes.append(f"--task {chosen} given: the model's metadata says {src.task}")
        src.task = chosen
    if labels is not None:
        src.labels = read_labels(labels)
        if src.read_from:
            notes.append(
                f"--labels {labels} given: {len(src.labels)} labels instead of the metadata's"
            )
    if src.read_from and any(v is not None for v in (preprocess or {}).values()):
        given = ", ".join(
            f"--{k.replace('_', '-')}" for k, v in preprocess.items() if v is not None
        )
        notes.append(f"{given} given: instead of the preprocessing the metadata implies")
    if task is None and not src.read_from and TASK_SPECS[src.task].takes_any:  # no task yet
        guessed, note = guess_task(outputs or [], src.labels, keypoints)
        if guessed is not None:
            src.task = guessed
        if note:
            notes.append(note)
    _describe_head(src, outputs or [], keypoints, notes)
    _apply_preprocessing(src, inputs, preprocess)
    return notes


def _apply_preprocessing(
    src: SourceModel, inputs: list[TensorSpec], preprocess: dict | None
) -> None:
    """The model's default preprocessing for an image task, with the options given over it
    (checked: known keys, one mean and std per channel)."""
    overrides = {k: v for k, v in (preprocess or {}).items() if v is not None}
    unknown = set(overrides) - set(PREPROCESS_KEYS)
    if unknown:
        raise ModelError(f"unknown preprocessing option(s): {', '.join(sorted(unknown))}")
    wants_images = TASK_SPECS[src.task].images
    if src.preprocessing is None and (overrides or (wants_images and inputs)):
        base = default_preprocessing(inputs[0], src.task)
        if any(d < 0 for d in inputs[0].shape[1:]) and "size" not in overrides:
            raise ModelError(f"input {inputs[0].name} has dynamic spatial size; give --size HxW")
        src.preprocessing = base
    if overrides:
        fields = _normalise(overrides)
        if fields.get("resize") == "letterbox" and "interpolation" not in fields:
            fields["interpolation"] = "bilinear"  # what YOLO training used; "linear" would average
        channels = (
            1 if fields.get("channel_order", src.preprocessing.channel_order) == "GRAY" else 3
        )
        for key in ("mean", "std"):
            if key in fields and len(fields[key]) != channels:
                raise ModelError(
                    f"--mean and --std need {channels} values (one per channel); --{key} has {len(fields[key])}"
                )
        if channels != src.preprocessing.channels:
            fields.setdefault("mean", (0.0,) * channels)
            fields.setdefault("std", (1.0,) * channels)
        try:
            src.preprocessing = replace(src.preprocessing, **fields)
        except (TypeError, ValueError) as exc:
            raise ModelError(f"invalid preprocessing option: {exc}") from exc


def guess_task(outputs: list, labels, keypoints: str | None) -> tuple:
    """(task, sentence) for a model with no metadata and no ``--task``, from its outputs' shapes
    where they say one task only, else (None, the sentence naming the flags to give; None where
    nothing looks like a task's outputs: a generic bundle):

    - [B, C, N] and [B, P, h, w], C > 4 + P: a YOLO instance-segmentation head (its prototypes);
      [B, K, 6 + P] with the same prototypes, its end-to-end form;
    - [B, K, 6]: an end-to-end detector's rows (box, score, class);
    - [B, C, N] (N > C, C > 4): a YOLO head whose channels are 4 + classes + extras: with
      ``--labels`` the extras are counted: none is detect, one (an angle) obb, K x D pose with
      ``--keypoints KxD``; without, detect, pose and obb cannot be told apart;
    - [B, C] with ``--labels`` naming C classes: a classifier."""
    shapes = [tuple(o.shape) for o in outputs]
    if not shapes or any(d <= 0 for d in shapes[0][1:]):
        return None, None
    first = shapes[0]
    shown = "x".join(map(str, first))
    nc = len(labels) if labels else None
    kd = parse_keypoints(keypoints) if keypoints else None
    why = f"guessed from the output shapes ({', '.join('x'.join(map(str, s)) for s in shapes)})"
    protos = [s for s in shapes[1:] if len(s) == 4 and s[1] > 0]
    if len(first) == 3 and len(shapes) == 2 and protos:
        p = protos[0][1]
        if first[2] > first[1] > 4 + p or first[2] == 6 + p:
            return "segment-instances", f"task segment-instances: {why}"
    if len(first) != 3:
        if len(first) == 2 and nc is not None and first[1] == nc:
            return "classify", f"task classify: {why}, {nc} classes as the labels name"
        return None, None
    if first[2] == 6 and first[1] > 6 and len(shapes) == 1:
        return "detect", f"task detect (end-to-end rows): {why}"
    if not (first[2] > first[1] > 4) or len(shapes) != 1:
        return None, None
    if nc is not None:
        extra = first[1] - 4 - nc
        if extra == 0:
            return "detect", f"task detect: {why}, {nc} classes as the labels name"
        if extra == 1:
            return "obb", f"task obb: {why}, {nc} classes and an angle"
        if kd is not None and extra == kd[0] * kd[1]:
            return "pose", f"task pose: {why}, {nc} classes and {kd[0]}x{kd[1]} keypoints"
        return None, (
            f"the output {shown} looks like a YOLO head with {extra} values after the labels' "
            f"{nc} classes: give --task pose with --keypoints KxD if they are keypoints (a "
            "generic bundle was made)"
        )
    return None, (
        f"the output {shown} looks like a YOLO head (4 + classes + extras, per candidate): give "
        "--task detect, pose (with --keypoints KxD) or obb, with --labels, to decode it (a "
        "generic bundle was made)"
    )


def parse_keypoints(text: str) -> tuple:
    """ "17x3" -> (17, 3): K keypoints of D values (2: x, y; 3: with visibility)."""
    try:
        k, d = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ModelError(f"--keypoints {text!r} is not of the form KxD, e.g. 17x3") from None
    if not 1 <= k <= MAX_KEYPOINTS or d not in (2, 3):
        raise ModelError(
            f"--keypoints {text}: K must be from 1 to {MAX_KEYPOINTS} and D 2 (x, y) or 3 "
            "(x, y, visibility)"
        )
    return k, d


def _describe_head(src: SourceModel, outputs: list, keypoints: str | None, notes: list) -> None:
    """The head of a detector-family model: the metadata's, else read from the first output's
    shape (a [B, K, 6 + extras] output is end-to-end), with ``--keypoints`` for pose."""
    from edgert.runtime.tasks.heads import Head

    spec = TASK_SPECS[src.task]
    if spec.head_extras is None:
        src.head = None
        return
    head = src.head or Head(source="the output shapes")
    kpt = head.kpt_shape
    if keypoints is not None:
        kpt = parse_keypoints(keypoints)
        if head.kpt_shape is not None and kpt != head.kpt_shape:
            said = "x".join(map(str, head.kpt_shape))
            notes.append(f"--keypoints {keypoints} given: the model's metadata says {said}")
    if spec.keypoints and kpt is None:
        raise ModelError(
            f"a {spec.kind} model needs its keypoint shape: give --keypoints KxD (e.g. 17x3)"
        )
    form = head.form
    first = outputs[0].shape if outputs else ()
    if src.head is None and len(first) == 3 and first[-1] > 0 and first[1] > 0:
        extra = spec.head_extras(kpt, [o.shape for o in outputs])
        if extra is not None and first[-1] == 6 + extra and first[1] > first[-1]:
            form = "end2end"
    src.head = Head(form, kpt if spec.keypoints else None, head.source)


def parse_size(size) -> tuple:
    """--size "640x640" (or a (height, width) already) -> (height, width)."""
    if not isinstance(size, str):
        return tuple(size)
    try:
        h, w = (int(v) for v in size.lower().split("x"))
    except ValueError:
        raise ModelError(f"--size {size!r} is not of the form 640x640") from None
    return h, w


def _normalise(overrides: dict) -> dict:
    out = dict(overrides)
    if out.get("size") is not None:
        out["size"] = parse_size(out["size"])
    for key in ("mean", "std"):
        if isinstance(out.get(key), str):
            try:
                out[key] = tuple(float(v) for v in out[key].split(","))
            except ValueError:
                raise ModelError(
                    f"--{key} {out[key]!r} is not a comma-separated list of numbers"
                ) from None
    return out
