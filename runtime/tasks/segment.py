"""The segment task: per-pixel class scores -> a semantic mask per image (its shape and the
pixels of each class in the records). No measure compares two segmenters yet: a swap check or a
gate refuses to judge one rather than pass it."""

from __future__ import annotations

from ..results import Result, SemanticMask


def decode(model, values: list, transforms: list) -> list:
    from .postprocess import segment

    return [
        Result("semantic", model.task, semantic=SemanticMask.of(mask))
        for mask in segment(values[0])
    ]
