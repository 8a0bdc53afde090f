"""What a camera run tells its user (issue 73, "misleading or missing output"): the labels it
saw counted per object, where every file it wrote went and how many, a video a browser plays
(H.264), and a stream that never delivered a frame named with a non-zero exit. A real detector
with constant boxes (tests.const_heads) on ONNX Runtime, rendered videos, the real command line,
ffprobe on the files."""

from __future__ import annotations

import json
import shutil

import cv2
import numpy as np
import pytest

from tests.conftest import run_cli
from tests.const_heads import const_bundle, meta

pytestmark = pytest.mark.subprocess

# three people a frame: two "a" (scores 0.9, 0.8), one "b" (0.7), far apart (NMS keeps them all)
THREE = [
    [
        [100, 320, 540],
        [100, 320, 400],
        [60, 60, 60],
        [120, 120, 120],
        [0.9, 0.8, 0],
        [0, 0, 0.7],
    ]
]


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    folder = tmp_path_factory.mktemp("said")
    return const_bundle(folder, "three", meta("detect", 2), THREE)


def video(path, frames=10, size=(640, 480), fps=10):
    w, h = size
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
    for i in range(frames):
        writer.write(np.full((h, w, 3), 20 * (i % 10), np.uint8))
    writer.release()
    return path


def test_every_object_is_counted_by_its_label_not_the_top_one_a_frame(three, tmp_path):
    """Ten frames of three objects: 20 "a" and 10 "b" (the summary said "a (10)": the top label
    of each frame, which reads as ten people)."""
    clip = video(tmp_path / "in.mp4")
    proc = run_cli("camera", three, "--source", clip, "--headless", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["objects_by_label"] == {"a": 20, "b": 10}
    assert summary["labels_seen"] == {"a": 10}  # kept: frames by their top label
    proc = run_cli("camera", three, "--source", clip, "--headless")
    assert proc.returncode == 0, proc.stderr
    assert "objects by label: a 20, b 10 (in 10 frames inferred)" in proc.stdout, proc.stdout
    assert "labels seen" not in proc.stdout


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.tiny import classifier_bundle

    return classifier_bundle(tmp_path_factory.mktemp("said-tiny") / "m")


def test_a_stream_that_never_delivered_a_frame_fails_the_run_the_others_still_run(tiny):
    """A camera nobody answers beside a live one: the live one runs to its end, the dead one
    is named in a sentence and the exit code is 1 (it was 0: a dead camera went unnoticed by
    anything that reads exit codes: systemd, a CI job, a script)."""
    from tests.ports import free_ports

    port = free_ports(1)[0]  # nothing listens there
    dead = f"rtsp://127.0.0.1:{port}/x"
    proc = run_cli(
        *("camera", tiny, "--source", dead, "--source", "synthetic://", "--headless"),
        *("--reconnect", "2", "--max-frames", "20", "--json"),
        timeout=120,
    )
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    summary = json.loads(proc.stdout)
    assert summary["streams"][1]["frames_processed"] == 20  # the live one ran to its end
    assert summary["streams"][0]["frames_processed"] == 0
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("edgert camera: error:")]
    assert len(errors) == 1, proc.stderr
    assert f"stream 0 (RTSP stream {dead}) delivered no frame" in errors[0]
    assert "cannot reach" in errors[0] and "Traceback" not in proc.stderr
    # cut off by --duration while still connecting: the same (a camera told to be waited for,
    # --reconnect forever, is not an error: test_hostile_sources' duration test keeps rc 0)
    proc = run_cli(
        *("camera", tiny, "--source", dead, "--source", "synthetic://", "--headless"),
        *("--duration", "2"),
        timeout=120,
    )
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "delivered no frame in" in proc.stderr and "still connecting when the run ended" in (
        proc.stderr
    )
    # the exit codes are in the command's help
    said = " ".join(run_cli("camera", "--help").stdout.split())
    assert "1: a source delivered no frame" in said and "exit codes: 0:" in said


def _probe(path) -> dict:
    import subprocess

    out = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-count_frames",
            "-show_entries",
            "stream=codec_name,nb_read_frames,width,height",
            "-of",
            "json",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return json.loads(out)["streams"][0]


def _h264_here() -> bool:
    from edgert.apps.camera.sinks.h264_file import choose

    return choose("x.mp4")[0] is not None


@pytest.mark.gst
@pytest.mark.skipif(not _h264_here(), reason="no GStreamer H.264 encoder (x264enc) here")
def test_the_video_file_is_h264_which_browsers_play(three, tmp_path):
    """file://out.mp4 was MPEG-4 Part 2 (mp4v), which no browser plays; now H.264 (x264 here,
    NVENC on a Jetson), every frame in it; .avi stays mp4v and says so in one line."""
    clip = video(tmp_path / "in.mp4", frames=12, size=(320, 240))
    out = tmp_path / "out.mp4"
    proc = run_cli("camera", three, "--source", clip, "--headless", "--output", f"file://{out}")
    assert proc.returncode == 0, proc.stderr
    assert "mp4v" not in proc.stdout
    probe = _probe(out)
    assert probe["codec_name"] == "h264", probe
    assert int(probe["nb_read_frames"]) == 12 and (probe["width"], probe["height"]) == (320, 240)
    avi = tmp_path / "out.avi"
    proc = run_cli("camera", three, "--source", clip, "--headless", "--output", f"file://{avi}")
    assert proc.returncode == 0, proc.stderr
    assert f"note: {avi} is written as MPEG-4 Part 2 (mp4v): it will not play in a web browser" in (
        proc.stdout
    )
    assert _probe(avi)["codec_name"] == "mpeg4"


def test_without_an_h264_encoder_the_file_is_mp4v_and_the_note_says_why():
    """A machine whose GStreamer has no H.264 encoder (pip's OpenCV has none either)."""
    from edgert.apps.camera.sinks.h264_file import choose

    encoder, why = choose("out.mp4", have={"videoconvert", "appsrc"})
    assert encoder is None
    assert why.startswith("out.mp4 is written as MPEG-4 Part 2 (mp4v): it will not play in a web")
    assert "gstreamer1.0-plugins-ugly" in why
    assert choose("out.mp4", have={"x264enc"}) == ("x264enc", None)


@pytest.mark.gst
@pytest.mark.skipif(not _h264_here(), reason="no GStreamer H.264 encoder (x264enc) here")
def test_the_summary_says_where_every_file_went_and_how_many(three, tmp_path):
    """A run writing a video, JSONL, events, snapshots and clips: the summary names each path
    with what it holds, and the JSON summary lists the same, matching what is on disk (before,
    nothing said where the clips and snapshots went or how many there were)."""
    clip = video(tmp_path / "in.mp4", frames=20, size=(320, 240))
    out, frames, events = tmp_path / "out.mp4", tmp_path / "f.jsonl", tmp_path / "e.jsonl"
    snaps, clips = tmp_path / "snaps", tmp_path / "clips"
    args = [
        *("camera", three, "--source", clip, "--headless", "--output", f"file://{out}"),
        *("--jsonl", frames, "--events", events, "--snapshots", snaps, "--clips", clips),
    ]
    proc = run_cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    files = {f["output"]: f for f in json.loads(proc.stdout)["files"]}
    assert set(files) == {"video", "jsonl", "events", "snapshots", "clips", "store"}
    store = clips / ".edgert" / "events.db"  # the store, beside the clips by default (issue 69)
    assert files["store"]["path"] == str(store) and files["store"]["events"] == len(
        events.read_text().splitlines()[1:]
    )
    assert files["video"]["path"] == str(out) and files["video"]["frames"] == 20
    assert files["video"]["codec"] == "h264" and files["video"]["bytes"] == out.stat().st_size
    assert files["jsonl"]["path"] == str(frames) and files["jsonl"]["frames"] == 20
    assert files["events"]["path"] == str(events)
    kinds = [json.loads(x)["event"] for x in events.read_text().splitlines()[1:]]
    assert files["events"]["events"] == len(kinds) and kinds.count("track_start") == 3
    on_disk = sorted(snaps.glob("*.jpg"))
    assert files["snapshots"]["path"] == str(snaps) and files["snapshots"]["files"] == 3
    assert files["snapshots"]["bytes"] == sum(p.stat().st_size for p in on_disk) > 0
    mp4s = sorted(clips.glob("*.mp4"))
    assert files["clips"]["path"] == str(clips) and files["clips"]["files"] == len(mp4s) >= 1
    assert files["clips"]["bytes"] == sum(p.stat().st_size for p in mp4s)
    for p in (out, frames, events):  # a second run, its lines read
        p.unlink()
    shutil.rmtree(snaps)
    shutil.rmtree(clips)
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout[proc.stdout.index("files written:") :]
    assert f"video     {out} (20 frames, H.264, " in said, said
    assert f"jsonl     {frames} (20 frames, " in said
    assert f"events    {events} ({len(kinds)} events, " in said
    assert f"snapshots {snaps}/ (3 pictures, " in said
    assert f"clips     {clips}/ ({len(mp4s)} clip" in said
