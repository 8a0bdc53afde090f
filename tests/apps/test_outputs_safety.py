"""Outputs never destroy what they read or lose data quietly, and credentials stay out of what we
print (issue 28: 3, 4, 5, 12, 14, 15)."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import cv2
import numpy as np
import pytest

from edgert.apps.camera import JsonlOutput, VideoFileOutput
from edgert.apps.camera.sources import redact
from edgert.runtime.errors import OutputError
from tests.conftest import ROOT, assert_user_error, run_cli
from tests.tiny import classifier_bundle


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return classifier_bundle(tmp_path_factory.mktemp("outs") / "src")


def _video(path, frames=8, size=(64, 48)):
    w, h = size
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10, (w, h))
    for i in range(frames):
        writer.write(np.full((h, w, 3), (20 * i) % 250, np.uint8))
    writer.release()
    return path


def _frames(path) -> int:
    cap = cv2.VideoCapture(str(path))
    n = 0
    while cap.read()[0]:
        n += 1
    cap.release()
    return n


# -- 3: an output that is the input -------------------------------------------------------------
@pytest.mark.subprocess
@pytest.mark.parametrize("how", ["output", "jsonl", "symlink", "folder image"])
def test_an_output_that_is_a_source_is_refused_and_the_source_survives(tmp_path, tiny, how):
    clip = _video(tmp_path / "clip.mp4")
    before = clip.read_bytes()
    source, extra = str(clip), []
    if how == "output":
        extra = ["--output", f"file://{clip}"]
    elif how == "jsonl":
        extra = ["--jsonl", str(clip)]
    elif how == "symlink":
        (tmp_path / "link.mp4").symlink_to(clip)
        extra = ["--output", str(tmp_path / "link.mp4")]
    else:
        (tmp_path / "imgs").mkdir()
        cv2.imwrite(str(tmp_path / "imgs" / "a.png"), np.zeros((20, 20, 3), np.uint8))
        source = str(tmp_path / "imgs")
        extra = ["--jsonl", str(tmp_path / "imgs" / "a.png")]
    proc = run_cli("camera", tiny, "--source", source, "--headless", *extra)
    assert_user_error(proc, "is the source")
    assert clip.read_bytes() == before
    if how == "folder image":
        assert cv2.imread(str(tmp_path / "imgs" / "a.png")) is not None


@pytest.mark.subprocess
def test_two_outputs_on_one_file_are_refused(tmp_path, tiny):
    clip = _video(tmp_path / "clip.mp4")
    out = tmp_path / "out.mp4"
    proc = run_cli("camera", tiny, "--source", clip, "--headless", "--output", out, "--jsonl", out)
    assert_user_error(proc, "would both write")


# -- 4: credentials -----------------------------------------------------------------------------
def test_redact_hides_passwords_only():
    assert redact("rtsp://admin:s3cr@t@10.0.0.5:554/live") == "rtsp://admin:***@10.0.0.5:554/live"
    assert redact("rtsp://cam.local/live?user=a&password=hunter2&x=1") == (
        "rtsp://cam.local/live?user=a&password=***&x=1"
    )
    assert redact("rtsp://cam.local:8554/live") == "rtsp://cam.local:8554/live"
    assert redact("rtsp://user@cam/live") == "rtsp://user@cam/live"
    assert redact("clip.mp4") == "clip.mp4"
    assert "pa/ss" not in redact("rtsp://admin:pa/ss@10.0.0.5/live")
    assert (
        redact("rtsp://cam/live?access_token=abc&apikey=k")
        == "rtsp://cam/live?access_token=***&apikey=***"
    )


@pytest.mark.subprocess
def test_rtsp_password_never_printed_served_or_logged(tmp_path, tiny):
    """A stream that refuses, beside a video: the password appears in no line of stderr or stdout,
    the JSONL header, the summary or the web viewer's statistics."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connections are refused
    url = f"rtsp://viewer:Pa55word@127.0.0.1:{port}/live"
    clip = _video(tmp_path / "clip.mp4", frames=40)
    jsonl = tmp_path / "log.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "camera",
            str(tiny),
            "--source",
            url,
            "--source",
            str(clip),
            "--headless",
            "--jsonl",
            str(jsonl),
            "--output",
            "http://127.0.0.1:0",
            "--json",
            "--fps",
            "20",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=120)
    assert "Pa55word" not in out + err, (out, err)
    assert "viewer:***@127.0.0.1" in out
    header = json.loads(jsonl.read_text().splitlines()[0])
    assert "Pa55word" not in json.dumps(header) and "***" in header["streams"][0]["uri"]
    assert "[tcp @" not in err and "Connection to tcp" not in err  # FFmpeg's own lines (15)


# -- 5: video output ------------------------------------------------------------------------------
def test_frames_of_another_size_are_letterboxed_and_counted(tmp_path):
    out = VideoFileOutput(str(tmp_path / "o.mp4"), fps=10)
    for i in range(6):
        size = (48, 64) if i % 2 == 0 else (100, 50)
        out.write(None, np.full((*size, 3), 100, np.uint8), {})
    out.close()
    assert _frames(tmp_path / "o.mp4") == 6
    assert out.report() == {
        "output": str(tmp_path / "o.mp4"),
        "frames": 6,
        "letterboxed": 3,
        "codec": "mp4v",
    }


def _limited(limit: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # writes past it fail: EFBIG

    return apply


@pytest.mark.subprocess
def test_a_disk_that_fills_ends_the_video_with_a_sentence(tmp_path, tiny):
    """The file-size limit makes writes fail mid-run, as a full disk does: before, exit 0 and an
    unplayable MP4."""
    clip = _video(tmp_path / "clip.mp4", frames=60, size=(320, 240))
    noise = np.random.default_rng(0).integers(0, 255, (240, 320, 3), dtype=np.uint8)
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter_fourcc(*"mp4v"), 10, (320, 240))
    for i in range(60):
        writer.write(np.roll(noise, i * 7, axis=1))  # incompressible: the output grows fast
    writer.release()
    env = dict(os.environ)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "camera",
            str(tiny),
            "--source",
            str(clip),
            "--headless",
            "--output",
            str(tmp_path / "out.mp4"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        preexec_fn=_limited(300_000),
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "out.mp4" in err[0] and ("failed" in err[0] or "cannot be played" in err[0]), err
    assert "frames" in proc.stdout  # the summary was printed


@pytest.mark.subprocess
def test_jsonl_on_a_full_disk_is_one_sentence_and_the_summary_stays(tmp_path, tiny):
    clip = _video(tmp_path / "clip.mp4", frames=30)
    os.symlink("/dev/full", tmp_path / "full.jsonl")  # full from the first line: before the run
    proc = run_cli(
        "camera", tiny, "--source", clip, "--headless", "--jsonl", tmp_path / "full.jsonl"
    )
    assert_user_error(proc, "no space left")
    # full mid-run (the file-size limit): the run stops, the summary is printed, one sentence
    cmd = [
        sys.executable,
        "-m",
        "edgert.apps",
        "camera",
        str(tiny),
        "--source",
        str(clip),
        "--headless",
        "--jsonl",
        str(tmp_path / "log.jsonl"),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=180, preexec_fn=_limited(3000)
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "log.jsonl" in proc.stderr, proc.stderr
    assert "frames" in proc.stdout and "processed" in proc.stdout
    # --on-output-error continue: the run goes on, every frame processed, still non-zero (a new
    # file: the log is appended to, and the first run left it at the size limit)
    (tmp_path / "log.jsonl").unlink()
    proc = subprocess.run(
        [*cmd, "--on-output-error", "continue", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=_limited(3000),
    )
    assert proc.returncode == 2, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["frames_processed"] == 30 and "log.jsonl" in summary["output_errors"][0]


def test_jsonl_close_error_does_not_mask_the_first(tmp_path):
    os.symlink("/dev/full", tmp_path / "full.jsonl")
    out = JsonlOutput(str(tmp_path / "full.jsonl"))
    with pytest.raises(OutputError, match="no space left"):
        out.write(None, None, {"x": "y" * 100})
    out.close()  # the buffered rest fails again: not raised over the first sentence


# -- 12: one bad image --------------------------------------------------------------------------
@pytest.mark.subprocess
def test_one_bad_image_is_reported_and_the_rest_run(tmp_path, tiny):
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(3):
        cv2.imwrite(str(folder / f"{i}.png"), np.full((20, 20, 3), 60 * i, np.uint8))
    (folder / "1b.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    proc = run_cli("run", tiny, folder, "--json")
    assert proc.returncode == 1, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [("error" in x) for x in lines] == [False, False, True, False]
    assert "1b.jpg" in proc.stderr and "1 of 4 images failed" in proc.stderr
    proc = run_cli("camera", tiny, "--source", folder, "--headless", "--json")
    assert proc.returncode == 1, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["frames_processed"] == 3
    assert summary["streams"][0]["images_failed"] == 1
    assert summary["streams"][0]["images_failed_files"][0].endswith("1b.jpg")
    assert "1 images could not be read" in proc.stderr


def test_a_looping_folder_whose_images_all_fail_ends_with_a_sentence(tmp_path):
    """Review finding: with --loop, a pass in which every file fails (deleted or rewritten
    mid-run) spun forever."""
    from edgert.apps.camera.sources import SourceOptions, open_source
    from edgert.runtime.errors import SourceError

    folder = tmp_path / "imgs"
    folder.mkdir()
    cv2.imwrite(str(folder / "a.png"), np.zeros((8, 8, 3), np.uint8))
    src = open_source(str(folder), SourceOptions(loop=True))
    assert src.read() is not None
    (folder / "a.png").write_bytes(b"no longer an image")
    with pytest.raises(SourceError, match="none of the 1 images"):
        src.read()


@pytest.mark.subprocess
def test_help_to_a_full_stdout_is_one_sentence():
    with open("/dev/full", "w") as full:
        proc = _cli("--help", stdout=full)
    assert_user_error(proc, "cannot write to standard output")


@pytest.mark.subprocess
def test_huge_video_frames_are_refused(tmp_path, tiny):
    clip = _video(tmp_path / "clip.mp4", size=(64, 48))
    proc = run_cli(
        "camera", tiny, "--source", clip, "--headless", env={"EDGERT_MAX_IMAGE_PIXELS": "1000"}
    )
    assert_user_error(proc, "is 64x48 pixels, more than the 1000")


# -- 14: the web viewer on IPv6 ------------------------------------------------------------------
def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_web_viewer_on_ipv6():
    from edgert.apps.camera import open_output

    out = open_output("http://[::1]:0")
    try:
        with urllib.request.urlopen(f"http://[::1]:{out.port}/stats.json", timeout=5) as r:
            assert r.status == 200
        assert out.url == f"http://[::1]:{out.port}/"
    finally:
        out.close()


def test_web_viewer_limits_clients_and_closes_idle_ones(monkeypatch):
    from edgert.apps.camera import open_output
    from edgert.apps.telemetry.http import QuietServer

    monkeypatch.setattr(QuietServer, "MAX_CLIENTS", 4)
    monkeypatch.setattr(QuietServer, "IDLE_S", 1.0)
    out = open_output("http://127.0.0.1:0")
    idle = [socket.create_connection(("127.0.0.1", out.port)) for _ in range(4)]
    try:
        time.sleep(0.3)
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://127.0.0.1:{out.port}/stats.json", timeout=5)
        assert info.value.code == 503
        time.sleep(1.5)  # the idle ones are closed by the server: room again
        for s in idle:
            s.settimeout(2)
            assert s.recv(1) == b""
        with urllib.request.urlopen(f"http://127.0.0.1:{out.port}/stats.json", timeout=5) as r:
            assert r.status == 200
    finally:
        for s in idle:
            s.close()
        out.close()


@pytest.mark.subprocess
def test_pip_wheel_leaves_the_source_tree_clean(tmp_path):
    """15: building a wheel from the checkout leaves no build/ or *.egg-info behind."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a checkout")
    before = {p.name for p in ROOT.iterdir()}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    after = {p.name for p in ROOT.iterdir()}
    assert not {n for n in after - before if n == "build" or n.endswith(".egg-info")}


# -- 14: standard output that cannot be written --------------------------------------------------
def _cli(*args, **popen):
    return subprocess.run(
        [sys.executable, "-m", "edgert.apps", *map(str, args)],
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        **popen,
    )


@pytest.mark.subprocess
def test_a_full_or_closed_stdout_is_one_sentence(tmp_path, tiny):
    img = tmp_path / "a.png"
    cv2.imwrite(str(img), np.zeros((20, 20, 3), np.uint8))
    with open("/dev/full", "w") as full:
        proc = _cli("run", tiny, img, img, img, stdout=full)
    assert_user_error(proc, "cannot write to standard output: No space left on device")
    proc = _cli("info", "--json", stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
    assert_user_error(proc, "cannot write to standard output: it is closed")


@pytest.mark.subprocess
def test_bench_never_writes_over_the_model(tmp_path, tiny):
    onnx = tiny / "model.onnx"
    before = onnx.read_bytes()
    proc = run_cli("bench", tiny, "--json-file", onnx, "--iterations", "2")
    assert_user_error(proc, "is the model")
    assert onnx.read_bytes() == before
