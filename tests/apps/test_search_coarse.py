"""Search's coarse pass (issue 70: search at scale), through real SQLite stores: from the index's
``coarse_min`` rows on, the projected scan then the exact re-score answers what exact search
answers, in the same order, under the history's filters; rows added or replaced after the
projection was built are found by their new vectors; below ``coarse_min`` no projection is built.
The vectors are clustered with a decaying spectrum (as image embeddings are), 256-d so that the
projection to ``coarse.DIMS`` drops a part of them, and more rows than ``coarse.CANDIDATES``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgert.apps.store import coarse, query, schema, search
from edgert.runtime import embeddings

DIM = 256
N = 3000
CAMS = ("door", "yard", "gate")


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    spread = (1.0 / np.arange(1, DIM + 1)) ** 0.5
    turn = np.linalg.qr(rng.standard_normal((DIM, DIM)))[0]
    centres = rng.standard_normal((n // 20 + 1, DIM))[np.arange(n) // 20]
    x = (centres + 0.6 * rng.standard_normal((n, DIM))) * spread
    return embeddings.normalise((x @ turn).astype(np.float32))[0]


def _store(path: Path, vectors: np.ndarray, first: int = 1) -> None:
    conn = schema.connect(path)
    conn.execute("BEGIN")
    ids = range(first, first + len(vectors))
    conn.executemany(
        "INSERT INTO tracks (id, run, stream, track_id, camera, label, first_seen, last_seen) "
        "VALUES (?, 'r', ?, ?, ?, ?, ?, ?)",
        [
            (i, i % 3, i, CAMS[i % 3], "dog" if i % 4 == 0 else "person", float(i), i + 5.0)
            for i in ids
        ],
    )
    conn.executemany(
        "INSERT OR REPLACE INTO embeddings (track, model, dim, form, vector, time) "
        "VALUES (?, 'm', ?, 'int8', ?, ?)",
        [
            (i, len(u), embeddings.encode(u, "int8"), float(i))
            for i, u in zip(ids, vectors, strict=True)
        ],
    )
    conn.execute("COMMIT")
    conn.close()


def _answer(conn, index, given: dict, target: int) -> list:
    f, own = search.parse({**given, "similar_to": str(target)})
    return [
        (r["track"]["id"], r["similarity"])
        for r in search.search(conn, index, f, similar_to=own["similar_to"])["results"]
    ]


def test_the_coarse_pass_answers_as_exact_search_under_the_filters(tmp_path):
    assert N > 2 * coarse.CANDIDATES and DIM > coarse.DIMS  # the pass does leave rows out
    path = tmp_path / "s.db"
    _store(path, _vectors(N))
    conn = query.open_read(path)
    fast, exact = search.Index(coarse_min=1000), search.Index(coarse_min=10**9)
    rng = np.random.default_rng(1)
    filters = ({}, {"camera": "yard"}, {"label": "dog"}, {"since": "1000", "until": "2500"})
    for given in filters:
        for target in rng.integers(1, N + 1, 8):
            got, want = _answer(conn, fast, given, int(target)), _answer(conn, exact, given, target)
            assert [g[0] for g in got] == [w[0] for w in want], (given, target)
            np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], atol=1e-4)
    assert fast.models["m"].coarse is not None and exact.models["m"].coarse is None
    assert fast.models["m"].coarse.kept >= coarse.MIN_KEPT
    f, _ = search.parse({"similar_to": "8", "camera": "yard", "label": "dog"})
    r = search.search(conn, fast, f, similar_to=8)["results"]
    assert len(r) == 20 and all(x["track"]["camera"] == "yard" for x in r)
    assert all(x["track"]["label"] == "dog" for x in r)
    # what the projection leaves out costs a real ranking: it alone does not give exact's order
    v = fast.models["m"]
    q = v.unit(np.array([v.where[8]]))[0]
    alone = v.tracks[np.argsort(-v.coarse.scores(q, None, None), kind="stable")[:20]]
    assert list(alone) != [w[0] for w in _answer(conn, exact, {}, 8)]
    conn.close()


def test_rows_added_or_replaced_after_the_projection_are_found_by_their_new_vectors(tmp_path):
    path = tmp_path / "s.db"
    vectors = _vectors(N + 40, seed=2)
    _store(path, vectors[:N])
    conn = query.open_read(path)
    index = search.Index(coarse_min=1000)
    assert _answer(conn, index, {}, 5)[0][0] == 5
    built = index.models["m"].coarse
    assert built is not None and built.done == N
    _store(path, vectors[N:], first=N + 1)  # 40 new tracks
    far = vectors[N + 10]  # track N + 11's vector given to track 7 as well (a later embedding)
    w = schema.connect(path)
    w.execute(
        "INSERT OR REPLACE INTO embeddings (track, model, dim, form, vector, time) "
        "VALUES (7, 'm', ?, 'int8', ?, 1e9)",
        (DIM, embeddings.encode(far, "int8")),
    )
    w.commit()
    w.close()
    got = _answer(conn, index, {"limit": "2"}, N + 11)
    assert {g[0] for g in got} == {7, N + 11} and min(g[1] for g in got) > 0.99
    assert index.models["m"].coarse is built and built.done == N + 40 and not built.dirty
    exact = search.Index(coarse_min=10**9)
    for target in (N + 1, N + 25, 7, 300):
        assert _answer(conn, index, {}, target) == _answer(conn, exact, {}, target)
    conn.close()


def test_vectors_without_structure_are_searched_exactly(tmp_path):
    path = tmp_path / "s.db"
    rng = np.random.default_rng(3)  # 1024-d: the projection keeps an eighth of the dimensions
    _store(path, embeddings.normalise(rng.standard_normal((N, 1024)).astype(np.float32))[0])
    conn = query.open_read(path)
    fast, exact = search.Index(coarse_min=1000), search.Index(coarse_min=10**9)
    for target in (1, 500, 2999):
        assert _answer(conn, fast, {}, target) == _answer(conn, exact, {}, target)
    fitted = fast.models["m"].coarse
    assert fitted is not None and fitted.kept < coarse.MIN_KEPT and fitted.done == 0
    assert fast.models["m"].ready() is None
    conn.close()


def test_below_coarse_min_no_projection_is_built(tmp_path):
    path = tmp_path / "s.db"
    _store(path, _vectors(200))
    conn = query.open_read(path)
    index = search.Index()
    assert _answer(conn, index, {}, 3)[0][0] == 3
    assert index.models["m"].n == 200 and index.models["m"].coarse is None
    conn.close()
