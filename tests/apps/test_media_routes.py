"""The web viewer's ``/media`` routes against what a local user can put in the folders (issue 46):
a named snapshot replaced by a link to a secret or to ``/dev/zero``, or by another regular file,
is not served; files are streamed (a 200 MB clip to several slow clients leaves the process's
memory flat), ``Range`` works as players use it, downloads at once are bounded, and ``HEAD``
answers. A real camera process, real HTTP over loopback."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from edgert.apps.camera.sinks.retention import RECORD, RECORD_DIR
from tests.apps.test_clip_folders import _can_clip
from tests.apps.test_gate import quiet_scene
from tests.conftest import ROOT
from tests.ports import free_ports
from tests.procs import SCENE, edgert, rss_mb
from tests.tiny import blob_detector_bundle

pytestmark = pytest.mark.subprocess


def _ask(port: int, path: str, method: str = "GET", headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def _slow_reader(port: int, path: str) -> socket.socket:
    """A client that asks for ``path`` and reads a little now and then (a slow link)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return s


@pytest.mark.skipif(not _can_clip(), reason="clips need GStreamer's x264enc, mp4mux and ffprobe")
def test_media_serves_only_what_edgert_wrote_and_streams_it(tmp_path):
    bundle = blob_detector_bundle(tmp_path / "det")
    video = quiet_scene(tmp_path / "scene.mp4")
    port = free_ports(1)[0]
    snaps, clips = tmp_path / "snaps", tmp_path / "clips"
    app = subprocess.Popen(
        edgert(
            *("camera", bundle, "--source", video, "--loop", "--headless", *SCENE),
            *("--snapshots", snaps, "--clips", clips, "--pre-roll", "1", "--post-roll", "1"),
            *("--output", f"http://127.0.0.1:{port}", "--duration", "90"),
        ),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        shots, clip = [], None
        while time.monotonic() < deadline and (len(shots) < 4 or clip is None):
            try:
                events = json.loads(_ask(port, "/events.json")[2])
            except OSError:
                events = []
            shots = [e["snapshot"] for e in events if "snapshot" in e]
            clip = next(
                (
                    e["clip"]
                    for e in events
                    if "clip" in e and (clips / Path(e["clip"]).name).exists()
                ),
                None,
            )
            time.sleep(0.5)
        assert len(shots) >= 4 and clip, events
        code, head, body = _ask(port, shots[0])
        assert code == 200 and body[:2] == b"\xff\xd8" and head["Accept-Ranges"] == "bytes"
        code, head, body = _ask(port, shots[0], "HEAD")
        assert code == 200 and body == b"" and int(head["Content-Length"]) > 1000
        assert _ask(port, "/", "HEAD")[0] == 200

        # links and other files put under a name an event gave: never served
        secret = tmp_path / "secret.txt"
        secret.write_text("root:x:0:0:the secret\n")
        for i, target in enumerate((secret, Path("/dev/zero"))):
            name = snaps / Path(shots[i + 1]).name
            name.unlink()
            name.symlink_to(target)
        mine = snaps / Path(shots[3]).name
        tmp = tmp_path / "mine.jpg"
        tmp.write_bytes(mine.read_bytes())  # the same bytes, but another file: not edgert's
        os.replace(tmp, mine)
        before = rss_mb(app.pid)
        for shot in shots[1:4]:
            code, _, body = _ask(port, shot)
            assert code == 404 and b"not a file edgert wrote" in body, (shot, code, body[:80])
        assert rss_mb(app.pid) - before < 20

        # Range, as players seek
        size = (clips / Path(clip).name).stat().st_size
        whole = (clips / Path(clip).name).read_bytes()
        code, head, body = _ask(port, clip, headers={"Range": "bytes=100-199"})
        assert code == 206 and body == whole[100:200], (code, head)
        assert head["Content-Range"] == f"bytes 100-199/{size}"
        code, head, body = _ask(port, clip, headers={"Range": "bytes=-10"})
        assert code == 206 and body == whole[-10:]
        code, head, _ = _ask(port, clip, headers={"Range": f"bytes={size}-"})
        assert code == 416 and head["Content-Range"] == f"bytes */{size}"

        # a 200 MB clip (edgert's, grown in place and recorded as such) to slow clients
        path = clips / Path(clip).name
        with open(path, "ab") as f:
            f.truncate(200 << 20)
        st = os.lstat(path)
        with open(clips / RECORD_DIR / RECORD, "a") as f:
            entry = {"name": path.name, "id": [st.st_dev, st.st_ino, st.st_size]}
            f.write(json.dumps(entry) + "\n")
        before = rss_mb(app.pid)
        readers = [_slow_reader(port, clip) for _ in range(8)]
        statuses, peak = [], before
        for s in readers:
            statuses.append(s.recv(64).split(b" ")[1])
        for _ in range(10):  # 5 s of slow reading
            for s in readers:
                with contextlib.suppress(OSError):
                    s.recv(65536)
            peak = max(peak, rss_mb(app.pid))
            time.sleep(0.5)
        for s in readers:
            s.close()
        assert statuses.count(b"200") == 4 and statuses.count(b"503") == 4, statuses
        assert peak - before < 40, (before, peak)  # read whole, four answers would be 800 MB
    finally:
        app.terminate()
        _, err = app.communicate(timeout=60)
    assert app.returncode == 0, err


def test_slow_downloads_give_their_slots_back(tmp_path, monkeypatch):
    """Fault battery 6, G16: four clients that read a clip at a few KB/s held every /media slot
    for as long as they lasted (95 minutes for an 11 MB clip): everyone else got 503. A download
    must now keep an average rate (after a grace): a client under it is dropped and its slot
    comes back. The server in this process (the rate tuned to make it seconds), real sockets."""
    from edgert.apps.camera.sinks import web
    from edgert.apps.camera.sinks.web import HttpOutput

    monkeypatch.setattr(web, "MEDIA_MIN_RATE", 1 << 20)
    monkeypatch.setattr(web, "MEDIA_GRACE_S", 1.0)
    folder = tmp_path / "clips"
    (folder / RECORD_DIR).mkdir(parents=True)
    clip, shot = folder / "big.mp4", folder / "shot.jpg"
    with open(clip, "wb") as f:
        f.truncate(64 << 20)
    shot.write_bytes(b"\xff\xd8" + os.urandom(4000))
    with open(folder / RECORD_DIR / RECORD, "a") as f:
        for p in (clip, shot):
            st = os.lstat(p)
            f.write(json.dumps({"name": p.name, "id": [st.st_dev, st.st_ino, st.st_size]}) + "\n")
    out = HttpOutput(port=free_ports(1)[0])
    readers = []
    try:
        out.events([{"event": "track_end", "clip": str(clip), "snapshot": str(shot)}])
        assert _ask(out.port, "/media/shot.jpg")[0] == 200
        readers = []
        for _ in range(web.MAX_DOWNLOADS):  # as curl --limit-rate: a default receive buffer
            r = socket.create_connection(("127.0.0.1", out.port), timeout=10)
            r.sendall(b"GET /media/big.mp4 HTTP/1.1\r\nHost: x\r\n\r\n")
            readers.append(r)
        assert [s.recv(64).split(b" ")[1] for s in readers] == [b"200"] * len(readers)
        assert _ask(out.port, "/media/shot.jpg")[0] == 503  # every slot held
        t0, code = time.monotonic(), 503
        while code != 200 and time.monotonic() - t0 < 40:
            for s in readers:  # 128 KB a reader every 0.5 s: progress all the time, slowly
                with contextlib.suppress(OSError):
                    got = 0
                    while got < 128 << 10:
                        got += len(s.recv(65536)) or 1 << 20  # 0: the server closed it
            time.sleep(0.5)
            code, _, body = _ask(out.port, "/media/shot.jpg")
        waited = time.monotonic() - t0
        assert code == 200 and body[:2] == b"\xff\xd8", (code, waited)
        assert waited < 30, waited
    finally:
        for s in readers:
            s.close()
        out.close()
