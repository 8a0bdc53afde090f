"""Round four of the hostile-input battery (issue 33), the camera's side: a URI or file name is
never GStreamer pipeline syntax, a reconnect loop holds no descriptors, secrets are hidden in
every form cameras use and can come from the environment, ``--duration`` ends a run whose stream
is down, and the values OpenCV cannot take are sentences. Real GStreamer, a real RTSP server
(tests/rtsp_server.py), descriptor counts from /proc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import cv2
import numpy as np
import pytest

from edgert.apps.camera import media
from edgert.apps.camera.sources import SourceOptions, StreamSource, open_source
from edgert.apps.uris import check_stream_uri, expand, redact
from edgert.runtime.errors import SourceError, StreamLost
from tests.apps.test_rtsp_real import IN_CI, Server, needs_server
from tests.conftest import assert_user_error, run_cli
from tests.ports import free_ports
from tests.tiny import classifier_bundle

pytestmark = pytest.mark.gst

needs_gst = pytest.mark.skipif(
    not IN_CI and not media.available()[0],
    reason="GStreamer's Python bindings (.ci/run installs them)",
)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _clip(path, frames: int = 12):
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10, (64, 48))
    for i in range(frames):
        writer.write(np.full((48, 64, 3), 10 * i, np.uint8))
    writer.release()
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return classifier_bundle(tmp_path_factory.mktemp("hostile") / "m")


# -- E1: a URI or a path is a property value, never pipeline syntax ---------------------------
@needs_gst
def test_a_quote_in_a_uri_adds_no_element_to_the_pipeline(tmp_path):
    """The review's URI: with the URI pasted into the description, this ran a second rtspsrc
    and a filesink writing pwned.h264. As a property value it is only a (wrong) location."""
    port = free_ports(1)[0]  # nothing listens: the attempt fails, as it should
    target = tmp_path / "pwned.h264"
    hostile = (
        f'rtsp://127.0.0.1:{port}/cam" zz. ! rtph264depay ! h264parse ! filesink '
        f'location={target} rtspsrc name=zz location="rtsp://127.0.0.1:{port}/cam'
    )
    launch = media.rtsp_source(hostile, 100, "tcp", 1.0)
    assert dict(launch.props)["location"] == hostile and launch.rest == ""
    with pytest.raises(StreamLost):
        media.GstConnection(launch, True, media.elements(), 1.0, threading.Event())
    assert not target.exists()
    # and edgert refuses it before any connection: a URI holds no spaces
    with pytest.raises(SourceError, match="is not a URI: it holds ' '"):
        open_source(hostile, SourceOptions(decoder="gstreamer"))


@needs_gst
@pytest.mark.parametrize("name", ['clip "1".mp4', "back\\slash.mp4", "it's ! filesink.mp4"])
def test_every_file_name_decodes_with_gstreamer(tmp_path, name):
    from edgert.apps.camera.sources import GstFileSource

    path = _clip(tmp_path / name)
    source = GstFileSource(str(path))
    try:
        frames = 0
        while source.read() is not None:
            frames += 1
    finally:
        source.close()
    assert frames == 12


def test_the_descriptions_shown_quote_what_they_hold():
    text = media.rtsp_source('rtsp://h/a"b', 100, "auto", 5.0).text()
    assert text.startswith('rtspsrc location="rtsp://h/a\\"b" latency=100')
    assert "filesrc location=" in media.file_pipeline("x y.mp4", set()).text()


# -- E16 and a URI that cannot be one ------------------------------------------------------------
@pytest.mark.subprocess
@pytest.mark.parametrize(
    "uri, fragment",
    [
        # the site's model sees it first (every flag becomes the site file's data)
        ("rtsp://127.0.0.1:18620/cam\r\nX-Injected: yes", "without control characters"),
        ("rtsp://127.0.0.1:99999/cam", "the port must be a number from 1 to 65535"),
        ("rtsp://", "names no host"),
        ("rtsp://:554/x", "names no host"),
        ("rtsp://a b/c", "holds ' '"),
    ],
)
def test_a_uri_that_cannot_be_one_is_refused_in_one_sentence(tiny, uri, fragment):
    for decoder in ("ffmpeg", "gstreamer"):
        proc = run_cli("camera", tiny, "--source", uri, "--decoder", decoder, "--headless")
        assert_user_error(proc, fragment)
        assert "\r" not in proc.stderr and proc.stderr.count("\n") == 1  # no forged log line


# -- E2: a reconnect loop holds no descriptors ----------------------------------------------------
@needs_gst
def test_failed_gstreamer_attempts_leave_no_descriptor_behind():
    """Each attempt to a dead camera used to leave its pipeline (two descriptors, its threads)
    to the pad-added handler's reference cycle: 76 -> 364 descriptors in 3 minutes with 8."""
    port = free_ports(1)[0]
    have = media.elements()
    cancel = threading.Event()

    def attempt() -> None:
        with pytest.raises(StreamLost):
            media.GstConnection(
                media.rtsp_source(f"rtsp://127.0.0.1:{port}/cam", 100, "tcp", 1.0),
                True,
                have,
                1.0,
                cancel,
            )

    attempt()  # GStreamer's own first-use descriptors
    before = _fds()
    for _ in range(15):
        attempt()
    assert _fds() - before <= 1, (before, _fds())


@pytest.mark.subprocess
@needs_server
def test_real_reconnects_leave_no_descriptor_behind():
    """The server killed and started again three times under --reconnect forever: the stream
    comes back each time and the descriptors do not grow (they grew by 10 an outage)."""
    port = free_ports(1)[0]
    opts = SourceOptions(
        decoder="gstreamer",
        rtsp_transport="tcp",
        reconnect_tries=None,
        stall_timeout=1.0,
        io_timeout=2.0,
        reconnect_backoff=0.2,
        max_backoff=0.5,
    )
    with Server(port) as server:
        source = StreamSource(server.url, opts, "gstreamer")
        try:
            source.read()
            counts = []
            for _ in range(3):
                server.stop()
                time.sleep(0.5)
                server.start()
                while source.stats()["reconnects"] < len(counts) + 1:
                    source.read()
                for _ in range(5):
                    source.read()
                counts.append(_fds())
        finally:
            source.close()
    assert source.reconnects == 3
    assert counts[-1] - counts[0] <= 2, counts


# -- E6: --duration ends a run whose stream is down -------------------------------------------------
@pytest.mark.subprocess
@pytest.mark.parametrize("decoder", ["ffmpeg", pytest.param("gstreamer", marks=needs_gst)])
def test_duration_ends_the_run_while_a_stream_reconnects_forever(tiny, decoder):
    port = free_ports(1)[0]
    t0 = time.monotonic()
    proc = run_cli(
        "camera",
        tiny,
        "--source",
        f"rtsp://127.0.0.1:{port}/cam",
        "--source",
        "synthetic://",
        "--decoder",
        decoder,
        "--reconnect",
        "forever",
        "--headless",
        "--duration",
        "3",
        "--json",
        timeout=60,
    )
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["seconds"] < 3 + 2.0, summary["seconds"]
    assert summary["streams"][0]["frames_processed"] == 0
    assert summary["streams"][0]["connection"] in ("connecting", "reconnecting")
    assert summary["streams"][1]["frames_processed"] > 30
    assert took < 30, took


# -- E3 and E17: secrets hidden in every form, and given without argv -------------------------------
def test_redact_hides_the_forms_cameras_use():
    cases = {
        "rtsp://admin:S3c#ret@10.0.0.5:554/cam": "rtsp://admin:***@10.0.0.5:554/cam",
        "rtsp://h/user=admin_password=Secret11_channel=1.sdp": "rtsp://h/user=admin_password=***_channel=1.sdp",
        "rtsp://h/live?signature=Secret4&x=1": "rtsp://h/live?signature=***&x=1",
        "rtsp://h/live?sig=Secret5": "rtsp://h/live?sig=***",
        "rtsp://h/live?credential=Secret6": "rtsp://h/live?credential=***",
        "rtsp://h/live?user=a&pwd=Se#cret7": "rtsp://h/live?user=a&pwd=***",
        "rtsp://h/cam\r\nX-Injected: yes": "rtsp://h/cam\\r\\nX-Injected: yes",
        "rtsp://cam.local:8554/live": "rtsp://cam.local:8554/live",
    }
    for uri, shown in cases.items():
        assert redact(uri) == shown
        assert not any(f"Secret{n}" in redact(uri) for n in range(12)) and "S3c" not in redact(uri)


@pytest.mark.subprocess
@needs_server
def test_a_password_holding_a_hash_is_hidden_everywhere(tiny, tmp_path):
    """GStreamer connects with it (the server asks for none) and the password appears in no
    line printed, the JSONL header or the summary."""
    port = free_ports(1)[0]
    jsonl = tmp_path / "log.jsonl"
    with Server(port):
        proc = run_cli(
            "camera",
            tiny,
            "--source",
            f"rtsp://admin:S3c#ret@127.0.0.1:{port}/cam",
            "--decoder",
            "gstreamer",
            "--headless",
            "--max-frames",
            "10",
            "--jsonl",
            jsonl,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    everything = proc.stdout + proc.stderr + jsonl.read_text()
    assert "S3c" not in everything and "admin:***@127.0.0.1" in proc.stdout


@pytest.mark.subprocess
def test_credentials_come_from_the_environment_not_the_command_line(tiny, tmp_path):
    clip = _clip(tmp_path / "clip.mp4")
    env = dict(os.environ, EDGERT_CLIP_FOLDER=str(tmp_path))
    cmd = [
        sys.executable,
        "-m",
        "edgert.apps",
        "camera",
        str(tiny),
        "--source",
        "${EDGERT_CLIP_FOLDER}/clip.mp4",
        "--headless",
        "--json",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["streams"][0]["frames_processed"] == 12
    assert str(clip) in json.loads(proc.stdout)["source"]
    proc = run_cli("camera", tiny, "--source", "rtsp://admin:${EDGERT_NOT_SET}@cam/live")
    assert_user_error(proc, "--source: the environment variable EDGERT_NOT_SET is not set")
    proc = run_cli("camera", tiny, "--source", "rtsp://admin:${HOME}@cam/live")
    assert_user_error(proc, "only variables named EDGERT_... are read")


def test_expand_and_check_as_functions(monkeypatch):
    monkeypatch.setenv("EDGERT_CAM_PASS", "p@ss#1")
    assert expand("rtsp://admin:${EDGERT_CAM_PASS}@cam/live", "--source") == (
        "rtsp://admin:p@ss#1@cam/live"
    )
    check_stream_uri("rtsp://admin:p@ss#1@cam:554/live")  # the credentials end at the last "@"
    check_stream_uri("rtsp://[::1]:8554/live")
    with pytest.raises(ValueError, match="in brackets"):
        check_stream_uri("rtsp://::1:8554/live")


# -- E13 ---------------------------------------------------------------------------------------
@pytest.mark.subprocess
def test_a_stall_timeout_opencv_cannot_take_is_refused(tiny):
    proc = run_cli("camera", tiny, "--source", "rtsp://127.0.0.1:1/cam", "--stall-timeout", "1e7")
    assert_user_error(proc, "--stall-timeout", "must be at most 86400 s")


@pytest.mark.subprocess
def test_a_file_name_cannot_forge_a_log_line(tiny, tmp_path):
    """The sibling of E16 in the logs: an unreadable image whose name holds a newline and what
    looks like edgert's own warning is skipped with its name escaped, on one line."""
    folder = tmp_path / "images"
    folder.mkdir()
    cv2.imwrite(str(folder / "good.png"), np.zeros((20, 20, 3), np.uint8))
    (folder / "bad\nedgert: WARNING: forged.png").write_bytes(b"not an image")
    proc = run_cli("camera", tiny, "--source", folder, "--headless")
    assert proc.returncode == 1, proc.stderr  # an image could not be read: said, exit 1
    lines = proc.stderr.splitlines()
    assert not any(line.startswith("edgert: WARNING: forged") for line in lines), lines
    assert any("bad\\nedgert: WARNING: forged.png" in line for line in lines), lines
