"""Image embeddings: one vector per image, L2-normalised, and what is measured on sets of them.

    unit, norms = normalise(rows)                  # [N, D] -> unit rows and the raw norms
    neighbours(gallery, queries, k)                # indices of the k most similar (cosine)
    neighbour_recall(ref, got, k)                  # how many of ref's k neighbours got keeps
    label_recall(vectors, labels, k)               # recall@k of same-label neighbours
    why_unhealthy(vectors, "on 8 probe images")    # a sentence, or None
    blob = encode(vector, "int8"); decode(blob)    # a compact stored form, and back

Pure numpy (1.17+): the task's hooks (:mod:`edgert.runtime.tasks.embed`), the build's gate,
``edgert run --gallery`` and the benchmark all use these.
"""

from __future__ import annotations

import numpy as np

from .errors import ModelError

# The health check's bound: an encoder whose unit vectors spread less than this across different
# inputs (the mean squared distance of each to their mean: 1 - |mean vector|^2, 0 when every
# vector is the same) has collapsed. Measured: ImageNet MobileNetV2's pooled features spread
# 0.45 on the bundled photos (the load's probes) and the zoo's hold-out, 0.39 on lfw_subset,
# 0.16 on digits, 0.073 on the near-alike textile pictures (benchmarks/embed_retrieval.py); a
# fixed vector plus 1e-4 of an input's features spreads 9e-10, an untrained conv+ReLU+pool 0.002.
MIN_SPREAD = 0.01
FORMS = ("float32", "float16", "int8")


class UnhealthyEncoder(ModelError):
    """An encoder whose vectors are NaN, constant or collapsed (the health check's sentence)."""


def normalise(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unit rows float32, raw norms float64) of [N, ...] outputs (each row flattened); a row of
    zeros stays zeros (norm 0)."""
    rows = np.asarray(rows).reshape(len(rows), -1).astype(np.float64)
    norms = np.linalg.norm(rows, axis=1)
    unit = rows / np.where(norms > 0, norms, 1.0)[:, None]
    return unit.astype(np.float32), norms


def similarities(gallery: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Cosine similarity [Q, G] of unit ``queries`` to unit ``gallery`` rows."""
    return np.asarray(queries, np.float64) @ np.asarray(gallery, np.float64).T


def neighbours(gallery: np.ndarray, queries: np.ndarray, k: int, exclude_self: bool = False):
    """(indices [Q, k], similarities [Q, k]) of each query's k most similar gallery rows, most
    similar first; ``exclude_self``: queries are the gallery, each row's own is left out."""
    sims = similarities(gallery, queries)
    if exclude_self:
        np.fill_diagonal(sims, -np.inf)
    k = max(0, min(k, sims.shape[1] - (1 if exclude_self else 0)))
    if k == 0:
        return np.zeros((len(sims), 0), int), np.zeros((len(sims), 0))
    top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(sims, top, 1), axis=1, kind="stable")
    idx = np.take_along_axis(top, order, 1)
    return idx, np.take_along_axis(sims, idx, 1)


def neighbour_recall(ref: np.ndarray, got: np.ndarray, k: int) -> float:
    """The fraction of each sample's k nearest neighbours under ``ref`` (FP32's vectors, or the
    model in use) that ``got``'s k nearest hold too, over every sample (each one's own left
    out): 1.0 when the two rank the same neighbours."""
    ref, _ = normalise(ref)
    got, _ = normalise(got)
    a, _ = neighbours(ref, ref, k, exclude_self=True)
    b, _ = neighbours(got, got, k, exclude_self=True)
    if a.shape[1] == 0:
        return 1.0
    kept = [len(set(r.tolist()) & set(g.tolist())) for r, g in zip(a, b)]
    return float(sum(kept) / a.size)


def label_recall(vectors: np.ndarray, labels, k: int = 10) -> float:
    """recall@k for same-label neighbours: the fraction of each sample's k nearest others that
    share its label, over every sample."""
    unit, _ = normalise(vectors)
    labels = np.asarray(labels)
    idx, _ = neighbours(unit, unit, k, exclude_self=True)
    return float((labels[idx] == labels[:, None]).mean()) if idx.size else 0.0


def spread(unit: np.ndarray) -> float:
    """1 - |mean of the unit rows|^2: the mean squared distance of each to their mean (0: all
    the same vector; 1: spread evenly)."""
    mean = np.asarray(unit, np.float64).mean(axis=0)
    return float(max(0.0, 1.0 - float(mean @ mean)))


def why_unhealthy(raw: np.ndarray, what: str, min_spread: float = MIN_SPREAD) -> str | None:
    """Why an encoder's outputs ``raw`` ([N, ...], N >= 2 different inputs described by
    ``what``) are not embeddings, in a sentence, or None: NaN or infinite values, the same
    vector for every input, or vectors nearly the same (:func:`spread` under ``min_spread``)."""
    rows = np.asarray(raw).reshape(len(raw), -1)
    if not np.isfinite(rows).all():
        bad = int((~np.isfinite(rows).all(axis=1)).sum())
        return f"the encoder returns NaN or infinite values for {bad} of {len(rows)} {what}"
    if len(rows) < 2:
        return None
    unit, norms = normalise(rows)
    if np.ptp(rows, axis=0).max() == 0 or not norms.any():
        return f"the encoder returns the same vector for all {len(rows)} {what}"
    s = spread(unit)
    if s < min_spread:
        return (
            f"the encoder's vectors are nearly the same for all {len(rows)} {what} (spread "
            f"{s:.2e} under {min_spread:g}): it does not tell images apart"
        )
    return None


def encode(vector: np.ndarray, form: str = "int8") -> bytes:
    """A unit vector's compact stored form: ``float32`` (4 bytes a value), ``float16`` (2) or
    ``int8`` (1, plus a float32 scale: round(v / max|v| * 127)). :func:`decode` reads any."""
    v = np.asarray(vector, np.float32).ravel()
    if form == "float32":
        return b"\x00" + v.astype("<f4").tobytes()
    if form == "float16":
        return b"\x01" + v.astype("<f2").tobytes()
    if form == "int8":
        peak = float(np.abs(v).max()) if v.size else 0.0
        scale = peak / 127.0 if peak > 0 else 1.0
        q = np.clip(np.round(v / scale), -127, 127).astype(np.int8)
        return b"\x02" + np.array([scale], "<f4").tobytes() + q.tobytes()
    raise ValueError(f"unknown vector form {form!r}; choose one of {', '.join(FORMS)}")


def decode(blob: bytes) -> np.ndarray:
    """The float32 vector of :func:`encode`'s bytes (the form is the first byte)."""
    if not blob:
        raise ValueError("an empty vector blob")
    form, body = blob[0], blob[1:]
    if form == 0:
        return np.frombuffer(body, "<f4").astype(np.float32)
    if form == 1:
        return np.frombuffer(body, "<f2").astype(np.float32)
    if form == 2 and len(body) >= 4:
        scale = float(np.frombuffer(body[:4], "<f4")[0])
        return np.frombuffer(body[4:], np.int8).astype(np.float32) * scale
    raise ValueError(f"a vector blob of unknown form {form}")
