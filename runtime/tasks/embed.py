"""The embed task: an encoder's output -> one L2-normalised vector per image (a CLIP-style image
tower, a re-identification network, a classifier cut at its penultimate layer), and what an
encoder's results mean to the rest of edgert (its :class:`~edgert.runtime.tasks.TaskSpec`
hooks): the swap check compares two encoders' vectors of the same frames, the build's gate the
quantized model's neighbours against FP32's, and ``health`` refuses an encoder whose vectors
are NaN, constant or collapsed when a bundle is loaded (``edgert run``, the camera, the server
and every swap load through :func:`~edgert.runtime.tasks.load_task_model`)."""

from __future__ import annotations

import numpy as np

from .. import embeddings
from ..results import Embedding, Result

# the swap check's and the gate's neighbours: k nearest of each sample among the others
SWAP_K = 5
GATE_K = 10
PROBES = 7  # the bundled photos the load's health check runs (a few ms each)


def decode(model, values: list, transforms: list) -> list:
    """One :class:`Embedding` per image: the first output's row, flattened and L2-normalised
    (the manifest's ``embedding.normalized`` records it: after the graph, by edgert)."""
    unit, norms = embeddings.normalise(values[0])
    return [
        Result("embedding", model.task, embedding=Embedding(u, float(n)))
        for u, n in zip(unit, norms)
    ]


def vectors(results: list) -> np.ndarray:
    """The unit vectors of a list of embed Results, [N, D]."""
    return np.stack([r.embedding.vector for r in results]) if results else np.zeros((0, 0))


def compare(ref: list, got: list) -> dict:
    """How far ``got``'s vectors (a candidate's) are the model in use's (``ref``) on the same
    images: ``agreement``, the mean cosine of each image's two vectors (0 where their sizes
    differ: vectors stored before a swap compare only with vectors of the same space); the
    neighbours each image has among the others kept (``neighbours``, k = min(5, images - 1))
    and the candidate's ``spread`` are reported (a still scene's frames are alike whatever the
    encoder: the candidate's health was checked when it was loaded)."""
    a, b = vectors(ref), vectors(got)
    measures = {"frames": len(ref), "agreement": 0.0, "neighbours": 0.0, "spread": 0.0}
    if len(a) and a.shape[1:] == b.shape[1:]:
        measures["agreement"] = float((a.astype(np.float64) * b).sum(axis=1).mean())
        if len(a) >= 2:
            measures["neighbours"] = embeddings.neighbour_recall(a, b, min(SWAP_K, len(a) - 1))
    if len(b) >= 2:
        measures["spread"] = embeddings.spread(b)
    return measures


def judge(measures: dict, bounds, what: str):
    """Why ``measures`` refuse a candidate under ``bounds.min_agreement`` (the mean cosine of
    its vectors to the model in use's), or None."""
    if measures["agreement"] < bounds.min_agreement:
        return (
            f"the candidate's vectors have a mean cosine of {measures['agreement']:.2f} to the "
            f"model in use's on {measures['frames']} {what}, under {bounds.min_agreement:.2f}: "
            "vectors stored before the swap would not compare with its"
        )
    return None


def measure(ref: np.ndarray, got: np.ndarray) -> dict:
    """The build's gate on an encoder (``ref``: FP32's outputs on the hold-out, ``got``: the
    candidate's): ``neighbour_recall`` (each sample's 10 nearest others under FP32 kept by
    the candidate), ``cosine_min`` (the least cosine of a vector to FP32's), ``spread`` (the
    candidate's, 0 where its vectors are not embeddings). FP32's own vectors failing the
    health check refuse the build."""
    why = embeddings.why_unhealthy(ref, "hold-out samples")
    if why:
        raise embeddings.UnhealthyEncoder(f"FP32: {why}; nothing was written")
    out = {"cosine_min": 0.0, "neighbour_recall": 0.0, "spread": 0.0}
    if embeddings.why_unhealthy(got, "hold-out samples") is None:
        r, _ = embeddings.normalise(ref)
        g, _ = embeddings.normalise(got)
        out["cosine_min"] = float((r.astype(np.float64) * g).sum(axis=1).min())
        out["neighbour_recall"] = embeddings.neighbour_recall(r, g, GATE_K)
        out["spread"] = embeddings.spread(g)
    out["spread_fp32"] = embeddings.spread(embeddings.normalise(ref)[0])
    return out


def health(model) -> None:
    """ModelError, in one sentence, when ``model`` (a loaded encoder) returns NaN or infinite
    values, the same vector, or nearly the same vectors for the bundled photos."""
    from ..sample_data import ALL_PHOTOS, load_photo

    step = max(1, getattr(model, "max_batch", None) or 1)
    rows = []
    photos = [load_photo(p) for p in ALL_PHOTOS[:PROBES]]
    engine = getattr(model, "engine", None)
    warned = getattr(engine, "_warned_nonfinite", None)
    if warned is not None:  # the probes' NaN are this check's sentence, not the engine's warning
        engine._warned_nonfinite = True
    try:
        for i in range(0, len(photos), step):
            part = [model.preprocess(p) for p in photos[i : i + step]]
            outputs = model.infer(model.collate([t for t, _ in part]))
            first = next(iter(outputs.values()))
            rows.append(np.asarray(first)[: len(part)].reshape(len(part), -1))
    finally:
        if warned is not None:
            engine._warned_nonfinite = warned
    why = embeddings.why_unhealthy(np.concatenate(rows), "probe photos")
    if why:
        raise embeddings.UnhealthyEncoder(f"{why}; refusing to load it")


def draw(out, result: Result) -> list:
    """The overlay's line for an encoder: its vector's size."""
    return [f"embedding {result.embedding.size}-d"] if result.embedding is not None else []


def describe(result: Result) -> list:
    """``edgert run``'s line: the vector's size and the norm the encoder gave it."""
    e = result.embedding
    return [f"  vector: {e.size} values, norm {e.norm:.4f} (L2-normalised to 1 by edgert)"]
