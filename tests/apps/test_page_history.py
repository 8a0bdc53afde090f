"""The page's history (issue 69) in headless Chromium, driven over the DevTools protocol
(tests/cdp.py): a real camera run with a store on a rendered scene (snapshots, clips) lists its
events, a filter narrows them, the next page loads, a thumbnail loads, the clip plays in place,
a track's detail opens; the "find similar" button shows only when the server has /api/search;
the store's files (/api/media/...) are only those its rows name that edgert wrote, with Range;
a second stage's ``track_label`` keeps its label in the store; a version-1 store is brought
to version 2 (the write budget's indexes) with its rows."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from edgert.apps.camera.sinks import retention
from edgert.apps.camera.sinks.web import HttpOutput
from edgert.apps.store import query, schema
from edgert.apps.store.records import row_of
from edgert.apps.store.routes import Routes
from edgert.apps.store.writer import StoreWriter
from edgert.apps.telemetry.http import Probes
from tests.apps.test_page_chromium import CHROMIUM, FLAGS
from tests.conftest import ROOT
from tests.ports import free_ports

CAMS = ["rtsp://door/1", "rtsp://yard/1"]
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
)


def _request(port: int, path: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def _events(port: int, query_string: str = "") -> dict:
    status, _, body = _request(port, f"/api/events?{query_string}")
    assert status == 200, body
    return json.loads(body)


def test_a_second_stage_s_label_is_kept_in_its_event_and_not_in_the_track_s_labels(tmp_path):
    w = StoreWriter(tmp_path / "s.db", retention.run_id(), CAMS, batch_s=0.01)
    t = time.time() - 60
    records = [
        {"event": "track_start", "stream": 0, "track_id": 7, "label": "dog", "time": t},
        {
            "event": "track_label",
            "stream": 0,
            "track_id": 7,
            "secondary": "colour",
            "label": "red",
            "confidence": 0.9,
            "time": t + 1,
        },
        {"event": "track_end", "stream": 0, "track_id": 7, "label": "dog", "time": t + 2},
    ]
    w.put([row_of(r, CAMS) for r in records])
    w.close()
    conn = query.open_read(tmp_path / "s.db")
    said = query.events(conn, query.Filters.parse({"label": "red"}))["events"]
    assert [e["kind"] for e in said] == ["track_label"] and said[0]["label"] == "red"
    assert said[0]["data"]["secondary"] == "colour" and said[0]["data"]["confidence"] == 0.9
    one = query.track(conn, said[0]["track"])
    assert one["label"] == "dog" and one["labels"] == ["dog"]  # the detector's, not "red"
    assert one["secondary"] == {"colour": {"label": "red", "confidence": 0.9}}
    assert [e["kind"] for e in one["events"]] == ["track_start", "track_label", "track_end"]


def test_a_version_1_store_is_brought_to_version_2_with_its_rows(tmp_path):
    """Version 2 (the write budget) drops the events' indexes and keeps them in time order by
    their ids (each its time in microseconds, the next free one for a time taken): a version-1
    store's rows are renumbered so, none lost, and a track's events are still found."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for sql in schema.MIGRATIONS[0]:
        conn.execute(sql)
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO tracks (run, stream, track_id, camera, label, labels, first_seen, last_seen,"
        " zones, lines) VALUES ('r', 0, 3, 'cam', 'dog', '[\"dog\"]', 100.0, 104.0, '[]', '[]')"
    )
    # inserted out of time order, two at one time
    for kind, t in (
        ("track_end", 104.0),
        ("track_start", 100.0),
        ("line_cross", 102.0),
        ("zone_enter", 102.0),
    ):
        conn.execute(
            "INSERT INTO events (kind, time, camera, track, track_id, label) "
            "VALUES (?, ?, 'cam', 1, 3, 'dog')",
            (kind, t),
        )
    conn.close()
    w = StoreWriter(path, "new", CAMS)
    w.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert not any(i.startswith("events") for i in indexes), indexes
    rows = conn.execute("SELECT id, kind FROM events ORDER BY id").fetchall()
    assert rows == [
        (100_000_000, "track_start"),
        (102_000_000, "line_cross"),
        (102_000_001, "zone_enter"),
        (104_000_000, "track_end"),
    ]
    one = query.track(conn, 1)
    assert [e["kind"] for e in one["events"]] == [k for _, k in rows]
    page = query.events(conn, query.Filters.parse({"since": "101", "until": "103"}))
    assert [e["kind"] for e in page["events"]] == ["zone_enter", "line_cross"]
    new = tmp_path / "new.db"
    StoreWriter(new, "r", CAMS).close()
    assert sqlite3.connect(new).execute("PRAGMA page_size").fetchone()[0] == 512


def test_events_of_one_microsecond_and_of_a_run_before_each_keep_their_own_id(tmp_path):
    """An event's id is its time in microseconds; a time taken (events of one frame, or a run
    before at the same moment) gets the next free one: none is lost, the order is the times'."""
    t = 1_800_000_000.5
    records = [
        {"event": "track_start", "stream": s, "track_id": 1, "label": "dog", "time": t}
        for s in (0, 1)
    ]
    for run in ("a", "b"):
        w = StoreWriter(tmp_path / "s.db", run, CAMS, batch_s=0.01)
        w.put([row_of(r, CAMS) for r in records])
        w.put([row_of({**records[0], "time": t - 1, "track_id": 2}, CAMS)])
        w.close()
    conn = query.open_read(tmp_path / "s.db")
    ids = [r[0] for r in conn.execute("SELECT id FROM events ORDER BY id")]
    us = 1_800_000_000_500_000
    assert ids == [us - 1_000_000, us - 999_999, us, us + 1, us + 2, us + 3], ids
    assert [schema.EventIds().next(t) for t in (float("nan"), -5.0, 1e300)] == [0, 0, 9 * 10**18]
    page = query.events(conn, query.Filters.parse({"limit": "4"}))
    assert [e["id"] for e in page["events"]] == [us + 3, us + 2, us + 1, us]
    rest = query.events(conn, query.Filters.parse({"cursor": page["next_cursor"]}))
    assert [e["time"] for e in rest["events"]] == [t - 1, t - 1] and rest["next_cursor"] is None


def _viewer_with_store(tmp_path, vectors: bool = False, text=None):
    """A web viewer whose probes carry the store's routes over a real store (tracks with real
    recorded snapshots and clips; with ``vectors`` an embedding per track, the dogs' alike;
    ``text``: the camera's embedder with a text tower, of model emb)."""
    from tests.apps.test_search_store import _embedding

    for folder in ("snaps", "clips"):
        (tmp_path / folder).mkdir()
    snaps = retention.Ledger(tmp_path / "snaps", "snapshots")
    clips = retention.Ledger(tmp_path / "clips", "clips")
    w = StoreWriter(tmp_path / "s.db", retention.run_id(), CAMS, batch_s=0.01)
    t0 = time.time() - 600
    import cv2
    import numpy as np

    for i in range(6):
        img = np.full((48, 64, 3), 40 * i, np.uint8)
        shot = snaps.write_new(f"t{i}", ".jpg", cv2.imencode(".jpg", img)[1].tobytes())
        base = {"stream": i % 2, "track_id": i + 1, "label": "dog" if i % 2 else "person"}
        records = [
            {**base, "event": "track_start", "time": t0 + 10 * i},
            {**base, "event": "track_end", "time": t0 + 10 * i + 3, "snapshot": str(shot)},
        ]
        if vectors:  # the dogs (odd i) near one direction, the people near another
            v = np.eye(64, dtype=np.float32)[1 if i % 2 else 2] + 0.05 * i * np.eye(64)[0]
            unit = v / np.linalg.norm(v)
            records.insert(1, _embedding(i % 2, i + 1, unit, t0 + 10 * i + 1, "int8"))
        w.put([row_of(r, CAMS) for r in records])
    clip = clips.write_new("c", ".mp4", b"\x00\x00\x00\x18ftypisom" + bytes(1000))
    outside = tmp_path / "outside.jpg"
    outside.write_bytes(b"\xff\xd8 not edgert's")
    link = tmp_path / "snaps" / "link.jpg"
    os.symlink(outside, link)
    rows = [
        {"event": "line_cross", "stream": 0, "time": t0 + 100, "line": "door", "clip": str(clip)},
        {"event": "line_cross", "stream": 0, "time": t0 + 101, "snapshot": str(outside)},
        {"event": "line_cross", "stream": 0, "time": t0 + 102, "snapshot": str(link)},
        {"event": "line_cross", "stream": 0, "time": t0 + 103, "snapshot": "/etc/passwd"},
    ]
    w.put([row_of(r, CAMS) for r in rows])
    w.close()
    snaps.close()
    clips.close()
    probes = Probes()
    Routes(tmp_path / "s.db").attach(probes)
    if text is not None:
        probes.text_embedders[text.name] = text
    return HttpOutput("127.0.0.1", 0, streams=1, probes=probes)


def test_the_store_s_files_are_only_those_its_rows_name_that_edgert_wrote(tmp_path):
    out = _viewer_with_store(tmp_path)
    try:
        port = out.port
        got = {e["time"]: e for e in _events(port, "limit=100")["events"]}
        clip_event, outside, link, passwd = (got[t]["id"] for t in sorted(got)[-4:])
        status, headers, body = _request(port, f"/api/media/events/{clip_event}/clip")
        assert status == 200 and headers["Content-Type"] == "video/mp4" and len(body) == 1012
        status, headers, body = _request(
            port, f"/api/media/events/{clip_event}/clip", {"Range": "bytes=4-11"}
        )
        assert (
            status == 206 and body == b"ftypisom" and headers["Content-Range"] == "bytes 4-11/1012"
        )
        tracks = {e["track"] for e in got.values() if e["track"] is not None}
        for track in tracks:
            status, headers, body = _request(port, f"/api/media/tracks/{track}/snapshot")
            assert (
                status == 200
                and body[:2] == b"\xff\xd8"
                and headers["Content-Type"] == "image/jpeg"
            )
        for event in (outside, link, passwd):  # a row naming a file edgert did not write
            status, _, body = _request(port, f"/api/media/events/{event}/snapshot")
            assert status == 404 and body == b"not a file edgert wrote\n", (event, body)
        for path in (
            f"/api/media/events/{clip_event}/snapshot",  # that row names no snapshot
            "/api/media/events/999999/clip",
            "/api/media/tracks/1/clip",
            "/api/media/events/..%2F..%2Fetc%2Fpasswd/clip",
            "/api/media/../../etc/passwd",
            "/api/media/",
        ):
            assert _request(port, path)[0] == 404, path
        conn = sqlite3.connect(tmp_path / "s.db")  # retention deleted it: its row says so
        conn.execute("UPDATE events SET media_gone = 1 WHERE id = ?", (clip_event,))
        conn.commit()
        status, _, body = _request(port, f"/api/media/events/{clip_event}/clip")
        assert status == 404 and body == b"deleted by retention\n"
    finally:
        out.close()


@pytest.mark.subprocess
@pytest.mark.browser
@needs_chromium
@pytest.mark.parametrize("with_search", [False, True])
def test_find_similar_shows_only_when_the_server_has_search(tmp_path, with_search):
    from tests.cdp import Browser

    out = _viewer_with_store(tmp_path, vectors=with_search)
    try:
        with Browser(CHROMIUM, FLAGS, tmp_path / "profile") as br:
            br.open(f"http://127.0.0.1:{out.port}/")
            br.wait("document.getElementById('hstatus').textContent.startsWith('page 1')")
            br.js("document.querySelector('#hlist .htrackbtn').click()")
            br.wait("!!document.querySelector('#htrack pre')")
            buttons = br.js("document.querySelectorAll('#htrack button.hsimilar').length")
            assert buttons == (1 if with_search else 0)
            assert br.js("document.getElementById('htext').hidden")  # no text tower
            if not with_search:
                return
            me = br.js("document.querySelector('#htrack pre').textContent")
            br.js("document.querySelector('#htrack button.hsimilar').click()")
            rows = br.wait(
                "[...document.querySelectorAll('#hsimilar .htr span')].map(s=>s.textContent)"
            )
            assert len(rows) == 6 and rows[0].startswith("1.000 ") and "dog" in me, (me, rows)
            assert all(" dog #" in r for r in rows[:3]) and all(" dog #" not in r for r in rows[3:])
            br.js("document.getElementById('hsimilar').scrollIntoView()")
            br.screenshot(tmp_path / "similar.png")
        shutil.copy(tmp_path / "similar.png", ROOT / "reports" / "camera_page_similar.png")
    finally:
        out.close()


@pytest.mark.subprocess
@pytest.mark.browser
@needs_chromium
def test_the_text_box_shows_with_a_text_tower_and_lists_the_api_s_ranking(tmp_path):
    from tests.apps.test_search_text import _secondary, pair_bundle
    from tests.cdp import Browser

    embedder = _secondary(pair_bundle(tmp_path / "pair", "emb", 64))
    out = _viewer_with_store(tmp_path, vectors=True, text=embedder)
    try:
        words = "a dog on the grass"
        status, _, body = _request(out.port, "/api/search?limit=20&text=" + words.replace(" ", "+"))
        want = [f"{r['similarity']:.3f}" for r in json.loads(body)["results"]]
        assert status == 200 and len(want) == 6
        with Browser(CHROMIUM, FLAGS, tmp_path / "profile") as br:
            br.open(f"http://127.0.0.1:{out.port}/")
            br.wait("document.getElementById('hstatus').textContent.startsWith('page 1')")
            assert not br.js("document.getElementById('htext').hidden")
            br.js(f"document.querySelector('#htext input').value={json.dumps(words)}")
            br.js("document.querySelector('#htext button').click()")
            rows = br.wait(
                "[...document.querySelectorAll('#hsimilar .htr span')].map(s=>s.textContent)"
            )
            assert [r.split()[0] for r in rows] == want, (rows, want)
            head = br.js("document.querySelector('#hsimilar b').textContent")
            assert head == f'like "{words}"'
            br.js("document.getElementById('hsimilar').scrollIntoView()")
            br.screenshot(tmp_path / "text.png")
        shutil.copy(tmp_path / "text.png", ROOT / "reports" / "camera_page_text_search.png")
    finally:
        out.close()


@pytest.mark.subprocess
@pytest.mark.browser
@needs_chromium
def test_the_history_lists_filters_pages_and_plays_a_real_camera_s_events(tmp_path):
    """A looped rendered scene whose objects cross a door line, with snapshots, clips and a
    store: in Chromium the history lists the store's newest events, a filter (line=door)
    narrows them, the next page loads older ones, a track's snapshot loads, a clip plays in the
    page, a track's detail opens. The screenshot is reports/camera_page_history.png."""
    from tests.apps.test_clip_folders import _can_clip
    from tests.apps.test_gate import quiet_scene
    from tests.procs import SCENE, running
    from tests.tiny import blob_detector_bundle

    if not _can_clip():
        pytest.skip("clips need GStreamer's x264enc and mp4mux and ffprobe (.ci/run installs them)")
    bundle = blob_detector_bundle(tmp_path / "det")
    video = quiet_scene(tmp_path / "scene.mp4")
    port = free_ports(1)[0]
    app = running(
        *("camera", bundle, "--source", video, "--loop", "--headless", *SCENE),
        *("--snapshots", tmp_path / "snaps", "--clips", tmp_path / "clips"),
        *(
            "--pre-roll",
            "1",
            "--post-roll",
            "1",
            "--store",
            f"{tmp_path / 'ev.db'}?batch_s=0.5",
        ),
        *("--output", f"http://127.0.0.1:{port}", "--duration", "90"),
    )
    try:
        deadline, events = time.monotonic() + 60, []
        while time.monotonic() < deadline:  # two tracks ended (snapshots), clips finished
            try:
                events = _events(port, "limit=100")["events"]
            except (OSError, AssertionError, ValueError):
                events = []
            done = [e for e in events if e["kind"] == "track_end"]
            clips = [e for e in events if e["clip"] and Path(e["clip"]).exists()]
            doors = [e for e in events if e["kind"] == "line_cross" and e["line"] == "door"]
            if len(done) >= 2 and len(clips) >= 2 and len(events) >= 8 and len(doors) >= 4:
                break
            time.sleep(0.5)
        assert len(events) >= 8 and len(doors) >= 4, events  # two pages of three crossings
        _browse(tmp_path, port)
    finally:
        app.terminate()
        _, err = app.communicate(timeout=60)
    assert app.returncode in (0, 130, 143), err


def _browse(tmp_path, port: int) -> None:
    from tests.cdp import Browser

    rows = "[...document.querySelectorAll('#hlist .hev')]"
    with Browser(CHROMIUM, FLAGS, tmp_path / "profile") as br:
        br.open(f"http://127.0.0.1:{port}/")
        br.wait("document.getElementById('hstatus').textContent.startsWith('page 1')")
        first = br.js(f"{rows}.map(r=>+r.dataset.id)")
        # the store's newest events when the page read them (the camera adds more meanwhile)
        api = [e["id"] for e in _events(port, "limit=200")["events"]]
        at = api.index(first[0])
        assert len(first) >= 8 and first == api[at : at + len(first)], (first, api)
        assert br.js("document.querySelectorAll('#htrack button.hsimilar').length") == 0
        # a filter narrows them: line=door, only the crossings
        br.js(
            "{const f=document.getElementById('hfilters');f.elements.line.value='door';"
            "f.elements.limit.value='3';f.requestSubmit()}"
        )
        doors = br.wait(
            f"document.getElementById('hstatus').textContent.startsWith('page 1: 3 ')&&"
            f"{rows}.map(r=>r.textContent)"
        )
        assert len(doors) == 3 and all("line_cross door" in t for t in doors), doors
        ids1 = br.js(f"{rows}.map(r=>+r.dataset.id)")
        br.js("document.getElementById('hnext').click()")  # the next page: older crossings
        br.wait("document.getElementById('hstatus').textContent.startsWith('page 2')")
        ids2 = br.js(f"{rows}.map(r=>+r.dataset.id)")
        texts2 = br.js(f"{rows}.map(r=>r.textContent)")
        assert ids2 and max(ids2) < min(ids1) and all("line_cross door" in t for t in texts2)
        br.js(  # one page holds every crossing: "next" (hidden) does not read page 1 again
            "{const f=document.getElementById('hfilters');f.elements.limit.value='1000';"
            "f.requestSubmit()}"
        )
        br.wait(
            "/^page 1: \\d+ event\\(s\\)$/.test(document.getElementById('hstatus').textContent)"
        )
        assert br.js("document.getElementById('hnext').hidden") is True
        br.js("document.getElementById('hnext').click()")
        time.sleep(1.0)
        assert br.js("document.getElementById('hstatus').textContent").startswith("page 1:")
        br.js(
            "{const f=document.getElementById('hfilters');f.elements.line.value='';"
            "f.elements.limit.value='20';f.requestSubmit()}"
        )
        br.wait(
            f"document.getElementById('hstatus').textContent.startsWith('page 1') && {rows}.length>=8"
        )
        widths = br.wait(  # a track's best snapshot, loaded
            "[...document.querySelectorAll('#hlist img.hthumb')].filter(i=>i.complete&&"
            "i.naturalWidth>0).map(i=>i.naturalWidth)"
        )
        assert widths and widths[0] > 0
        br.js(f"{rows}.find(r=>r.querySelector('.hplay')).querySelector('.hplay').click()")
        video = "document.getElementById('hvideo')"
        state = br.wait(f"{video}.readyState>=2&&[{video}.readyState,{video}.currentTime]", 30)
        later = br.wait(f"{video}.currentTime>{state[1]}&&{video}.currentTime", 30)
        assert state[0] >= 2 and later > state[1]  # it plays in the page
        br.js(f"{rows}.find(r=>r.querySelector('.htrackbtn')).querySelector('.htrackbtn').click()")
        detail = br.wait(
            "document.querySelector('#htrack pre')&&document.querySelector('#htrack pre').textContent"
        )
        assert detail.startswith("track ") and "label    blob" in detail, detail
        br.js("document.getElementById('history').scrollIntoView()")
        time.sleep(0.5)
        shot = tmp_path / "history.png"
        br.screenshot(shot)
    (ROOT / "reports").mkdir(exist_ok=True)
    shutil.copy(shot, ROOT / "reports" / "camera_page_history.png")
