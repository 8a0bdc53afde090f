"""Search over a site-wide store (issue 70 on issue 69's PostgreSQL store), on a real PostgreSQL
server the test starts (``pg_server.py``): two devices' tracks with their embeddings, one device's
written while the server was away (spooled on its disk, then replayed: the vectors come back byte
for byte), ``/api/search?similar_to=`` ranking every device's tracks as numpy's cosine does, each
result saying its device, under a camera filter; ``/api/counts`` on the server; ``edgert events
query postgresql://... --similar-to`` in a subprocess the same."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from edgert.apps.store import postgres, search
from edgert.apps.store.records import row_of
from edgert.apps.store.routes import Routes
from edgert.runtime import embeddings
from tests.apps.pg_server import needs_postgres
from tests.apps.test_event_store_pg import _wait, pg  # noqa: F401 - the server's fixture
from tests.apps.test_search_store import _embedding, _vectors
from tests.conftest import run_cli

FORM = "int8"
pytestmark = [needs_postgres, pytest.mark.subprocess]


def _rows(cams: list, vectors, first: int, t0: float) -> list:
    rows = []
    for i, v in enumerate(vectors):
        track, t = first + i, t0 + 10 * i
        base = {"stream": 0, "track_id": track, "label": "person"}
        rows += [
            row_of({**base, "event": "track_start", "time": t}, cams),
            row_of({**base, "event": "zone_enter", "zone": "pen", "time": t + 1}, cams),
            row_of(_embedding(0, track, v, t + 2, FORM), cams),
            row_of({**base, "event": "track_end", "time": t + 4}, cams),
        ]
    return rows


def _writer(pg, tmp_path, device: str) -> postgres.PgWriter:  # noqa: F811
    uri = pg.uri(device=device, spool=tmp_path / f"{device}.spool", batch_s="0.05")
    return postgres.PgWriter(postgres.parse(uri), "run1", [f"cam-{device}"], batch_s=0.05)


def test_search_ranks_every_device_s_tracks_as_numpy_and_spooled_vectors_survive(pg, tmp_path):  # noqa: F811
    vectors, t0 = _vectors(40, seed=3), time.time() - 3600
    a = _writer(pg, tmp_path, "a")
    a.put(_rows(["cam-a"], vectors[:20], 1, t0))
    a.close()
    b = _writer(pg, tmp_path, "b")
    pg.stop()  # device b's tracks go to its spool, then to the server when it is back
    b.put(_rows(["cam-b"], vectors[20:], 1, t0))
    _wait(lambda: b.spool.size > 0 and not b.pending)
    pg.start()
    _wait(lambda: b.replayed >= 80)
    b.close()
    assert b.outages == 1
    ids = {(d, n): i for i, d, n in pg.sql("SELECT id, device, track_id FROM tracks")}
    assert len(ids) == 40 and pg.sql("SELECT count(*) FROM embeddings")[0][0] == 40
    stored = np.stack([embeddings.decode(embeddings.encode(v, FORM)) for v in vectors])
    stored = embeddings.normalise(stored)[0]
    kept = pg.sql(
        "SELECT e.vector, t.device, t.track_id FROM embeddings e JOIN tracks t ON t.id = e.track"
    )
    for blob, device, n in kept:  # the spooled ones too: the same bytes
        assert bytes(blob) == embeddings.encode(vectors[n - 1 + (20 if device == "b" else 0)], FORM)

    def key(r) -> int:  # the row of ``vectors`` a result is
        return r["track"]["track_id"] - 1 + (20 if r["track"]["device"] == "b" else 0)

    routes = Routes(postgres.parse(pg.uri()))
    q = 25  # device b's 6th track
    status, body, _ = routes.search(f"/api/search?similar_to={ids[('b', 6)]}&limit=12")
    assert status == 200, body
    found = json.loads(body)["results"]
    want = list(np.argsort(-(stored @ stored[q]), kind="stable")[:12])
    assert [key(r) for r in found] == want
    assert {r["track"]["device"] for r in found} == {"a", "b"}  # across devices
    np.testing.assert_allclose(
        [r["similarity"] for r in found], (stored @ stored[q])[want], atol=1e-4
    )
    status, body, _ = routes.search(f"/api/search?similar_to={ids[('b', 6)]}&camera=cam-a")
    assert status == 200, body
    only_a = [key(r) for r in json.loads(body)["results"]]
    assert only_a == [i for i in np.argsort(-(stored @ stored[q]), kind="stable") if i < 20]
    status, body, _ = routes.counts("/api/counts?label=person")
    assert status == 200 and json.loads(body)["zones"]["pen"] == {"tracks": 40, "distinct": 40}
    status, body, _ = routes.search("/api/search?similar_to=999999")
    assert status == 404 and "no embedding" in json.loads(body)["error"]

    # a live track's vector replaced (the camera's mean over more crops): the index that read
    # the first answers with the latest
    c = _writer(pg, tmp_path, "c")
    try:
        for v in _vectors(2, seed=9):
            c.put([row_of(_embedding(0, 1, v, t0 + 1000, FORM), ["cam-c"])])
            kept = "SELECT count(*) FROM embeddings e JOIN tracks t ON t.id = e.track WHERE "
            kept += f"t.device = 'c' AND e.vector = '\\x{embeddings.encode(v, FORM).hex()}'"
            _wait(lambda sql=kept: pg.sql(sql)[0][0])
            conn = routes._read()
            try:
                f, _ = search.parse({"camera": "cam-c", "limit": "1"})
                (top,) = search.search(conn, routes.index, f, query=v, mark="%s")["results"]
            finally:
                conn.close()
            assert top["track"]["device"] == "c" and top["similarity"] > 0.99, top
    finally:
        c.close()
    proc = run_cli(
        *("events", "query", pg.uri(), "--similar-to", ids[("a", 3)], "--limit", "5", "--json")
    )
    assert proc.returncode == 0, proc.stderr
    shown = [key(r) for r in json.loads(proc.stdout)["results"]]
    assert shown == list(np.argsort(-(stored @ stored[2]), kind="stable")[:5])
