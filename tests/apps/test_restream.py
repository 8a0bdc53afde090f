"""The rtsp:// output (issue 36): edgert camera re-serves its stream over RTSP from its own process
(gst-rtsp-server). A live camera (tests/rtsp_server.py, each frame's index burned into its
pixels) goes in; real clients come out: OpenCV's FFmpeg and GStreamer's rtspsrc (edgert's own
rtsp:// source) decode the re-served frames and read the indices back. Two clients at once with
a third that stalls (it asks for the stream over TCP and never reads); authentication refused
without the password."""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import subprocess
import sys
import time

import cv2
import numpy as np
import pytest

from edgert.apps.camera import media as restream
from edgert.apps.camera.sources import SourceOptions, open_source
from tests.apps.test_rtsp_real import FPS, Server, needs_server
from tests.conftest import ROOT, assert_user_error, run_cli
from tests.ports import free_ports
from tests.procs import SCENE, edgert
from tests.rtsp_server import frame_index, pattern_frame
from tests.tiny import classifier_bundle

pytestmark = pytest.mark.gst


class Camera:
    """`edgert camera` in its own process, reading ``source`` and re-serving it at ``out``."""

    def __init__(
        self, bundle, source: str, out: str | None, *args: str, seconds: float = 30, env=None
    ) -> None:
        """Returns once the re-stream is served (without ``out``: once the camera says what it
        runs)."""
        outputs = ["--output", out] if out else []
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "edgert.apps",
                "camera",
                str(bundle),
                "--source",
                source,
                *outputs,
                "--headless",
                "--duration",
                str(seconds),
                *args,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})),
        )
        for line in self.proc.stdout:
            if line.startswith("rtsp re-stream:" if out else "backend:"):
                self.said = line
                return
        raise AssertionError(self.proc.stderr.read())

    def stop(self) -> tuple:
        self.proc.terminate()
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, out, err


def _ffmpeg_frames(url: str, n: int) -> list:
    cap = cv2.VideoCapture(url, cv2.CAP_FFMPEG)
    try:
        assert cap.isOpened(), url
        got = []
        while len(got) < n:
            ok, frame = cap.read()
            assert ok, f"{url}: read failed after {len(got)} frames"
            got.append(frame_index(frame))
        return got
    finally:
        cap.release()


def _rtspsrc_frames(url: str, n: int) -> list:
    source = open_source(url, SourceOptions(decoder="gstreamer", rtsp_transport="tcp"))
    try:
        return [frame_index(source.read()[0]) for _ in range(n)]
    finally:
        source.close()


def _in_order(indices: list) -> None:
    """Frames in the order sent, none twice, at most a tenth lost; a client that joins mid-stream
    may decode a frame or two before its first key frame (grey, or a jump): those are left out."""
    indices = indices[3:]
    assert indices == sorted(indices) and len(set(indices)) == len(indices), indices
    span = indices[-1] - indices[0] + 1
    assert len(indices) >= 0.9 * span, indices  # at most a tenth lost on the way


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return classifier_bundle(tmp_path_factory.mktemp("restream") / "m")


def _stalled_client(port: int, path: str) -> socket.socket:
    """An RTSP client that asks for the stream over TCP, plays, and then never reads."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    url = f"rtsp://127.0.0.1:{port}{path}"

    def ask(method: str, target: str, cseq: int, extra: str = "") -> str:
        s.sendall(f"{method} {target} RTSP/1.0\r\nCSeq: {cseq}\r\n{extra}\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(4096)
        head, _, body = data.partition(b"\r\n\r\n")
        length = [
            int(h.split(b":")[1])
            for h in head.split(b"\r\n")
            if h.lower().startswith(b"content-length")
        ]
        while length and len(body) < length[0]:
            body += s.recv(4096)
        return (head + b"\r\n\r\n" + body).decode(errors="replace")

    described = ask("DESCRIBE", url, 1, "Accept: application/sdp\r\n")
    assert " 200 " in described.splitlines()[0], described
    control = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in described.splitlines()
            if ln.startswith("a=control:") and "stream" in ln
        ),
        "stream=0",
    )
    setup = ask(
        "SETUP", f"{url}/{control}", 2, "Transport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n"
    )
    session = next(
        ln.split(":", 1)[1].split(";")[0].strip()
        for ln in setup.splitlines()
        if ln.lower().startswith("session")
    )
    s.sendall(f"PLAY {url} RTSP/1.0\r\nCSeq: 3\r\nSession: {session}\r\n\r\n".encode())
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return s  # never read again: the server's sends back up


@pytest.mark.subprocess
@needs_server
def test_two_clients_decode_the_frames_edgert_processed_while_a_third_stalls(bundle):
    src_port, out_port = free_ports(2)
    with Server(src_port) as server:
        cam = Camera(bundle, server.url, f"rtsp://127.0.0.1:{out_port}/live?clean=1")
        try:
            assert f"rtsp://127.0.0.1:{out_port}/live" in cam.said
            stalled = _stalled_client(out_port, "/live")
            try:
                t0 = time.monotonic()
                a = _ffmpeg_frames(f"rtsp://127.0.0.1:{out_port}/live", 3 * FPS)
                took = time.monotonic() - t0
                b = _rtspsrc_frames(f"rtsp://127.0.0.1:{out_port}/live", FPS)
            finally:
                stalled.close()
        finally:
            rc, out, err = cam.stop()
    _in_order(a)
    _in_order(b)
    assert b[3] > a[-1] - FPS  # the second client joined the live stream, not its start
    # the stalled client held nothing up: 3 s of frames in about 3 s (plus joining)
    assert took < 3 + 4, took
    assert rc in (0, 143), err
    assert "Traceback" not in err, err


@pytest.mark.subprocess
@needs_server
def test_authentication_is_refused_without_the_password(bundle):
    src_port, out_port = free_ports(2)
    with Server(src_port) as server:
        cam = Camera(
            bundle,
            server.url,
            f"rtsp://viewer:s3cret@127.0.0.1:{out_port}/live",  # annotated (the default)
        )
        try:
            assert "s3cret" not in cam.said
            url = f"rtsp://127.0.0.1:{out_port}/live"
            with socket.create_connection(("127.0.0.1", out_port), timeout=5) as s:
                s.sendall(f"DESCRIBE {url} RTSP/1.0\r\nCSeq: 1\r\n\r\n".encode())
                assert b" 401 " in s.recv(4096).split(b"\r\n")[0]
            with socket.create_connection(("127.0.0.1", out_port), timeout=5) as s:
                bad = base64.b64encode(b"viewer:wrong").decode()
                s.sendall(
                    f"DESCRIBE {url} RTSP/1.0\r\nCSeq: 1\r\nAuthorization: Basic {bad}\r\n\r\n".encode()
                )
                assert b" 401 " in s.recv(4096).split(b"\r\n")[0]
            cap = cv2.VideoCapture(
                f"rtsp://viewer:s3cret@127.0.0.1:{out_port}/live", cv2.CAP_FFMPEG
            )
            frames = [cap.read() for _ in range(FPS)]
            cap.release()
        finally:
            rc, out, err = cam.stop()
    assert all(ok for ok, _ in frames) and frames[-1][1].shape == (240, 320, 3)
    # the overlay is drawn: the picture is not the camera's (its label's box and text)
    k = frame_index(frames[-1][1])
    assert np.abs(frames[-1][1].astype(int) - pattern_frame(k)).max() > 100
    assert "s3cret" not in out + err


def test_the_encoder_chosen_for_a_jetson_with_and_without_nvenc(tmp_path):
    jetson = {"nvv4l2h264enc", "x264enc"}
    (tmp_path / "orin-nx/dev").mkdir(parents=True)
    (tmp_path / "orin-nx/dev/v4l2-nvenc").write_text("")
    (tmp_path / "orin-nano/dev").mkdir(parents=True)
    assert restream.choose_encoder(jetson, tmp_path / "orin-nx")[0] == "nvv4l2h264enc"
    name, why = restream.choose_encoder(jetson, tmp_path / "orin-nano")
    assert name == "x264enc" and "no NVENC" in why
    assert restream.choose_encoder({"openh264enc"}, tmp_path)[0] == "openh264enc"
    assert restream.choose_encoder(set(), tmp_path)[0] is None
    chain = restream.encode_chain("nvv4l2h264enc", 4000, 30)
    assert "nvvidconv" in chain and "idrinterval=30" in chain and "bitrate=4000000" in chain
    assert "key-int-max=25" in restream.encode_chain("x264enc", 2000, 25)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("rtsp://127.0.0.1:99999/live", "port"),
        ("rtsp://127.0.0.1:8554/live?bitrate=fast", "bitrate"),
        ("rtsp://127.0.0.1:8554/live?speed=2", "unknown option"),
        ("rtsp://admin@127.0.0.1:8554/live", "password"),
        ("rtsp://127.0.0.1:8554/li%20ve", "path"),
        ("rtsp://127.0.0.1:8554/cam\u00e9ra", "ASCII letters"),
        ("rtsp://127.0.0.1:8554/live;x=1", "';' parameters"),
        ("rtsp://127.0.0.1:8554/live#frag", "'#' fragment"),
        ("rtsp://a%3Ab:pw@127.0.0.1:8554/live", "the user name holds ':'"),
        ("rtsp://127.0.0.1:8554/live?bitrate=900&bitrate=9000", "bitrate= is given twice"),
    ],
)
def test_bad_rtsp_outputs_are_one_sentence(bundle, uri, words):
    assert_user_error(run_cli("camera", bundle, "--output", uri, "--max-frames", "1"), words)


def _keys(path) -> tuple[list, int]:
    """The packet numbers (from 0) of a file's key frames, and its packets (ffprobe)."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "packet=flags", "-of", "csv=p=0", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [i for i, flags in enumerate(out) if flags.startswith("K")], len(out)


@pytest.mark.subprocess
@needs_server
@pytest.mark.parametrize("codec", ["h264", "h265", "reencode"])
def test_an_rtsp_cameras_clips_hold_its_own_packets(tmp_path, codec):
    """A camera sending H.264 (or H.265) with a key frame every 37 frames: the clips hold its own
    packets, not decoded and encoded again: key frames where the camera put them (37 apart, not
    edgert's encoder's one a second), its codec and size, and every frame the camera sent in
    order, as sent (its burned-in index intact: nothing drawn over it). ``reencode=1`` is the
    control: the same run encoded by edgert has its own key frame spacing."""
    from tests.apps.test_clip_folders import _can_clip
    from tests.apps.test_gate import quiet_scene
    from tests.tiny import blob_detector_bundle

    if not _can_clip():
        pytest.skip("clips need GStreamer's x264enc and mp4mux, and ffprobe")
    bundle = blob_detector_bundle(tmp_path / "det")
    video = quiet_scene(tmp_path / "scene.mp4")
    port = free_ports(1)[0]
    sent = "h264" if codec == "reencode" else codec
    clips = tmp_path / "clips"
    with Server(port, "--video", str(video), "--gop", "37", "--codec", sent) as server:
        where = f"{clips}?reencode=1&clean=1" if codec == "reencode" else clips
        proc = subprocess.run(
            edgert(
                *("camera", bundle, "--source", server.url, "--headless", *SCENE),
                *("--clips", where, "--pre-roll", "1", "--post-roll", "2"),
                *("--duration", "6", "--json"),
            ),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    import json

    report = next(o for o in json.loads(proc.stdout)["outputs"] if "clips" in o)
    mode = "x264enc" if codec == "reencode" else f"the camera's own {codec}"
    assert report["video"] == [mode] and report["written"] >= 1, report
    path = sorted(clips.glob("*.mp4"))[0]
    info = json.loads(
        subprocess.run(
            ["ffprobe", "-v", "error", "-show_entries", "stream=codec_name,width,height"]
            + ["-of", "json", str(path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )["streams"][0]
    named = {"h264": "h264", "h265": "hevc"}[sent]  # FFmpeg's names
    assert (info["codec_name"], info["width"], info["height"]) == (named, 320, 240), info
    keys, packets = _keys(path)
    steps = {b - a for a, b in zip(keys, keys[1:], strict=False)}
    assert keys[0] == 0 and len(steps) == 1, keys  # a key frame first, then evenly spaced
    assert (steps == {37}) == (codec != "reencode"), keys  # the camera's spacing, or edgert's
    cap = cv2.VideoCapture(str(path))
    indices = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        indices.append(frame_index(frame))
    cap.release()
    assert len(indices) == packets > keys[1], indices  # every packet decodes, to the end
    if codec != "reencode":  # every frame the camera sent, in order, none missing
        assert indices == list(range(indices[0], indices[0] + len(indices))), indices


@pytest.mark.subprocess
@needs_server
def test_a_camera_that_reboots_mid_clip_ends_that_clip_and_the_run_goes_on(tmp_path):
    """A clip of the camera's own packets is being written (a long post-roll) when the camera
    goes away and comes back sending another size (other parameter sets, which a muxer cannot
    take mid-file): the clip in progress is finished at the reconnect, playable, in the old size;
    the run goes on and ends without an output error."""
    import json

    from tests.apps.test_clip_folders import _can_clip
    from tests.apps.test_gate import quiet_scene
    from tests.tiny import blob_detector_bundle

    if not _can_clip():
        pytest.skip("clips need GStreamer's x264enc and mp4mux, and ffprobe")
    bundle = blob_detector_bundle(tmp_path / "det")
    video = quiet_scene(tmp_path / "scene.mp4")
    small = tmp_path / "small.mp4"
    cap, out = cv2.VideoCapture(str(video)), None
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        if out is None:
            out = cv2.VideoWriter(str(small), cv2.VideoWriter_fourcc(*"mp4v"), 10, (240, 180))
        out.write(cv2.resize(frame, (240, 180)))
    cap.release()
    out.release()
    port = free_ports(1)[0]
    clips = tmp_path / "clips"
    server = Server(port, "--video", str(video))
    proc = subprocess.Popen(
        edgert(
            *("camera", bundle, "--source", server.url, "--headless", *SCENE, "--json"),
            *("--clips", f"{clips}?post=600", "--reconnect", "forever", "--duration", "16"),
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not list(clips.glob("*.part")):
            time.sleep(0.2)
        assert list(clips.glob("*.part")), "no clip started"
        time.sleep(1.5)
        server.stop()  # the camera reboots ...
        server = Server(port, "--video", str(small))  # ... and comes back at another size
        out, err = proc.communicate(timeout=60)
    finally:
        server.stop()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert "output_errors" not in summary, summary.get("output_errors")
    assert summary["streams"][0]["reconnects"] >= 1, summary["streams"][0]
    first = sorted(clips.glob("*.mp4"))[0]
    probe = subprocess.run(
        ["ffprobe", "-v", "error", "-count_frames", "-show_entries"]
        + ["stream=width,height,nb_read_frames", "-of", "json", str(first)],
        capture_output=True,
        text=True,
        check=True,
    )
    info = json.loads(probe.stdout)["streams"][0]
    assert (info["width"], info["height"]) == (320, 240) and int(info["nb_read_frames"]) > 10, info


def _flood(port: int, first: bytes, megabytes: int, results: list) -> None:
    """A client that sends ``first`` (a whole request, or nothing) and then a request whose
    headers go on for ``megabytes`` MB; what it was answered (or how it ended) into results."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            if first:
                s.sendall(first)
                s.recv(4096)
            s.sendall(f"OPTIONS rtsp://127.0.0.1:{port}/live RTSP/1.0\r\nCSeq: 2\r\n".encode())
            line = b"X-Pad: " + b"a" * 1000 + b"\r\n"
            for _ in range(megabytes * 1000):
                s.sendall(line)
            s.sendall(b"\r\n")
            results.append(s.recv(4096).split(b"\r\n")[0])
    except OSError as exc:
        results.append(type(exc).__name__)


@pytest.mark.subprocess
@needs_server
def test_request_headers_are_bounded_and_viewers_still_get_in(bundle):
    """Six clients sending 12 MB of request headers each as their first request, and six sending
    them as their second, after a whole OPTIONS answered 200 (the reviews kept a viewer out for
    15 and 20 s those ways): each is answered 431 after 16 KB and closed; a real viewer connects
    and decodes at once throughout; at the end, with clients still held, the run stops quietly."""
    import threading

    port = free_ports(1)[0]
    cam = Camera(bundle, "synthetic://", f"rtsp://127.0.0.1:{port}/live", seconds=60)
    try:
        results: list = []
        hello = f"OPTIONS rtsp://127.0.0.1:{port}/live RTSP/1.0\r\nCSeq: 1\r\n\r\n".encode()
        floods = [
            threading.Thread(target=_flood, args=(port, first, 12, results), daemon=True)
            for first in [b""] * 6 + [hello] * 6
        ]
        for t in floods:
            t.start()
        time.sleep(1.0)
        held = _stalled_client(port, "/live")  # plays, never reads, held when the run ends
        t0 = time.monotonic()
        got = _ffmpeg_frames(f"rtsp://127.0.0.1:{port}/live", 10)
        took = time.monotonic() - t0
        for t in floods:
            t.join(20)
    finally:
        rc, out, err = cam.stop()
        with contextlib.suppress(NameError):
            held.close()
    assert len(got) == 10 and took < 6, took
    # refused at 16 KB: the 431 is sent and the connection closed under the sender's feet
    cut = ("BrokenPipeError", "ConnectionResetError")
    refused = [r for r in results if r in cut or (isinstance(r, bytes) and b" 431 " in r)]
    assert len(refused) == 12, results
    assert rc in (0, 143) and "CRITICAL" not in err and len(err) < 2000, err[-2000:]


@pytest.mark.subprocess
@needs_server
def test_a_later_request_trickled_past_its_time_is_closed_and_a_session_goes_on(bundle):
    """A request must come whole within 5 s of its first byte, the second as the first: one
    trickled a header a second is answered 408 and closed; a session that asks nothing between
    its requests (as a viewer between keep-alives) is not a request, and is served again."""
    port = free_ports(1)[0]
    cam = Camera(bundle, "synthetic://", f"rtsp://127.0.0.1:{port}/live", seconds=40)
    url = f"rtsp://127.0.0.1:{port}/live"
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=15) as slow,
            socket.create_connection(("127.0.0.1", port), timeout=15) as calm,
        ):
            for s in (slow, calm):
                s.sendall(f"OPTIONS {url} RTSP/1.0\r\nCSeq: 1\r\n\r\n".encode())
                assert b" 200 " in s.recv(4096).split(b"\r\n")[0]
            slow.sendall(f"DESCRIBE {url} RTSP/1.0\r\nCSeq: 2\r\n".encode())
            answer, t0 = b"", time.monotonic()
            with contextlib.suppress(OSError):
                for i in range(12):
                    slow.sendall(f"X-Slow-{i}: 1\r\n".encode())
                    time.sleep(1.0)
            with contextlib.suppress(OSError):
                answer = slow.recv(4096)
            took = time.monotonic() - t0
            calm.sendall(f"OPTIONS {url} RTSP/1.0\r\nCSeq: 2\r\n\r\n".encode())
            again = calm.recv(4096).split(b"\r\n")[0]
    finally:
        cam.stop()
    assert answer.startswith(b"RTSP/1.0 408") or answer == b"", answer
    assert 4.5 < took < 9, took
    assert b" 200 " in again, again


def test_what_the_front_passes_on_one_message_at_a_time():
    """The front's parser (no server needed): whole messages, interleaved frames, bounds."""
    from edgert.apps.camera.sinks.rtsp_front import MAX_BODY, Refused, next_message

    options = b"OPTIONS rtsp://h/live RTSP/1.0\r\nCSeq: 1\r\n\r\n"
    assert next_message(options + b"DESCRIBE") == len(options)
    assert next_message(options[:-2]) == 0
    body = b"SET_PARAMETER rtsp://h/live RTSP/1.0\r\nContent-Length: 5\r\n\r\nab"
    assert next_message(body) == 0 and next_message(body + b"cde") == len(body) + 3
    frame = b"$\x01\x00\x03abc"
    assert next_message(frame + options) == 7 and next_message(frame[:5]) == 0
    assert next_message(b"\r\n" + options) == 2
    cases = [
        (b"OPTIONS * RTSP/1.0\r\n" + b"X: " + b"a" * 17000, 431),
        (b"OPTIONS * RTSP/1.0\r\nA: \0\r\n\r\n", 400),
        (f"ANNOUNCE * RTSP/1.0\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n".encode(), 413),
        (b"ANNOUNCE * RTSP/1.0\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (b"POST /live HTTP/1.0\r\nContent-Length: 32767\r\n\r\n", 501),
    ]
    for data, status in cases:
        with pytest.raises(Refused) as refused:
            next_message(data)
        assert refused.value.status == status, data[:40]


@pytest.mark.subprocess
@needs_server
def test_a_password_with_hash_slash_and_at_from_the_environment_works_with_both_decoders(bundle):
    """The README's form, ``${EDGERT_...}``, with a password holding "#", "/", "?" and "@": the
    re-stream requires exactly it (the review's run took "#" for the port's end and served
    without authentication), and both decoders connect to it with it; with a wrong one both say
    the same sentence."""
    password = "s3cr#t/?x@y"
    port = free_ports(1)[0]
    cam = Camera(
        bundle,
        "synthetic://",
        f"rtsp://viewer:${{EDGERT_RTSP_PASS}}@127.0.0.1:{port}/live",
        env={"EDGERT_RTSP_PASS": password},
        seconds=60,
    )
    try:
        assert "basic authentication" in cam.said and password not in cam.said
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            url = f"rtsp://127.0.0.1:{port}/live"
            s.sendall(f"DESCRIBE {url} RTSP/1.0\r\nCSeq: 1\r\n\r\n".encode())
            assert b" 401 " in s.recv(4096).split(b"\r\n")[0]
        source = f"rtsp://viewer:${{EDGERT_CAM1_PASS}}@127.0.0.1:{port}/live"
        said = {}
        for decoder in ("ffmpeg", "gstreamer"):
            for given in (password, "wrong#one"):
                proc = run_cli(
                    *("camera", bundle, "--source", source, "--decoder", decoder, "--headless"),
                    *("--max-frames", "3", "--reconnect", "1", "--json"),
                    env={"EDGERT_CAM1_PASS": given},
                    timeout=60,
                )
                said[decoder, given] = proc
        for decoder in ("ffmpeg", "gstreamer"):
            ok = said[decoder, password]
            assert ok.returncode == 0, (decoder, ok.stderr)
            assert password not in ok.stdout + ok.stderr
            assert_user_error(said[decoder, "wrong#one"], "Unauthorized: the camera refused")
    finally:
        cam.stop()


@pytest.mark.subprocess
def test_listeners_on_one_port_and_an_open_model_endpoint_are_refused(bundle):
    port = free_ports(1)[0]
    both = run_cli(
        *("camera", bundle, "--output", f"rtsp://127.0.0.1:{port}/live"),
        *("--output", f"http://127.0.0.1:{port}", "--max-frames", "1", "--headless"),
    )
    assert_user_error(both, f"rtsp://127.0.0.1:{port}/live", "would both listen on port")
    # checked before anything listens: 0.0.0.0 is never bound here
    open_ = run_cli(
        *("camera", bundle, "--metrics", f"0.0.0.0:{port}", "--model-endpoint"),
        *("--max-frames", "1", "--headless"),
    )
    assert_user_error(open_, "--model-endpoint lets whoever reaches --metrics on 0.0.0.0")


def test_every_listener_on_an_open_address_is_said_to_be_open(caplog):
    """One rule for every listener (--metrics, the web viewer, the re-stream, serve): said for
    an address other than loopback, with whether a password guards it."""
    import logging

    from edgert.apps.uris import warn_if_open

    with caplog.at_level(logging.WARNING):
        assert not warn_if_open("--output rtsp://", "127.0.0.1", 8554)
        assert not warn_if_open("--output http://", "::1", 8080)
        assert warn_if_open("--output rtsp://", "0.0.0.0", 8554, authenticated=True)
        assert warn_if_open("--output http://", "192.0.2.7", 8080)
    lines = caplog.text.splitlines()
    assert len(lines) == 2 and "without authentication" not in lines[0], lines
    assert "without authentication" in lines[1] and "192.0.2.7:8080" in lines[1], lines
