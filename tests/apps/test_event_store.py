"""The event store (issue 69): rows of real events written by the writer thread into a real
SQLite file, read back with the page's filters and cursor paging; the tracks' rows; keep_days;
retention deleting a real file marks its rows in the same step; a start's reconcile pass; a store
from a newer edgert refused; ``edgert events query`` in a subprocess (bad input: one sentence,
exit 2); and a real camera run whose store answers ``/api/events`` and ``/api/tracks/ID`` over
real HTTP, and whose store is made beside its snapshots by default."""

from __future__ import annotations

import http.client
import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from edgert.apps.camera.sinks import retention
from edgert.apps.store import query, schema
from edgert.apps.store.reconcile import reconcile
from edgert.apps.store.records import row_of
from edgert.apps.store.writer import StoreWriter
from edgert.runtime.errors import OutputError
from tests.apps.test_gate import quiet_scene
from tests.conftest import assert_user_error, benchmark, run_cli
from tests.ports import free_ports
from tests.procs import SCENE, running
from tests.tiny import blob_detector_bundle

CAMS = ["rtsp://door/1", "rtsp://yard/1"]


def _track_events(track: int, t: float, label: str = "person", stream: int = 0) -> list:
    base = {"stream": stream, "track_id": track, "label": label}
    return [
        {**base, "event": "track_start", "time": t},
        {**base, "event": "line_cross", "line": "door", "direction": "in", "time": t + 1},
        {**base, "event": "zone_enter", "zone": "pen", "time": t + 2},
        {
            "event": "track_label",
            "stream": stream,
            "track_id": track,
            "secondary": "colour",
            "label": "red",
            "confidence": 0.9,
            "time": t + 2.5,
        },
        {**base, "event": "zone_exit", "zone": "pen", "time": t + 3},
        {**base, "event": "track_end", "snapshot": f"/shots/{track}.jpg", "time": t + 4},
    ]


def _filled(path: Path, tracks: int = 30, t0: float | None = None, **kw) -> StoreWriter:
    t0 = time.time() - 3600 if t0 is None else t0
    w = StoreWriter(path, retention.run_id(), CAMS, batch_s=0.01, **kw)
    for i in range(tracks):
        label = "dog" if i % 5 == 0 else "person"
        w.put([row_of(e, CAMS) for e in _track_events(i + 1, t0 + 10 * i, label, i % 2)])
    return w


def test_tracks_and_events_are_kept_and_read_back_with_the_page_s_filters(tmp_path):
    w = _filled(tmp_path / "s.db")
    w.close()
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
    assert w.events == 180 and w.tracks_written == 30

    def page(**given):
        return query.events(conn, query.Filters.parse({k: str(v) for k, v in given.items()}))

    dogs = page(label="dog", limit=100)["events"]
    # 6 dog tracks, 5 events each (a track_label event carries the second stage's label)
    assert len(dogs) == 6 * 5 and all(e["label"] == "dog" for e in dogs)
    assert [e["time"] for e in dogs] == sorted((e["time"] for e in dogs), reverse=True)
    assert {e["camera"] for e in page(camera=CAMS[1], limit=1000)["events"]} == {CAMS[1]}
    assert len(page(line="door", limit=1000)["events"]) == 30
    assert {e["kind"] for e in page(zone="pen", limit=1000)["events"]} == {
        "zone_enter",
        "zone_exit",
    }
    t0 = dogs[-1]["time"]  # the first dog's start: within [since, until] exactly
    window = page(since=t0, until=t0 + 4, limit=1000)["events"]
    assert len(window) == 6 and {e["track_id"] for e in window} == {1}
    assert page(since="-10m")["events"] == []  # everything is an hour old
    seen, cursor = [], None
    while True:  # paging: every event once, newest first, in pages of 7
        got = page(limit=7, **({"cursor": cursor} if cursor else {}))
        seen += [e["id"] for e in got["events"]]
        cursor = got["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(seen, reverse=True) and len(seen) == len(set(seen)) == 180
    one = query.track(conn, dogs[0]["track"])
    assert one["labels"] == ["dog"] and one["zones"] == ["pen"] and one["lines"] == ["door"]
    assert one["secondary"]["colour"]["label"] == "red" and one["snapshot"].endswith(".jpg")
    assert one["last_seen"] - one["first_seen"] == pytest.approx(4)
    assert [e["kind"] for e in one["events"]][0] == "track_start" and len(one["events"]) == 6
    assert query.track(conn, 10**6) is None


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"since": "yesterday"}, "since 'yesterday' is not a time"),
        ({"limit": "0"}, "limit '0': give a whole number from 1 to 1000"),
        ({"limit": "many"}, "limit 'many'"),
        ({"since": "-1h", "until": "-2h"}, "since is after until"),
        ({"cursor": "abc"}, "cursor 'abc' is not one this store gave"),
    ],
)
def test_bad_filters_are_one_sentence(given, said):
    with pytest.raises(query.QueryError, match=said):
        query.Filters.parse(given)


def test_times_are_iso_epoch_or_relative():
    now = 1_800_000_000.0
    assert query.parse_time("-1h", "since", now) == now - 3600
    assert query.parse_time("-2d", "since", now) == now - 2 * 86400
    assert query.parse_time("1700000000", "since", now) == 1_700_000_000
    assert query.parse_time("2026-12-06T14:00:00+00:00", "since", now) == 1796565600


def test_keep_days_deletes_old_rows_and_retention_marks_the_rows_of_what_it_deletes(tmp_path):
    old = _filled(tmp_path / "s.db", tracks=5, t0=time.time() - 3 * 86400)
    old.close()
    w = _filled(tmp_path / "s.db", tracks=5, keep_days=1)  # the 3-day-old rows pruned at start
    assert w.pruned == 30
    folder = tmp_path / "shots"
    folder.mkdir()
    ledger = retention.Ledger(folder, "snapshots")
    kept = ledger.write_new("a", ".jpg", b"x")
    w.put(
        [
            row_of(
                {"event": "track_end", "track_id": 99, "snapshot": str(kept), "time": time.time()},
                CAMS,
            )
        ]
    )
    retention.on_deleted.append(w.gone)
    try:
        os.utime(kept, (time.time() - 5 * 86400,) * 2)
        ledger.write_new("b", ".jpg", b"y")  # the newest stays; a is 5 days old
        assert ledger.retain(keep_days=1) == [kept]
    finally:
        retention.on_deleted.remove(w.gone)
        ledger.close()
    w.close()
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 31
    assert conn.execute(
        "SELECT media_gone FROM events WHERE snapshot = ?", (str(kept),)
    ).fetchall() == [(1,)]
    assert conn.execute("SELECT snapshot_gone FROM tracks WHERE track_id = 99").fetchone() == (1,)


def test_reconcile_marks_rows_of_missing_files_and_counts_files_no_row_names(tmp_path):
    folder = tmp_path / "shots"
    folder.mkdir()
    ledger = retention.Ledger(folder, "snapshots")
    named, gone, stray = (ledger.write_new(n, ".jpg", b"x") for n in ("named", "gone", "stray"))
    ledger.close()
    w = StoreWriter(tmp_path / "s.db", "abcd1234", CAMS, batch_s=0.01)
    w.put(
        [
            row_of(
                {"event": "track_end", "track_id": i, "snapshot": str(p), "time": time.time()}, CAMS
            )
            for i, p in ((1, named), (2, gone))
        ]
    )
    w.close()
    gone.unlink()
    (folder / "users-own.jpg").write_bytes(b"z")  # not edgert's: never counted
    conn = schema.connect(tmp_path / "s.db")
    found = reconcile(conn)
    assert found["rows_of_missing_files"] == 1 and found["unknown_files"] == 1
    assert found["unknown_shown"] == [str(stray)]
    assert conn.execute("SELECT snapshot FROM events WHERE media_gone = 1").fetchall() == [
        (str(gone),)
    ]
    assert reconcile(conn)["rows_of_missing_files"] == 0  # marked once


def test_a_store_from_a_newer_edgert_is_refused_in_a_sentence(tmp_path):
    path = tmp_path / "s.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {schema.VERSION + 1}")
    conn.close()
    with pytest.raises(OutputError, match="newer than this edgert's"):
        StoreWriter(path, "abcd1234", CAMS)
    (tmp_path / "text.db").write_text("not a database, but long enough to be read as one " * 40)
    with pytest.raises(OutputError, match="not a store edgert can use"):
        StoreWriter(tmp_path / "text.db", "abcd1234", CAMS)


def test_two_writers_opening_one_new_store_at_once_both_start(tmp_path):
    """Two runs sharing a folder start together (CI's two cameras on one snapshots folder):
    the second reads the version before the first's migration commits, waits for its lock,
    and must find the tables made rather than make them again ("table runs already exists")."""
    import threading

    path = tmp_path / "s.db"
    first = sqlite3.connect(path, isolation_level=None, timeout=10)
    first.execute("PRAGMA journal_mode = WAL")
    first.execute("BEGIN IMMEDIATE")  # the first writer, mid-migration
    got: list = []

    def second():
        try:
            got.append(schema.connect(path))
        except Exception as exc:  # noqa: BLE001 - the test reports what it was
            got.append(exc)

    thread = threading.Thread(target=second)
    thread.start()
    time.sleep(1.0)  # it has read version 0 and waits on the lock
    for statements in schema.MIGRATIONS:
        for sql in statements:
            schema._STEPS[sql](first) if sql in schema._STEPS else first.execute(sql)
    first.execute(f"PRAGMA user_version = {schema.VERSION}")
    first.execute("COMMIT")
    thread.join(30)
    assert len(got) == 1 and isinstance(got[0], sqlite3.Connection), got
    assert got[0].execute("PRAGMA user_version").fetchone()[0] == schema.VERSION


@pytest.mark.subprocess
def test_events_query_reads_a_store_without_a_camera_and_refuses_bad_input(tmp_path):
    _filled(tmp_path / "s.db").close()
    proc = run_cli(
        "events",
        "query",
        tmp_path / "s.db",
        "--label",
        "dog",
        "--limit",
        "4",
        "--since",
        "-2h",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    page = json.loads(proc.stdout)
    assert len(page["events"]) == 4 and page["next_cursor"] and page["events"][0]["label"] == "dog"
    text = run_cli("events", "query", tmp_path / "s.db", "--zone", "pen", "--limit", "3")
    assert text.returncode == 0 and "zone=pen" in text.stdout and "--cursor" in text.stdout
    assert_user_error(
        run_cli("events", "query", tmp_path / "s.db", "--since", "soon"),
        "since 'soon' is not a time",
    )
    assert_user_error(run_cli("events", "query", tmp_path / "none.db"), "does not exist")
    (tmp_path / "empty.db").write_bytes(b"")
    assert_user_error(run_cli("events", "query", tmp_path / "empty.db"), "not a store edgert")
    assert_user_error(run_cli("camera", "x.onnx", "--store", "a.db?batch_s=-1"), "batch_s=")


def _get(port: int, path: str):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def door_events(port: int, seconds: float = 50) -> list:
    """The door line's events a running camera's /api/events answers, once there are two (or
    what there is after ``seconds``)."""
    deadline, got = time.monotonic() + seconds, []
    while time.monotonic() < deadline and len(got) < 2:
        try:
            got = _get(port, "/api/events?line=door&limit=10")[1]["events"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.3)
    return got


@pytest.mark.subprocess
def test_a_running_camera_answers_api_events_and_tracks_from_its_store(tmp_path):
    bundle = blob_detector_bundle(tmp_path / "det")
    video = quiet_scene(tmp_path / "scene.mp4")
    port = free_ports(1)[0]
    store = tmp_path / "ev.db"
    app = running(
        *("camera", bundle, "--source", video, "--loop", "--headless", *SCENE),
        *("--zone", "pen=200,0,320,0,320,120,200,120", "--store", f"{store}?batch_s=0.2"),
        *("--output", f"http://127.0.0.1:{port}", "--duration", "60"),
    )
    try:
        got = door_events(port)
        assert len(got) >= 2 and {e["line"] for e in got} == {"door"}, got
        status, one = _get(port, f"/api/tracks/{got[0]['track']}")
        assert status == 200 and "door" in one["lines"] and one["label"] == "blob"
        assert any(e["kind"] == "line_cross" for e in one["events"])
        status, page = _get(port, "/api/events?limit=1")
        assert status == 200 and page["next_cursor"]
        status, page2 = _get(port, f"/api/events?limit=1&cursor={page['next_cursor']}")
        assert page2["events"][0]["id"] < page["events"][0]["id"]
        assert _get(port, "/api/events?since=later")[0] == 400
        status, said = _get(port, "/api/events?colour=red")
        assert status == 400 and "unknown filter 'colour'" in said["error"]
        assert _get(port, "/api/tracks/999999")[0] == 404
        assert _get(port, "/api/tracks/x")[0] == 404
    finally:
        app.terminate()
        _, err = app.communicate(timeout=60)
    assert app.returncode in (0, 130, 143), err
    conn = sqlite3.connect(store)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.subprocess
def test_the_store_is_beside_the_snapshots_by_default_and_none_turns_it_off(tmp_path):
    bundle = blob_detector_bundle(tmp_path / "det")
    video = quiet_scene(tmp_path / "scene.mp4")
    shots = tmp_path / "shots"
    proc = run_cli(
        "camera", bundle, "--source", video, "--headless", *SCENE, "--json", "--snapshots", shots
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    store = shots / ".edgert" / "events.db"
    report = next(
        o for o in summary["outputs"] if isinstance(o, dict) and o.get("output") == "store"
    )
    assert report["path"] == str(store) and report["events"] >= 4 and report["tracks"] == 2
    assert report["bytes_written"] > 0 and "bytes_written_per_hour" in report
    conn = sqlite3.connect(store)
    snaps = [r[0] for r in conn.execute("SELECT snapshot FROM tracks WHERE snapshot IS NOT NULL")]
    assert len(snaps) == 2 and all(Path(s).parent == shots and Path(s).exists() for s in snaps)
    off = tmp_path / "off"
    proc = run_cli(
        "camera",
        bundle,
        "--source",
        video,
        "--headless",
        *SCENE,
        "--snapshots",
        off,
        "--store",
        "none",
    )
    assert proc.returncode == 0, proc.stderr
    assert not (off / ".edgert" / "events.db").exists()


@pytest.mark.subprocess
@pytest.mark.parametrize("cut_wal", [False, True])
def test_killed_writers_leave_a_whole_store_with_every_acknowledged_event(cut_wal):
    """benchmarks/store_kill.py with a few kills (the report's table has 200): SIGKILL at random
    moments (and the WAL's commit in flight cut at a random offset, a torn write); every store
    whole; nothing acknowledged (committed) lost; what was lost is at most about one batch
    window's events (10 s of 2.5 a second)."""
    report = benchmark("store_kill").run(4, cut_wal, seed=3)
    assert report["corrupt"] == 0, report
    assert report["acked_lost"] == 0 and report["events_acked"] > 0, report
    assert report["max_unacked_lost_per_kill"] <= 30, report


@pytest.mark.subprocess
def test_a_killed_camera_keeps_every_event_its_api_answered(tmp_path):
    """A real camera on a looping scene, its store committing every 0.5 s, killed with SIGKILL
    twice after /api/events answered: each time the store is whole and holds every event the API
    had answered, and the next run goes on in the same store."""
    bundle = blob_detector_bundle(tmp_path / "det")
    video = quiet_scene(tmp_path / "scene.mp4", fps=50)  # 4 s a loop: events every second or so
    store = tmp_path / "ev.db"
    answered: set = set()
    for _ in range(2):
        port = free_ports(1)[0]
        app = running(
            *("camera", bundle, "--source", video, "--loop", "--headless", *SCENE),
            *("--store", f"{store}?batch_s=0.5", "--output", f"http://127.0.0.1:{port}"),
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline, before = time.monotonic() + 60, len(answered)
            while time.monotonic() < deadline and len(answered) < before + 6:
                try:
                    page = _get(port, "/api/events?limit=100")[1]["events"]
                    answered |= {e["id"] for e in page}
                except (OSError, ValueError, KeyError):
                    pass
                time.sleep(0.2)
            assert len(answered) >= before + 6
        finally:
            app.kill()
            app.wait(30)
        conn = sqlite3.connect(store)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        kept = {r[0] for r in conn.execute("SELECT id FROM events")}
        conn.close()
        assert answered <= kept, sorted(answered - kept)


@pytest.mark.parametrize("folder", ["a#b", "a?mode=rwc", "100%25 full"])
def test_a_store_whose_path_has_uri_characters_is_read_where_it_is(tmp_path, folder):
    """SQLite reads ``file:`` names as URIs: a path's ``#``, ``?`` or ``%`` once cut the name
    (or turned read-only into read-write) before the store was opened. The query command and the
    camera's /api routes open the file the path names, read only."""
    from edgert.apps.store.routes import Routes

    (tmp_path / folder).mkdir()
    path = tmp_path / folder / "events.db"
    _filled(path, tracks=3).close()
    f = query.Filters.parse({"limit": "100"})
    assert len(query.read(str(path), lambda conn, ph: query.events(conn, f))["events"]) == 18
    code, body, _ = Routes(path).events("/api/events?limit=100")
    assert code == 200 and len(json.loads(body)["events"]) == 18
    # nothing opened or created anywhere else (the WAL's own -wal and -shm sit beside the store)
    assert [p.name for p in tmp_path.iterdir()] == [folder]
    assert {p.name for p in path.parent.iterdir()} <= {
        "events.db",
        "events.db-wal",
        "events.db-shm",
    }
