"""Round four of the hostile-input battery (issue 33): the probes answer whatever other clients
do. Idle connections, slow clients sending a byte now and then (slowloris) and many MJPEG viewers
used to take every slot of the probe server and the web viewer: ``/live`` said 503 and a
liveness probe would have restarted a healthy camera. Real sockets to our own servers."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from edgert.apps.camera import open_output
from edgert.apps.telemetry.http import Probes, ProbeServer, QuietServer
from tests.conftest import assert_user_error, run_cli
from tests.ports import free_ports
from tests.tiny import classifier_bundle


def _get(port: int, path: str = "/live", timeout: float = 3.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def probes():
    server = ProbeServer(
        "127.0.0.1", 0, Probes(metrics=lambda: (b"up 1\n", "text/plain"), ready=lambda: (True, {}))
    )
    yield server
    server.close()


def test_three_hundred_idle_connections_leave_the_probes_answering(probes):
    idle = [socket.create_connection(("127.0.0.1", probes.port)) for _ in range(300)]
    try:
        time.sleep(0.3)
        for _ in range(5):
            code, body = _get(probes.port)
            assert code == 200 and json.loads(body)["status"] == "ok"
            assert _get(probes.port, "/metrics")[1] == b"up 1\n"
    finally:
        for s in idle:
            s.close()


def test_slow_clients_cannot_hold_a_slot_by_trickling_bytes(probes, monkeypatch):
    """64 clients each send a request line and then a byte every 0.3 s: the deadline for a whole
    request does not move with the bytes, so they are closed, and the probes answer all along."""
    monkeypatch.setattr(QuietServer, "IDLE_S", 1.5)
    stop = threading.Event()
    closed = []

    def trickle() -> None:
        s = socket.create_connection(("127.0.0.1", probes.port))
        try:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            while not stop.wait(0.3):
                s.sendall(b"X")
        except OSError:
            closed.append(True)  # the server closed it
        finally:
            s.close()

    threads = [threading.Thread(target=trickle) for _ in range(64)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        codes = []
        for _ in range(8):
            codes.append(_get(probes.port)[0])
            time.sleep(0.5)
        assert codes == [200] * 8
        deadline = time.monotonic() + 5
        while len(closed) < 64 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(closed) == 64  # every slow client was cut off, despite its bytes
    finally:
        stop.set()
        for t in threads:
            t.join(5)


def test_viewers_cannot_take_the_web_viewers_probes(monkeypatch):
    """64 MJPEG viewers on the web port: the viewers beyond MAX_STREAMS are told 503, and /live
    (and /stats.json) keep answering on that port."""
    out = open_output("http://127.0.0.1:0")
    out.probes = Probes(ready=lambda: (True, {}))
    viewers = []
    try:
        for _ in range(64):
            s = socket.create_connection(("127.0.0.1", out.port))
            s.sendall(b"GET /stream.mjpg HTTP/1.1\r\nHost: x\r\n\r\n")
            viewers.append(s)
        time.sleep(0.5)
        refused = 0
        for s in viewers:
            s.settimeout(0.2)
            with contextlib.suppress(TimeoutError):  # a viewer with a slot waits for frames
                refused += s.recv(64).startswith(b"HTTP/1.1 503")
        assert refused == 64 - QuietServer.MAX_STREAMS
        assert _get(out.port)[0] == 200
        assert _get(out.port, "/stats.json")[0] == 200
    finally:
        for s in viewers:
            s.close()
        out.close()


def test_the_overflow_lane_answers_probes_and_refuses_the_rest(monkeypatch):
    monkeypatch.setattr(QuietServer, "MAX_CLIENTS", 2)
    out = open_output("http://127.0.0.1:0")
    out.probes = Probes(ready=lambda: (False, {"reason": "testing"}))
    held = [socket.create_connection(("127.0.0.1", out.port)) for _ in range(2)]
    try:
        time.sleep(0.2)
        assert _get(out.port)[0] == 200  # /live through the lane
        code, body = _get(out.port, "/ready")
        assert code == 503 and json.loads(body)["reason"] == "testing"
        code, body = _get(out.port, "/stats.json")
        assert code == 503 and b"too many connections" in body
    finally:
        for s in held:
            s.close()
        out.close()


@pytest.mark.subprocess
def test_a_port_clash_with_metrics_blames_both_flags(tmp_path):
    bundle = classifier_bundle(tmp_path / "m")
    port = free_ports(1)[0]
    proc = run_cli(
        "camera",
        bundle,
        "--metrics",
        str(port),
        "--output",
        f"http://127.0.0.1:{port}",
        "--headless",
    )
    assert_user_error(
        proc, f"--metrics and --output http://127.0.0.1:{port} would both listen on port {port}"
    )


def test_probes_on_every_interface_are_said_to_be_open(caplog):
    import logging

    with caplog.at_level(logging.WARNING):
        server = ProbeServer("0.0.0.0", 0, Probes())
        server.close()
        server = ProbeServer("127.0.0.1", 0, Probes())
        server.close()
    assert caplog.text.count("without authentication") == 1
