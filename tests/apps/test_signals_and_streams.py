"""Long-running commands under real signals, RTSP servers that never answer, and web-viewer
clients that reset their connections (issue: reliability 8, 12, 13)."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import cv2
import pytest

from edgert.apps.camera import HttpOutput
from edgert.apps.camera.sources import SourceOptions, open_source
from edgert.runtime.errors import SourceError
from tests.conftest import ROOT
from tests.tiny import classifier_bundle, matmul_model


def _spawn(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "edgert.apps", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )


def _wait_for_line(proc: subprocess.Popen, fragment: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if fragment in line:
            return
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"never printed {fragment!r}: {proc.stderr.read()[-2000:]}")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return classifier_bundle(tmp_path_factory.mktemp("sig"))


@pytest.mark.subprocess
def test_sigterm_finishes_the_video_and_prints_the_summary(bundle, tmp_path):
    out = tmp_path / "out.mp4"
    proc = _spawn("camera", bundle, "--source", "synthetic://", "--output", out, "--headless")
    _wait_for_line(proc, "source:")
    time.sleep(2.5)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=15)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert "frames" in stdout and "processed" in stdout  # the summary
    cap = cv2.VideoCapture(str(out))
    frames = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    ok, _ = cap.read()
    cap.release()
    assert ok and frames > 10  # a finished, readable MP4 (it has its moov atom)


@pytest.mark.subprocess
def test_sigterm_during_bench_reports_what_was_measured(tmp_path):
    model = matmul_model(tmp_path / "m.onnx")
    report = tmp_path / "bench.json"
    proc = _spawn("bench", model, "--duration", "60", "--warmup", "0", "--json-file", report)
    time.sleep(4)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=15)
    assert proc.returncode == 0, stderr
    data = json.loads(report.read_text())
    assert data["interrupted"] is True and data["iterations"] > 0


def _wait_for_sigterm_handler(pid: int, timeout: float = 60) -> None:
    """Until the process catches SIGTERM (bit 15 of SigCgt in /proc/PID/status)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/status") as fh:
            caught = next(int(ln.split()[1], 16) for ln in fh if ln.startswith("SigCgt:"))
        if caught & (1 << (signal.SIGTERM - 1)):
            return
        time.sleep(0.05)
    raise AssertionError("the process never installed its SIGTERM handler")


@pytest.mark.subprocess
def test_sigterm_elsewhere_exits_143_with_one_sentence(tmp_path):
    proc = _spawn("export", "zoo:mobilenet_v2", "-o", tmp_path / "m.edgert")
    _wait_for_sigterm_handler(proc.pid)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    if proc.returncode == 0:
        pytest.skip("the export finished before the signal")
    assert proc.returncode == 143, stderr
    assert stderr.strip().endswith("terminated") and "Traceback" not in stderr
    assert not (tmp_path / "m.edgert").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no half-written bundle


@pytest.mark.subprocess
def test_sigterm_inside_embedded_python_still_exits_143(tmp_path):
    """CPython ends a `python -m` process with SIGINT (-2, not our 143) when a KeyboardInterrupt
    ever left code run through PyRun_String (what pybind11's py::exec and other C extensions call),
    even one caught later: SIGTERM must raise something that is not exactly KeyboardInterrupt."""
    factory = tmp_path / "model.py"
    factory.write_text(
        "import ctypes\n"
        "run = ctypes.pythonapi.PyRun_String\n"
        "run.restype = ctypes.py_object\n"
        "run.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.py_object, ctypes.py_object]\n"
        "def make():\n"
        "    code = b'import os, signal, time\\nos.kill(os.getpid(), signal.SIGTERM)\\ntime.sleep(30)'\n"
        "    run(code, 257, {}, {})  # 257: Py_file_input\n"
    )
    proc = _spawn("export", f"{factory}:make", "-o", tmp_path / "m.edgert")
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert stderr.strip().endswith("terminated") and "Traceback" not in stderr
    assert not (tmp_path / "m.edgert").exists()


class SilentServer:
    """Accepts TCP connections and never says a word (a stuck camera or a firewall)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.conns.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


def test_rtsp_that_never_answers_fails_within_the_deadline():
    server = SilentServer()
    try:
        source = open_source(
            f"rtsp://127.0.0.1:{server.port}/cam",
            SourceOptions(
                reconnect_tries=5, reconnect_backoff=0.2, connect_deadline=3.0, io_timeout=1.0
            ),
        )
        t0 = time.monotonic()
        with pytest.raises(SourceError, match="cannot reach"):
            source.read()
        assert time.monotonic() - t0 < 5.0
    finally:
        server.close()


@pytest.mark.subprocess
def test_ctrl_c_while_rtsp_connects_ends_within_a_second(bundle):
    server = SilentServer()
    try:
        proc = _spawn(
            "camera", bundle, "--source", f"rtsp://127.0.0.1:{server.port}/cam", "--headless"
        )
        _wait_for_line(proc, "source:")
        time.sleep(1.0)  # now inside the connection attempt, on the capture thread
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=20)
        elapsed = time.monotonic() - t0
    finally:
        server.close()
    assert elapsed < 2.0, (elapsed, stderr)
    assert "Traceback" not in stderr
    assert "retrying" not in stderr or "attempt 1/" in stderr


@pytest.mark.subprocess
def test_ctrl_c_at_any_moment_of_start_up_is_an_interrupt(bundle):
    """A signal can land anywhere while the camera starts (a module being imported, a thread being
    started, a GLib callback): whatever code it interrupts, the run ends at once as interrupted,
    never as an error ("onnxruntime is not installed" when it hit the import), a retry, or a run
    that goes on. Swept over the start-up in 10 ms steps."""
    server = SilentServer()
    seen = []
    try:
        for step in range(0, 25):
            proc = _spawn(
                "camera", bundle, "--source", f"rtsp://127.0.0.1:{server.port}/cam", "--headless"
            )
            _wait_for_line(proc, "source:")
            time.sleep(step * 0.01)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=30)
            elapsed = time.monotonic() - t0
            said = stderr.strip().splitlines()
            seen.append(proc.returncode)
            assert elapsed < 5.0, (step, elapsed, stderr)
            assert "Traceback" not in stderr and "retrying" not in stderr, (step, stderr)
            if proc.returncode == 0:  # the pipeline ran: it finished and printed its summary
                assert "processed" in stdout and not said, (step, stdout, stderr)
            else:
                # 130, or killed by SIGINT itself (what a shell expects of a Ctrl-C'd program:
                # CPython does so when the interrupt left code it ran for an extension)
                assert proc.returncode in (130, -signal.SIGINT), (step, proc.returncode, stderr)
                assert said == ["edgert camera: interrupted"], (step, stderr)
    finally:
        server.close()
    assert {130, -signal.SIGINT} & set(seen)  # the sweep reached the start-up


def test_web_viewer_treats_resets_as_disconnects(capfd):
    out = HttpOutput("127.0.0.1", 0)
    try:
        for i in range(40):
            s = socket.create_connection(("127.0.0.1", out.port))
            if i % 2:
                s.sendall(b"GET /stream.mjpg HTTP/1.1\r\nHost: x\r\n\r\n")
            else:
                s.sendall(b"GET / HTTP/1.1\r\n")  # half a request
            # close with RST instead of FIN
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        time.sleep(0.5)
        import urllib.request

        with urllib.request.urlopen(out.url, timeout=5) as r:  # still serving
            assert r.status == 200
    finally:
        out.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "ConnectionResetError" not in err


def test_a_stop_once_the_model_endpoint_answers_ends_the_run_with_its_summary(bundle, monkeypatch):
    """CI (stop 64) saw it: a camera whose /model already answered, stopped by SIGTERM before its
    pipeline's loop began, exited 143 with no summary. Once the camera answers on its port, a stop
    is an interrupted run: the summary says so, with the frames so far. The stop is sent from the
    last feature's attach step, after GET /model answered 200 on the real port."""
    from edgert.apps import processes
    from edgert.apps.camera import features
    from edgert.apps.camera.app import run_camera
    from edgert.apps.camera.options import CameraConfig, ModelOptions
    from edgert.apps.swap.options import SwapOptions
    from tests.apps.test_hot_swap import _http
    from tests.ports import free_ports

    port = free_ports(1)[0]
    answered = []

    class StopOnceAnswering(features.Feature):
        def attach(self, run):
            answered.append(_http("GET", f"http://127.0.0.1:{port}/model")[0])
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(features, "FEATURES", (*features.FEATURES, StopOnceAnswering))
    monkeypatch.setattr(processes, "_asked", [])  # the stop noted here is not the next test's
    cfg = CameraConfig(
        ModelOptions(str(bundle)),
        ["synthetic://"],
        metrics=f"127.0.0.1:{port}",
        swap=SwapOptions(endpoint=True),
    )
    restore = processes.stop_on_signals()
    try:
        summary = run_camera(cfg)
    finally:
        restore()
    assert answered == [200]
    assert summary["stopped"] == "interrupted (Ctrl-C or SIGTERM)", summary
    assert processes.stop_asked() == "terminated"


def test_a_stop_while_the_run_closes_still_gives_its_summary(bundle, monkeypatch):
    """CI (this stop's final run) saw it: a SIGTERM landing after the pipeline ended, while the
    features closed, ended the camera with no summary. The stop is sent from a feature's close
    step; the run still returns its summary, and the stop is noted."""
    from edgert.apps import processes
    from edgert.apps.camera import features
    from edgert.apps.camera.app import run_camera
    from edgert.apps.camera.options import CameraConfig, ModelOptions, RunOptions

    class StopWhileClosing(features.Feature):
        def close(self, run):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the handler runs here, in the main thread

    monkeypatch.setattr(features, "FEATURES", (*features.FEATURES, StopWhileClosing))
    monkeypatch.setattr(processes, "_asked", [])  # the stop noted here is not the next test's
    cfg = CameraConfig(ModelOptions(str(bundle)), ["synthetic://"], run=RunOptions(max_frames=5))
    restore = processes.stop_on_signals()
    try:
        summary = run_camera(cfg)
    finally:
        restore()
    assert summary["frames_processed"] == 5
    assert processes.stop_asked() == "terminated"


@pytest.mark.subprocess
def test_a_sighup_in_the_first_second_never_ends_the_camera(bundle):
    """Fault battery 6, G20: a SIGHUP while the camera starts (here 0.1-0.9 s after it was
    started: imports, the argument parse, the model's load) used to end it with rc 129 and no
    word; SIGHUP re-reads the bundle, whatever the run is doing, so the run goes on and
    finishes (rc 0, its summary)."""
    from tests.ports import free_ports

    for delay in (0.1, 0.2, 0.3, 0.6, 0.9):
        port = free_ports(1)[0]
        proc = _spawn(
            "camera",
            bundle,
            "--source",
            "synthetic://",
            "--headless",
            "--metrics",
            f"127.0.0.1:{port}",
            "--duration",
            "2",
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGHUP)
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, (delay, proc.returncode, stderr)
        assert "processed" in stdout and "Traceback" not in stderr, (delay, stdout, stderr)
