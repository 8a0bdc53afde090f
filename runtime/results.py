"""Typed results: one :class:`Result` per image, whatever the task.

    result = model(bgr_image)
    for obj in result.objects:          # detectors (and every task whose results are objects)
        print(obj.label, obj.score, obj.box, obj.track_id, obj.extras)
    print(result.classes[:1])           # classifiers: ClassScore(index, label, score), best first
    print(result.to_records())          # the JSON edgert writes (JSONL, MQTT, events, Triton)

A result holds one kind of content: ``objects`` (boxes in source pixels, with scores, class ids,
labels, track ids and per-object extras such as keypoints, masks, angles or second-stage
labels), ``classes`` (top-k class scores), a ``semantic`` mask (per-pixel classes), an
``embedding`` (an encoder's vector, :class:`Embedding`), or ``raw``
(the outputs' names, shapes and dtypes of a generic model). Code that uses results reads these
fields; what a task's results mean for a comparison, the overlay or ``edgert run`` is the task's
own hook in its :class:`~edgert.runtime.tasks.TaskSpec`, never a question of which task it is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["ClassScore", "Detection", "Embedding", "Result", "SemanticMask"]

KINDS = ("objects", "classes", "semantic", "raw", "embedding")


@dataclass(frozen=True)
class Detection:
    """One object: a box (x1, y1, x2, y2 in source-image pixels), its score, class id and
    label; the track holding it (None: untracked, or no confirmed track yet) and per-object
    ``extras`` (written after the fixed fields, in their order: a track's ``age_s``, keypoints,
    ...)."""

    box: tuple[float, float, float, float]
    score: float
    class_id: int
    label: str
    track_id: int | None = None
    extras: dict[str, Any] = field(default_factory=dict, hash=False)
    # an instance mask (tasks/instances.py: a bitmap in model pixels), never written to JSON:
    # records carry its area and outline among the extras
    mask: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_record(cls, d: dict) -> Detection:
        """A record edgert wrote (``box``, ``score``, ``class_id``, ``label``; a tracked one's
        ``track_id``) as a Detection: the one place a record is read back."""
        return cls(
            tuple(float(v) for v in d["box"]),
            float(d.get("score", 1.0)),
            int(d.get("class_id", 0)),
            str(d.get("label", d.get("class_id", 0))),
            d.get("track_id"),
        )

    def with_extras(self, **extras) -> Detection:
        """This object with ``extras`` added to (or replacing) its own."""
        return dataclasses.replace(self, extras={**self.extras, **extras})

    def moved_to(self, box) -> Detection:
        """This object with its box at ``box`` (x1, y1, x2, y2): what a track predicted to a
        frame the detector skipped shows. Extras that are points in source pixels (lists of
        ``[x, y, ...]``: keypoints, a mask's outline, an oriented box's corners) and an oriented
        box's centre (``rbox``) follow the box, scaled with its sides; other values (a
        keypoint's visibility, an angle, a mask's area) are kept; the bitmap is not."""
        ox1, oy1, ox2, oy2 = (float(v) for v in self.box)
        nx1, ny1, nx2, ny2 = (float(v) for v in box)
        sx = (nx2 - nx1) / (ox2 - ox1) if ox2 > ox1 else 1.0
        sy = (ny2 - ny1) / (oy2 - oy1) if oy2 > oy1 else 1.0

        def point(p):
            x, y = nx1 + (p[0] - ox1) * sx, ny1 + (p[1] - oy1) * sy
            return [round(x, 2), round(y, 2), *p[2:]]

        extras = {}
        for key, value in self.extras.items():
            if key == "rbox" and isinstance(value, list) and len(value) == 5:
                value = point(value[:2]) + [value[2] * sx, value[3] * sy, value[4]]
            elif _points(value):
                value = [point(p) for p in value]
            extras[key] = value
        return dataclasses.replace(self, box=tuple(box), extras=extras, mask=None)

    def to_dict(self) -> dict:
        """Its record without tracking: box, label, score, class id, then the extras."""
        return {
            "box": [round(float(v), 2) for v in self.box],
            "label": self.label,
            "score": round(float(self.score), 5),
            "class_id": int(self.class_id),
            **self.extras,
        }

    def to_record(self, tracked: bool = False) -> dict:
        """Its JSON record; with tracking, ``track_id`` after the fixed fields."""
        record = self.to_dict()
        if tracked:
            extras = {k: record.pop(k) for k in self.extras}
            record["track_id"] = self.track_id
            record.update(extras)
        return record


def _points(value) -> bool:
    """Whether an extra is a list of points ([x, y, ...] each)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(p, list) and len(p) >= 2 and all(isinstance(v, (int, float)) for v in p)
            for p in value
        )
    )


@dataclass(frozen=True)
class ClassScore:
    """One of a classifier's top-k: the class index, its label and its probability."""

    index: int
    label: str
    score: float

    def to_record(self) -> dict:
        return {"label": self.label, "index": int(self.index), "score": round(float(self.score), 6)}


@dataclass(frozen=True)
class SemanticMask:
    """Per-pixel classes of one image: the mask [H, W] in model pixels (None where only its
    counts were kept) and the pixels per class."""

    shape: tuple[int, ...]
    classes: dict[int, int]
    mask: np.ndarray | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, mask: np.ndarray) -> SemanticMask:
        found, counts = np.unique(mask, return_counts=True)
        return cls(
            tuple(int(v) for v in mask.shape),
            {int(c): int(n) for c, n in zip(found, counts)},
            mask,
        )

    def to_record(self) -> dict:
        return {"mask_shape": list(self.shape), "classes": dict(self.classes)}


@dataclass(frozen=True)
class Embedding:
    """One image's vector (an encoder's output, L2-normalised by edgert), its size and the norm
    the encoder gave it before the normalisation."""

    vector: np.ndarray = field(compare=False, repr=False)
    norm: float

    @property
    def size(self) -> int:
        return int(self.vector.size)

    def to_record(self) -> dict:
        return {
            "size": self.size,
            "norm": round(float(self.norm), 6),
            "vector": [round(float(v), 6) for v in self.vector],
        }


@dataclass(frozen=True)
class Result:
    """The results of one image (see the module's text). ``tracked``: a tracker ran on it (each
    object's record says its ``track_id``); ``predicted``: not computed on this frame (a skipped
    frame's held results or a tracker's predictions; each record says ``predicted``)."""

    kind: str = "objects"
    task: str = ""  # the task whose model gave it: its TaskSpec's hooks read it (draw, ...)
    objects: list[Detection] = field(default_factory=list)
    classes: list[ClassScore] = field(default_factory=list)
    semantic: SemanticMask | None = None
    raw: dict[str, dict] | None = None
    embedding: Embedding | None = None
    tracked: bool = False
    predicted: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"a result's kind is one of {', '.join(KINDS)}, not {self.kind!r}")

    @classmethod
    def of_objects(cls, objects, task: str = "", **marks) -> Result:
        return cls("objects", task, objects=list(objects), **marks)

    @classmethod
    def of_classes(cls, classes, task: str = "") -> Result:
        return cls("classes", task, classes=list(classes))

    def replace(self, **changes) -> Result:
        return dataclasses.replace(self, **changes)

    def held(self) -> Result:
        """These results marked as not computed on the frame that carries them."""
        return self.replace(predicted=True)

    def top(self) -> tuple[str, float] | None:
        """(label, score) of the first class or object, or None."""
        first = (self.classes or self.objects or [None])[0]
        return None if first is None else (first.label, float(first.score))

    def to_records(self):
        """The JSON edgert writes for this image: a list of records (objects, classes) or one
        record (a semantic mask, an embedding, a generic model's outputs)."""
        if self.kind == "raw":
            return dict(self.raw or {})
        if self.kind == "semantic":
            return self.semantic.to_record() if self.semantic is not None else {}
        if self.kind == "embedding":
            return self.embedding.to_record() if self.embedding is not None else {}
        mark = {"predicted": True} if self.predicted else {}
        if self.kind == "classes":
            return [dict(c.to_record(), **mark) for c in self.classes]
        return [dict(o.to_record(self.tracked), **mark) for o in self.objects]


def records(result):
    """``result.to_records()``, or ``result`` itself where it is not a :class:`Result` (None, a
    failed image's error)."""
    return result.to_records() if isinstance(result, Result) else result
