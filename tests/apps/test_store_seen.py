"""The page's filters on the SQLite store read only the minutes that saw their value (``seen``):
the events have no index (the write budget, schema version 2), so a label, zone, line or camera
that few events have was a read of every row (0.8 s at 1M events). The pages must be exactly a
full read's, in order, through every cursor."""

from __future__ import annotations

import random
import sqlite3

import pytest

from edgert.apps.store import query, schema
from edgert.apps.store.records import row_of
from edgert.apps.store.writer import StoreWriter

CAMS = ["rtsp://door/1", "rtsp://yard/1"]
T0 = 1_800_000_000.0


def _store(path, n: int, rare_at=()) -> list:
    """``n`` events over ``n / 2`` seconds on two cameras, common labels, zones and lines; the
    label ``dog`` only at the times ``rare_at``. Returns the records as given."""
    rnd = random.Random(7)
    records = []
    for i in range(n):
        r = {
            "event": rnd.choice(["track_start", "zone_enter", "line_cross", "track_end"]),
            "stream": rnd.randrange(2),
            "track_id": i,
            "label": rnd.choice(["person", "person", "car", "bicycle"]),
            "time": T0 + i * 0.5 + rnd.random() * 0.01,
        }
        if r["event"] == "zone_enter":
            r["zone"] = rnd.choice(["porch", "drive"])
        if r["event"] == "line_cross":
            r["line"] = rnd.choice(["door", "gate"])
        records.append(r)
    for t in rare_at:
        records.append(
            {"event": "track_start", "stream": 1, "track_id": n + int(t), "label": "dog", "time": t}
        )
    w = StoreWriter(path, "run", CAMS, batch_s=0.01)
    w.put([row_of(r, CAMS) for r in records])
    w.close()
    return records


def _all_pages(conn, given: dict) -> list:
    out, cursor = [], None
    while True:
        page = query.events(conn, query.Filters.parse({**given, "cursor": cursor}))
        out += [e["id"] for e in page["events"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return out


def _full_read(conn, given: dict) -> list:
    """The same filter as a read of every row (no ``seen``), newest first."""
    clauses, params = [], []
    for key in ("camera", "label", "zone", "line"):
        if key in given:
            clauses.append(f"{key} = ?")
            params.append(given[key])
    for key, op in (("since", ">="), ("until", "<=")):
        if key in given:
            clauses.append(f"time {op} ?")
            params.append(float(given[key]))
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    return [i for (i,) in conn.execute(f"SELECT id FROM events{where} ORDER BY id DESC", params)]


@pytest.mark.parametrize(
    "given",
    [
        {"label": "car", "limit": "37"},
        {"label": "dog", "limit": "2"},
        {"zone": "porch", "camera": CAMS[1], "limit": "50"},
        {"line": "gate", "label": "bicycle", "limit": "9"},
        {"label": "person", "since": str(T0 + 300), "until": str(T0 + 900), "limit": "64"},
        {"label": "dog", "until": str(T0 + 1000), "limit": "1"},
        {"label": "cat", "limit": "10"},
        {"camera": CAMS[0], "limit": "1000"},
    ],
)
def test_pages_by_the_minutes_seen_are_a_full_read_s(tmp_path, given):
    _store(tmp_path / "s.db", 6000, rare_at=(T0 + 61.0, T0 + 62.0, T0 + 2400.5, T0 + 2999.0))
    conn = sqlite3.connect(tmp_path / "s.db")
    want = _full_read(conn, given)
    assert _all_pages(conn, given) == want
    if given.get("label") == "dog" and "until" not in given:
        assert len(want) == 4


def _steps(conn, read) -> int:
    """SQLite's virtual machine steps, in thousands, that ``read()`` takes."""
    count = [0]

    def tick():
        count[0] += 1
        return 0

    conn.set_progress_handler(tick, 1000)
    try:
        read()
    finally:
        conn.set_progress_handler(None, 0)
    return count[0]


def test_a_rare_or_absent_label_reads_its_minutes_not_every_row(tmp_path):
    _store(tmp_path / "s.db", 40000, rare_at=(T0 + 100.0, T0 + 15000.0))
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 40002

    def page(**given):
        return lambda: query.events(conn, query.Filters(**given, limit=50))

    every_row = _steps(
        conn, lambda: conn.execute("SELECT id FROM events WHERE label = 'cat'").fetchall()
    )
    absent, rare, common = _steps(conn, page(label="cat")), _steps(conn, page(label="dog")), 0
    common = _steps(conn, page(label="person"))
    assert every_row > 50, every_row  # tens of thousands of steps for 40,002 rows
    assert absent * 5 <= every_row and rare * 5 <= every_row, (absent, rare, every_row)
    assert common * 10 <= every_row, (common, every_row)
    assert [e["label"] for e in page(label="dog")()["events"]] == ["dog", "dog"]


def test_a_version_1_store_gets_its_minutes_and_a_query_brings_it_forward(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for sql in schema.MIGRATIONS[0]:
        conn.execute(sql)
    conn.execute("PRAGMA user_version = 1")
    for kind, t, label in (("track_start", T0, "dog"), ("line_cross", T0 + 90, "cat")):
        conn.execute(
            "INSERT INTO events (kind, time, camera, track_id, label, line) "
            "VALUES (?, ?, 'cam', 3, ?, 'door')",
            (kind, t, label),
        )
    conn.close()
    got = query.read(str(path), lambda c, mark: query.events(c, query.Filters(label="cat")))
    assert [e["kind"] for e in got["events"]] == ["line_cross"]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
    seen = set(conn.execute("SELECT what, value FROM seen"))
    assert {("label", "dog"), ("label", "cat"), ("line", "door"), ("camera", "cam")} <= seen


def test_an_event_s_configuration_version_is_its_row_s(tmp_path):
    """The camera stamps every event with its site's version (``config``: the reload's mark);
    the store keeps it in ``config_version`` (the history's column), not in the JSON rest."""
    record = {"event": "line_cross", "stream": 0, "track_id": 4, "line": "door", "time": T0}
    w = StoreWriter(tmp_path / "s.db", "run", CAMS, batch_s=0.01)
    w.put([row_of({**record, "config": "3e12cfa397b1"}, CAMS), row_of(record, CAMS)])
    w.close()
    conn = sqlite3.connect(tmp_path / "s.db")
    rows = conn.execute("SELECT config_version, data FROM events ORDER BY id").fetchall()
    assert [r[0] for r in rows] == ["3e12cfa397b1", None]
    assert all("config" not in r[1] for r in rows)
