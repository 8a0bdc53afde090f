"""Search over the tracks' embeddings (``GET /api/search``, ``edgert events query --similar-to``):
exact cosine similarity in numpy of a query vector (a stored track's, or an uploaded picture's
through the camera's embedder) to every stored vector of the same model, under the history's
filters (camera, label, since, until), the most similar ``limit`` tracks first.

The vectors are held in memory as the store keeps them (int8 with a scale per vector, or
float16: :func:`edgert.runtime.embeddings.encode`), read once and then only the rows added since
(a track's later embedding replaces its earlier in place; rows deleted by ``keep_days`` reload
the lot); a query converts them a block of :data:`BLOCK` rows at a time, so the memory it adds is
a block's, not the matrix's in float32. From :data:`coarse.MIN_ROWS` rows of a model on, a query
scans a projection of the vectors first and re-scores its best candidates exactly
(:mod:`.coarse`: 9 / 14 ms p50 / p95 at 100k, recall@20 1.0 against exact search). The camera
filter reads each row's camera, held beside it (a track's camera never changes); label and time
filters are read from the tracks table on each query (they change while a track lives)."""

from __future__ import annotations

import threading
import time

import numpy as np

from edgert.runtime import embeddings

from . import coarse
from .query import DEFAULT_LIMIT, Filters, QueryError, track

BLOCK = 16384  # rows converted to float32 at once
RESCORE = 256  # candidates re-scored exactly after the int8 pass
COUNT_S = 30.0  # the stored vectors counted at most this often (a deletion not of the oldest)
KNOWN = ("similar_to", "model", "camera", "label", "since", "until", "limit")


class NoEmbeddings(QueryError):
    """The store holds no embeddings (of that model): nothing to search (404 on the API)."""


class Vectors:
    """One model's vectors: a growing matrix of the stored form, and the tracks they are of."""

    def __init__(self, dim: int, int8: bool, coarse_min: int = coarse.MIN_ROWS) -> None:
        self.dim, self.int8 = dim, int8
        self.coarse_min = coarse_min
        self.coarse: coarse.Coarse | None = None  # the projected pass, from coarse_min rows
        self.rows = np.zeros((0, dim), np.int8 if int8 else np.float16)
        self.scale = np.zeros(0, np.float32)
        self.tracks = np.zeros(0, np.int64)
        self.cameras = np.zeros(0, np.int32)  # each row's track's camera (it never changes)
        self.camera_codes: dict = {}  # camera -> its number in self.cameras
        self.n = 0
        self.where: dict = {}  # track -> row

    def put(self, track_id: int, blob: bytes, camera=None) -> None:
        form, body = blob[0], blob[1:]
        if self.int8 and form == 2:
            scale = float(np.frombuffer(body[:4], "<f4")[0])
            values = np.frombuffer(body[4:], np.int8)
        else:
            v = embeddings.decode(blob)
            if self.int8:  # a float vector among int8 ones: quantized as they were
                return self.put(track_id, embeddings.encode(v, "int8"), camera)
            scale, values = 1.0, v.astype(np.float16)
        if len(values) != self.dim:
            return
        norm = float(np.linalg.norm(values.astype(np.float32))) * scale
        scale = scale / norm if norm > 0 else 0.0  # cosines of the vectors as stored: self is 1
        row = self.where.get(track_id)
        if row is None:
            row = self.where[track_id] = self.n
            self.n += 1
            if self.n > len(self.rows):  # grown by half again: amortised copies
                size = max(1024, self.n + self.n // 2)
                self.rows = _grown(self.rows, size)
                self.scale = _grown(self.scale, size)
                self.tracks = _grown(self.tracks, size)
                self.cameras = _grown(self.cameras, size)
        elif self.coarse is not None and row < self.coarse.done:
            self.coarse.dirty.add(row)
        self.rows[row], self.scale[row], self.tracks[row] = values, scale, track_id
        code = self.camera_codes.setdefault(camera, len(self.camera_codes))
        self.cameras[row] = code

    def similarities(self, query: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Cosine of the unit ``query`` to each vector (of ``rows`` only, when given): int8
        vectors with the query in int8 too (ONNX Runtime's MatMulInteger, int32 sums: 2.5x
        numpy's float32 blocks here), to be re-scored exactly (:meth:`exact`) where it matters."""
        q = np.asarray(query, np.float32)
        take = np.arange(self.n) if rows is None else rows
        if self.int8 and _int8_gemv() is not None:
            peak = float(np.abs(q).max()) or 1.0
            q8 = np.clip(np.round(q / peak * 127), -127, 127).astype(np.int8)
            # every row, then those asked for: a pass over the matrix costs less than its copy
            out = _int8_gemv().run(None, {"a": self.rows[: self.n], "b": q8[:, None]})[0][:, 0]
            out = out if rows is None else out[rows]
            return out.astype(np.float32) * (self.scale[take] * (peak / 127))
        out = np.empty(len(take), np.float32)
        for i in range(0, len(take), BLOCK):
            part = take[i : i + BLOCK]
            block = self.rows[part] if rows is not None else self.rows[i : i + len(part)]
            out[i : i + len(part)] = block.astype(np.float32) @ q
        out *= self.scale[take]
        return out

    def unit(self, rows: np.ndarray) -> np.ndarray:
        """The stored vectors of ``rows`` as unit float32 vectors."""
        return self.rows[rows].astype(np.float32) * self.scale[rows, None]

    def ready(self) -> coarse.Coarse | None:
        """The coarse pass (fitted when the rows first reach ``coarse_min``, then kept up with
        the rows added or replaced), or None below ``coarse_min`` rows or when the projection
        keeps less than :data:`coarse.MIN_KEPT` of the vectors' variance: exact search."""
        if self.coarse is None and self.n >= self.coarse_min:
            self.coarse = coarse.Coarse(self.unit(coarse.sample_rows(self.n)))
        if self.coarse is None or self.coarse.kept < coarse.MIN_KEPT:
            return None
        self.coarse.sync(self.unit, self.n)
        return self.coarse

    def exact(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Cosine of the unit float32 ``query`` to the stored vectors of ``rows`` (einsum's
        loop, not BLAS: its threads cost 10x on a loaded 2-core machine for these few rows)."""
        block = self.rows[rows].astype(np.float32)
        return np.einsum("ij,j->i", block, np.asarray(query, np.float32)) * self.scale[rows]


_GEMV: list = []


def _int8_gemv():
    """An ONNX Runtime session of one MatMulInteger (int8 [N, D] x int8 [D, 1] -> int32), made
    once, on one thread (a second doubled the time on a loaded 2-core machine: 7.4 against 3.5
    ms at 10k x 1280); None where ONNX Runtime cannot make it (numpy's float32 blocks then)."""
    if not _GEMV:
        try:
            import onnxruntime as ort
            from onnx import TensorProto, helper

            graph = helper.make_graph(
                [helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
                "int8_gemv",
                [
                    helper.make_tensor_value_info("a", TensorProto.INT8, ["N", "D"]),
                    helper.make_tensor_value_info("b", TensorProto.INT8, ["D", 1]),
                ],
                [helper.make_tensor_value_info("y", TensorProto.INT32, ["N", 1])],
            )
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
            model.ir_version = 7  # what ONNX Runtime 1.10+ reads
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            session = ort.InferenceSession(
                model.SerializeToString(), so, providers=["CPUExecutionProvider"]
            )
            _GEMV.append(session)
        except Exception as exc:  # noqa: BLE001 - the search goes on in numpy
            import logging

            logging.getLogger(__name__).warning("int8 search in numpy (%s)", exc)
            _GEMV.append(None)
    return _GEMV[0]


def _grown(a: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros((size, *a.shape[1:]), a.dtype)
    out[: len(a)] = a
    return out


class Index:
    """The vectors of one store (see the module's text); thread-safe."""

    def __init__(self, coarse_min: int = coarse.MIN_ROWS) -> None:
        self.coarse_min = coarse_min  # each model's rows from which the coarse pass is used
        self.lock = threading.Lock()
        self.models: dict = {}  # model -> Vectors
        self.last = 0  # the highest embeddings.id read
        self.low = 0  # the least id when last read
        self.count = 0
        self.counted = -1e18  # when the rows were last counted (monotonic)

    def refresh(self, conn, mark: str = "?") -> None:
        """Rows added since the last read; all again when rows were deleted (``keep_days``
        deletes the oldest: the least id rose; any other deletion is seen by the count, read
        at most every :data:`COUNT_S` seconds: it reads the table's index, 27 ms at 100k)."""
        low, high = conn.execute(
            # two sub-queries: each reads one end of the key (min and max together scan it all)
            "SELECT coalesce((SELECT min(id) FROM embeddings), 0), "
            "coalesce((SELECT max(id) FROM embeddings), 0)"
        ).fetchone()
        count = None
        if time.monotonic() - self.counted >= COUNT_S:
            count = conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
            self.counted = time.monotonic()
        with self.lock:
            if low > self.low or high < self.last or (count is not None and count < self.count):
                self.models, self.last, self.count = {}, 0, 0
            self.low = low
            if high == self.last:
                return
            rows = conn.execute(
                "SELECT e.id, e.track, e.model, e.dim, e.vector, t.camera FROM embeddings e "
                f"LEFT JOIN tracks t ON t.id = e.track WHERE e.id > {mark} ORDER BY e.id",
                (self.last,),
            )
            for rid, track_id, model, dim, blob, camera in rows:
                v = self.models.get(model)
                if v is None:
                    v = self.models[model] = Vectors(
                        dim, bool(blob) and blob[0] == 2, self.coarse_min
                    )
                if v.dim == dim and blob:
                    v.put(track_id, bytes(blob), camera)
                self.last = max(self.last, rid)
            self.count = sum(len(v.where) for v in self.models.values())

    def vectors(self, model: str | None) -> tuple[str, Vectors]:
        with self.lock:
            if not self.models:
                raise NoEmbeddings(
                    "the store holds no embeddings (run the camera with "
                    "--secondary EMBEDDER.edgert to keep one per track)"
                )
            if model is None:
                model = max(self.models, key=lambda m: self.models[m].n)
            if model not in self.models:
                raise NoEmbeddings(
                    f"the store holds no embeddings of model {model!r} (it has "
                    f"{', '.join(sorted(self.models))})"
                )
            return model, self.models[model]


def parse(given: dict) -> tuple[Filters, dict]:
    """The search's filters and its own keys (similar_to, model) from text values."""
    unknown = sorted(set(given) - set(KNOWN))
    if unknown:
        raise QueryError(f"unknown filter {unknown[0]!r} (search filters: {', '.join(KNOWN)})")
    own = {}
    s = given.get("similar_to")
    if s is not None:
        if not (str(s).isascii() and str(s).isdigit() and len(str(s)) < 19):
            raise QueryError(f"similar_to {s!r}: give a track's id (a whole number)")
        own["similar_to"] = int(s)
    own["model"] = given.get("model") or None
    rest = {k: v for k, v in given.items() if k not in ("similar_to", "model")}
    rest.setdefault("limit", str(min(DEFAULT_LIMIT, 20)))
    return Filters.parse(rest), own


def _track_filters(f: Filters, camera: bool) -> tuple[list, list]:
    """The tracks table's clauses of ``f`` (a track passes a time range it overlaps) and their
    parameters; the camera's only when ``camera``."""
    clauses, params = [], []
    for column in ("camera", "label") if camera else ("label",):
        if getattr(f, column) is not None:
            clauses.append(f"{column} = ?")
            params.append(getattr(f, column))
    if f.since is not None:
        clauses.append("last_seen >= ?")
        params.append(f.since)
    if f.until is not None:
        clauses.append("first_seen <= ?")
        params.append(f.until)
    return clauses, params


def candidates(conn, f: Filters, v: Vectors, mark: str = "?") -> np.ndarray | None:
    """The rows of ``v`` whose tracks pass ``f`` (None: every row): the camera from the rows'
    own (held in memory: a scan of the tracks table cost 28 ms at 100k tracks), the label and
    times read from the tracks table (they change while a track lives)."""
    mask = None
    if f.camera is not None:
        mask = v.cameras[: v.n] == v.camera_codes.get(f.camera, -1)
    clauses, params = _track_filters(f, camera=False)
    if clauses:
        if f.camera is not None:
            clauses.append("camera = ?")
            params.append(f.camera)
        # one row of text parsed in C: a Python row per track cost 46 ms at 50k tracks
        ids_text = "group_concat(id)" if mark == "?" else "string_agg(id::text, ',')"
        sql = f"SELECT {ids_text} FROM tracks WHERE " + " AND ".join(clauses)
        text = conn.execute(sql.replace("?", mark), params).fetchone()[0]
        ids = np.fromstring(text, np.int64, sep=",") if text else np.zeros(0, np.int64)
        passed = np.isin(v.tracks[: v.n], ids)
        mask = passed if mask is None else mask & passed
    return None if mask is None else np.flatnonzero(mask)


def search(
    conn, index: Index, f: Filters, query=None, similar_to=None, model=None, mark: str = "?"
) -> dict:
    """``{"results": [{"track": <track()>, "similarity": s}, ...], "model": M}`` of the tracks
    most similar to ``query`` (a unit vector) or to the stored vector of track ``similar_to``,
    in the SQLite store (``mark`` ``?``) or a PostgreSQL server's (``%s``: every device's
    tracks, each result saying its device). NoEmbeddings when there is nothing to search,
    QueryError for a track with no vector."""
    index.refresh(conn, mark)
    model, v = index.vectors(model)
    if similar_to is not None:
        row = v.where.get(similar_to)
        if row is None:
            raise NoEmbeddings(
                f"track {similar_to} has no embedding of model {model!r} in the store"
            )
        q = v.rows[row].astype(np.float32) * v.scale[row]
    else:
        q = np.asarray(query, np.float32).ravel()
        if len(q) != v.dim:
            raise QueryError(f"the query's vector has {len(q)} values, model {model!r}'s {v.dim}")
    rows = candidates(conn, f, v, mark)
    with index.lock:
        fast = v.ready()
        sims = v.similarities(q, rows) if fast is None else fast.scores(q, rows, _int8_gemv())
        ids = v.tracks[: v.n] if rows is None else v.tracks[rows]
        k = min(f.limit, len(sims))
        if k == 0:
            return {"results": [], "model": model}
        # the most similar RESCORE (or limit x 4) re-scored exactly: the query's int8 rounding
        # moves a cosine by ~1e-3, never a track from far down into the top; after the coarse
        # pass its best coarse.candidates
        most = RESCORE if fast is None else coarse.candidates(v.n)
        m = min(len(sims), max(most, 4 * k))
        near = np.argpartition(-sims, m - 1)[:m] if m < len(sims) else np.arange(len(sims))
        sims = v.exact(q, near if rows is None else rows[near])
        ids = ids[near]
    if similar_to is not None:  # the track itself first, before any of the same vector
        sims = np.where(ids == similar_to, np.nextafter(sims, np.float32(np.inf)), sims)
    top = np.argpartition(-sims, k - 1)[:k]
    top = top[np.argsort(-sims[top], kind="stable")]
    results = []
    for i in top:
        t = track(conn, int(ids[i]), mark)
        if t is not None:
            results.append({"track": t, "similarity": round(float(sims[i]), 4)})
    return {"results": results, "model": model}


def counts(conn, f: Filters, mark: str = "?") -> dict:
    """Tracks per zone (the tracks that entered it) and the people they are once the tracks
    re-identified across cameras count once (``distinct``: the groups the reid links join),
    over the tracks that pass ``f`` (camera, label, since, until); ``all`` the same of every
    track."""
    import json

    clauses, params = _track_filters(f, camera=True)
    sql = "SELECT id, zones FROM tracks" + (" WHERE " + " AND ".join(clauses) if clauses else "")
    zones: dict = {}
    every = []
    for tid, text in conn.execute(sql.replace("?", mark), params):
        every.append(tid)
        for z in json.loads(text) if text else []:
            zones.setdefault(z, []).append(tid)
    parent: dict = {}

    def root(x):
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    try:
        for a, b in conn.execute("SELECT track, other FROM reid"):
            parent[root(a)] = root(b)
    except Exception as exc:  # noqa: BLE001 - a store of version 1 has no reid table
        if "reid" not in str(exc):
            raise

    def figure(ids: list) -> dict:
        return {"tracks": len(ids), "distinct": len({root(i) for i in ids})}

    return {"zones": {z: figure(ids) for z, ids in sorted(zones.items())}, "all": figure(every)}
