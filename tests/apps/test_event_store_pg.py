"""The event store on a real PostgreSQL server (issue 69), Debian's, started by the test on a free
loopback port (``pg_server.py``): two real camera runs ("devices") write one database, their
events file and the store agree, and ``edgert events query postgresql://...`` reads both; the
server stopped in the middle of a run and started again loses no event and keeps each once (the
spool replayed, and replayed twice); ``/api/events`` of a camera on the server; the password is
in no output; a bad URI, an unset variable, a wrong password and a server that is not there are
each one sentence."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from edgert.apps.store import postgres
from edgert.apps.store.records import row_of
from edgert.runtime.errors import OutputError
from tests.apps.pg_server import PASSWORD, PgServer, needs_postgres
from tests.apps.test_event_store import _get, door_events
from tests.apps.test_gate import quiet_scene
from tests.conftest import assert_user_error, run_cli
from tests.ports import free_ports
from tests.procs import SCENE, running
from tests.tiny import blob_detector_bundle

pytestmark = [needs_postgres, pytest.mark.subprocess]


@pytest.fixture
def pg(monkeypatch):
    monkeypatch.setenv("EDGERT_PG_PASSWORD", PASSWORD)
    server = PgServer()
    yield server
    server.remove()


def _lines(path) -> list:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_two_devices_write_one_database_and_events_query_reads_both(pg, tmp_path):
    bundle = blob_detector_bundle(tmp_path / "det")
    video = quiet_scene(tmp_path / "scene.mp4")
    outputs = []
    for device in ("door-a", "door-b"):
        ev = tmp_path / f"{device}.jsonl"
        store = pg.uri(device=device, batch_s="0.3", spool=tmp_path / f"{device}.spool")
        proc = run_cli(
            *("camera", bundle, "--source", video, "--headless", *SCENE, "--json"),
            *("--store", store, "--events", ev),
        )
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout + proc.stderr)
        written = [e for e in _lines(ev) if e["event"] != "run_start"]
        kept = pg.sql(f"SELECT kind, track_id FROM events WHERE device = '{device}' ORDER BY id")
        assert len(written) >= 4 and sorted(kept) == sorted(
            (e["event"], e.get("track_id")) for e in written
        )
        report = next(o for o in json.loads(proc.stdout)["outputs"] if o.get("output") == "store")
        assert report["path"].startswith("postgresql://edgert:***@127.0.0.1")
        assert report["events"] == len(written)
        assert report["device"] == device and report["outages"] == report["spooled"] == 0
    (runs,) = pg.sql("SELECT count(*), count(DISTINCT device) FROM runs")
    assert runs == (2, 2)
    (n,) = pg.sql("SELECT count(*) FROM events")[0]
    page = run_cli("events", "query", pg.uri(), "--limit", "1000", "--json")
    assert page.returncode == 0, page.stderr
    shown = json.loads(page.stdout)["events"]
    assert len(shown) == n and {e["device"] for e in shown} == {"door-a", "door-b"}
    doors = run_cli("events", "query", pg.uri(), "--line", "door", "--limit", "2")
    assert doors.returncode == 0 and "line=door" in doors.stdout and "--cursor" in doors.stdout
    assert doors.stdout.splitlines()[0].split()[2] in ("door-a:", "door-b:")
    outputs += [page.stderr, doors.stdout, doors.stderr]
    assert not any(PASSWORD in o for o in outputs)


def _writer(pg, tmp_path, **kw) -> postgres.PgWriter:
    target = postgres.parse(pg.uri(device="dev", spool=tmp_path / "spool.jsonl", batch_s="0.05"))
    return postgres.PgWriter(target, "run1", ["cam"], batch_s=0.05, **kw)


def _put(w, seqs, t0: float) -> None:
    for i in seqs:
        e = {"event": "line_cross", "track_id": i % 7, "line": "door", "time": t0 + i, "seq": i}
        w.put([row_of(e, ["cam"])])
        time.sleep(0.002)


def _wait(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert predicate()


def _stored(pg) -> list:
    return [int(s) for (s,) in pg.sql("SELECT data::json->>'seq' FROM events ORDER BY id")]


def test_the_server_stopped_mid_run_loses_no_event_and_keeps_each_once(pg, tmp_path):
    """Events 0-39 committed; the server stopped (a fast shutdown cuts the connection): 40-79
    go to the spool; started again: the spool replayed in order, then 80-119. A copy of the
    spool replayed by a second writer (a run killed after the replay's commit, before the spool
    was emptied) adds nothing: each event is kept once (its uid)."""
    t0 = time.time() - 600
    w = _writer(pg, tmp_path)
    _put(w, range(40), t0)
    _wait(lambda: len(_stored(pg)) == 40)
    pg.stop()
    _put(w, range(40, 80), t0)
    _wait(lambda: w.spool.size > 0 and not w.pending)
    time.sleep(0.3)  # the last batch spooled
    kept = tmp_path / "spool-copy.jsonl"
    shutil.copy(w.spool.path, kept)
    pg.start()
    _wait(lambda: w.replayed >= 40)  # the writer tries again every 2 s
    _put(w, range(80, 120), t0)
    w.close()
    assert w.outages == 1 and w.replayed >= 40 and not w.spool.path.exists()
    assert _stored(pg) == list(range(120))  # none lost, none twice, in order
    (tracks,) = pg.sql("SELECT count(*) FROM tracks")[0]
    assert tracks == 7
    shutil.copy(kept, tmp_path / "spool.jsonl")  # the same rows again
    again = _writer(pg, tmp_path)
    _wait(lambda: again.replayed > 0)
    again.close()
    assert again.duplicates >= 40 and _stored(pg) == list(range(120))


def test_a_camera_on_the_server_answers_api_events(pg, tmp_path):
    bundle = blob_detector_bundle(tmp_path / "det")
    video = quiet_scene(tmp_path / "scene.mp4")
    port = free_ports(1)[0]
    app = running(
        *("camera", bundle, "--source", video, "--loop", "--headless", *SCENE),
        *("--store", pg.uri(batch_s="0.2", spool=tmp_path / "s.jsonl")),
        *("--output", f"http://127.0.0.1:{port}", "--duration", "60"),
        stdout=subprocess.PIPE,
    )
    try:
        got = door_events(port)
        assert len(got) >= 2 and {e["line"] for e in got} == {"door"}, got
        status, one = _get(port, f"/api/tracks/{got[0]['track']}")
        assert status == 200 and one["label"] == "blob" and "door" in one["lines"]
    finally:
        app.terminate()
        out, err = app.communicate(timeout=60)
    assert app.returncode in (0, 130, 143), err
    assert PASSWORD not in out + err


def test_bad_uris_a_wrong_password_and_no_server_are_one_sentence(pg, tmp_path):
    bundle = blob_detector_bundle(tmp_path / "det")
    port = free_ports(1)[0]  # nothing listens there
    cases = [
        (f"postgresql://edgert:${{EDGERT_PG_PASSWORD}}@127.0.0.1:{port}/db", "cannot connect", 2),
        (pg.uri().replace("EDGERT_PG_PASSWORD", "EDGERT_PG_NOPE"), "EDGERT_PG_NOPE is not set", 2),
        (pg.uri().replace("EDGERT_PG_PASSWORD", "EDGERT_PG_WRONG"), "password authentication", 2),
        (f"postgresql://edgert@127.0.0.1:{port}/", "names no database", 2),
        (pg.uri(batch_s="-1"), "batch_s= is a number above 0", 2),
    ]
    for uri, said, code in cases:
        proc = run_cli(
            *("camera", bundle, "--source", "synthetic://", "--headless", "--max-frames", "3"),
            *("--store", uri),
            env={"EDGERT_PG_WRONG": "not-it"},
        )
        assert_user_error(proc, said, code=code)
        assert PASSWORD not in proc.stderr + proc.stdout
    query = run_cli("events", "query", f"postgresql://edgert:{PASSWORD}@127.0.0.1:{port}/db")
    assert_user_error(query, "cannot connect")
    assert PASSWORD not in query.stderr
    empty = run_cli("events", "query", pg.uri())
    assert_user_error(empty, "holds no store edgert wrote")
    with pytest.raises(OutputError, match="names no database"):
        postgres.parse("postgresql://u@h")


def test_without_psycopg_the_store_and_the_query_say_how_to_install_it(tmp_path):
    """The driver is an extra (edgert[postgres]): without it, one sentence with the pip line
    (the camera refuses before any source opens: its check)."""
    folder = tmp_path / "nopg" / "psycopg"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("raise ImportError('psycopg is not installed')\n")
    env = {"PYTHONPATH": str(folder.parent), "EDGERT_PG_PASSWORD": PASSWORD}
    uri = f"postgresql://edgert:${{EDGERT_PG_PASSWORD}}@127.0.0.1:{free_ports(1)[0]}/db"
    bundle = blob_detector_bundle(tmp_path / "det")
    for args in (("camera", bundle, "--store", uri), ("events", "query", uri)):
        proc = run_cli(*args, env=env)
        assert_user_error(proc, "needs psycopg", "pip install 'edgert[postgres]'", code=1)
