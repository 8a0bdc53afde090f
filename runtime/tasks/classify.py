"""The classify task: class scores -> the top-k labels per image, and what a classifier's
results mean to the rest of edgert (its :class:`~edgert.runtime.tasks.TaskSpec` hooks)."""

from __future__ import annotations

from ..results import ClassScore, Result


def decode(model, values: list, transforms: list) -> list:
    from .postprocess import classify

    return [
        Result.of_classes((ClassScore(c.index, c.label, c.score) for c in row), model.task)
        for row in classify(values[0], model.labels, model.top_k)
    ]


def compare(ref: list, got: list) -> dict:
    """Top-1 agreement of ``got`` with ``ref`` (per image :class:`Result` lists)."""
    same = [
        bool(r.classes) and bool(g.classes) and r.classes[0].label == g.classes[0].label
        for r, g in zip(ref, got)
    ]
    return {"frames": len(ref), "agreement": sum(same) / max(1, len(same))}


def judge(measures: dict, bounds, what: str):
    """Why ``measures`` refuse a candidate under ``bounds.min_agreement``, or None."""
    if measures["agreement"] < bounds.min_agreement:
        return (
            f"the candidate agrees with the model in use on {measures['agreement']:.0%} of "
            f"{measures['frames']} {what} (top-1), under {bounds.min_agreement:.0%}"
        )
    return None


def observed(result: Result) -> list:
    """What a frame counts for in the rollback watch: the top-1 (label, score)."""
    return [(c.label, float(c.score)) for c in result.classes[:1]]


def draw(out, result: Result) -> list:
    """The overlay's lines for a classifier: its top three."""
    return [f"{c.label} {c.score:.2f}" for c in result.classes[:3]]


def describe(result: Result) -> list:
    """``edgert run``'s lines: score and label of each of the top-k."""
    return [f"  {c.score:7.4f}  {c.label}" for c in result.classes]
