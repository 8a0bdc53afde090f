"""The coarse pass of search at scale (issue 70): once a model has :data:`MIN_ROWS` stored
vectors, a principal-component projection of them to :data:`DIMS` values (fitted on a sample of
at most :data:`SAMPLE` rows, centred on their mean) is kept beside them in int8 with a scale per
row; a query scores every row in that small form (a tenth of the bytes of 1280-d int8) and the
best :func:`candidates` are re-scored exactly from the stored vectors. Cosine ranks as
``q . mean + (q P) . z``: the first term is the same for every row, so the rows are ranked by the
second. Measured recall@20 against exact search: benchmarks/search_scale.py.

No dependency: a vector index (faiss, usearch) would also hold the vectors again, and a graph
over 1M 1280-d vectors costs more memory than the stored vectors themselves."""

from __future__ import annotations

import numpy as np

MIN_ROWS = 20000  # below this the exact pass is fast enough (and exact): 3.5 ms at 10k
DIMS = 128  # projected size
SAMPLE = 16384  # rows the projection is fitted on
CANDIDATES = 1024  # best coarse rows re-scored exactly, at least (see candidates)
BLOCK = 16384  # rows projected at once
MIN_KEPT = 0.5  # the share of the vectors' variance the projection must keep to be used


class Coarse:
    """The projection of one model's vectors and each row's projected int8 form."""

    def __init__(self, unit_sample: np.ndarray, dims: int = DIMS) -> None:
        x = np.asarray(unit_sample, np.float32)
        self.mean = x.mean(axis=0)
        x = x - self.mean
        gram = (x.T @ x).astype(np.float64)  # float32 products: a quarter of float64's time
        values, vectors = np.linalg.eigh(gram)  # by ascending variance
        dims = min(dims, x.shape[1])
        total = float(values.clip(0).sum())
        # random vectors keep dims / dim of it (recall@20 0.19 at 100k): exact search then
        self.kept = float(values[::-1][:dims].clip(0).sum()) / total if total > 0 else 1.0
        self.basis = np.ascontiguousarray(vectors[:, ::-1][:, :dims], np.float32)
        self.z = np.zeros((0, dims), np.int8)
        self.scale = np.zeros(0, np.float32)
        self.done = 0  # rows projected: [0, done)
        self.dirty: set = set()  # rows below done replaced since they were projected

    def project(self, unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of unit vectors -> their int8 projections and the scale of each."""
        z = (np.asarray(unit, np.float32) - self.mean) @ self.basis
        peak = np.abs(z).max(axis=1)
        scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
        q = np.clip(np.round(z / scale[:, None]), -127, 127).astype(np.int8)
        return q, scale

    def sync(self, unit_rows, n: int) -> None:
        """Project the rows added or replaced since the last sync (``n`` rows now);
        ``unit_rows(a)`` gives the unit float32 vectors of the row numbers ``a``."""
        if n > len(self.z):
            size = max(n, len(self.z) + len(self.z) // 2)
            z = np.zeros((size, self.z.shape[1]), np.int8)
            z[: len(self.z)] = self.z
            s = np.zeros(size, np.float32)
            s[: len(self.scale)] = self.scale
            self.z, self.scale = z, s
        todo = [np.array(sorted(self.dirty), np.int64)] if self.dirty else []
        todo += [np.arange(i, min(i + BLOCK, n)) for i in range(self.done, n, BLOCK)]
        for rows in todo:
            self.z[rows], self.scale[rows] = self.project(unit_rows(rows))
        self.done, self.dirty = n, set()

    def scores(self, query: np.ndarray, rows: np.ndarray | None, gemv) -> np.ndarray:
        """Approximate ranking scores of the unit ``query`` against each row (of ``rows``)."""
        qz = np.asarray(query, np.float32) @ self.basis
        z = self.z[: self.done]
        if gemv is not None:
            peak = float(np.abs(qz).max()) or 1.0
            q8 = np.clip(np.round(qz / peak * 127), -127, 127).astype(np.int8)
            out = gemv.run(None, {"a": z, "b": q8[:, None]})[0][:, 0].astype(np.float32)
            out *= self.scale[: self.done]
        else:
            out = np.empty(len(z), np.float32)
            for i in range(0, len(z), BLOCK):
                out[i : i + BLOCK] = (z[i : i + BLOCK].astype(np.float32) @ qz) * self.scale[
                    i : i + BLOCK
                ]
        return out if rows is None else out[rows]


def candidates(rows: int) -> int:
    """How many of the best coarse rows are re-scored exactly when a model has ``rows`` (a
    filter's share of them too): :data:`CANDIDATES`, and from 256k rows on one in 256 (at 1M
    rows, 1024 left one query of 50 with 14 of its 20; 4k rows re-scored cost ~3 ms)."""
    return max(CANDIDATES, rows // 256)


def sample_rows(n: int, size: int = SAMPLE) -> np.ndarray:
    """Evenly spread row numbers, at most ``size`` of ``n``."""
    return np.unique(np.linspace(0, n - 1, min(n, size)).astype(np.int64))
