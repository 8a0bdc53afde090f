"""A camera's own outputs (issue 68): ``--stream-output STREAM:URI`` and a site file's
``cameras.X.outputs``. Two rendered camera scenes through a real detector bundle on ONNX Runtime:
an events file, a frames file and a video file of one camera hold that camera's alone (the same
records the run's own outputs hold for it), each camera's MQTT prefix on a real Mosquitto gets
its events and heartbeats only, the flags and the file are one model, and what cannot be one
camera's is said at its line."""

from __future__ import annotations

import json
import time

import cv2
import pytest

from edgert.apps.config import ConfigError, load_site_text, site_model
from edgert.apps.config import flags as flag_table
from tests.apps.test_site_config import mirrored_video
from tests.apps.test_telemetry import Mosquitto, Subscriber, needs
from tests.apps.test_tracking_camera import FRAMES, scene_video
from tests.conftest import assert_user_error, run_cli
from tests.tiny import blob_detector_bundle, classifier_bundle


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("own")
    bundle = blob_detector_bundle(folder / "det")
    return bundle, scene_video(folder / "a.mp4"), mirrored_video(folder / "b.mp4")


TRACKING = ("--conf", "0.75", "--line", "door=160,0,160,240", "--line", "down=0,120,320,120")


def lines(path) -> list:
    return [json.loads(x) for x in path.read_text().splitlines()]


def without_time(events: list) -> list:
    return [{k: v for k, v in e.items() if k not in ("time", "t_monotonic")} for e in events]


@pytest.mark.subprocess
def test_a_camera_s_own_files_hold_its_stream_alone(site, tmp_path):
    bundle, a, b = site
    every, zero = tmp_path / "every.jsonl", tmp_path / "zero.jsonl"
    frames, video = tmp_path / "frames1.jsonl", tmp_path / "cam1.mp4"
    proc = run_cli(
        *("camera", bundle, "--source", a, "--source", b, "--headless", "--json", *TRACKING),
        *("--events", every, "--stream-output", f"0:events://{zero}"),
        *("--stream-output", f"1:{video}", "--stream-output", f"1:jsonl://{frames}"),
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    run_start, *own = lines(zero)
    assert [s["stream"] for s in run_start["streams"]] == [0]  # the file names its camera
    of_zero = [e for e in lines(every)[1:] if e.get("stream") == 0]
    assert len(of_zero) >= 4 and any(e.get("stream") == 1 for e in lines(every))
    assert without_time(own) == without_time(of_zero)  # the very records, and only those
    header, *records = lines(frames)
    assert [s["stream"] for s in header["streams"]] == [1]
    assert len(records) == FRAMES // 2 and {r["stream"] for r in records} == {1}
    cap = cv2.VideoCapture(str(video))
    count = 0
    while cap.read()[0]:
        count += 1
    cap.release()
    assert count == FRAMES // 2  # camera 1's frames (camera 0 has twice as many)
    files = {f["path"]: f for f in summary["files"]}
    assert files[str(video)]["stream"] == 1 and files[str(zero)]["stream"] == 0
    assert files[str(zero)]["events"] == len(own)


@pytest.mark.subprocess
def test_what_cannot_be_a_camera_s_own_output_is_one_sentence(site, tmp_path):
    bundle, a, b = site
    base = ("camera", bundle, "--source", a, "--source", b, "--headless")
    out = tmp_path / "x.mp4"
    cases = [
        (("--stream-output", f"2:{out}"), "--stream-output 2:"),  # and: there is no stream 2
        (("--stream-output", str(out)), "give STREAM:URI"),
        (("--stream-output", "0:http://127.0.0.1:0"), "serves every camera"),
        (("--stream-output", f"1:clips://{tmp_path}"), "--stream-clips STREAM:off"),
        (("--stream-output", "0:ftp://x/y"), "unsupported output"),
        (("--stream-output", f"0:{out}", "--stream-output", f"1:{out}"), "would both write"),
        (("--output", tmp_path / "o.mp4", "--stream-output", f"1:{tmp_path}/o_1.mp4"), "both"),
    ]
    for args, said in cases:
        assert_user_error(run_cli(*base, *args), said)
    assert not out.exists()
    classifier = classifier_bundle(tmp_path / "cls")  # a camera's events output tracks
    proc = run_cli("camera", classifier, "--source", a, "--stream-output", f"0:events://{out}")
    assert_user_error(proc, f"--stream-output 0:events://{out} follows detected objects")


@pytest.mark.subprocess
@needs["mosquitto"]
def test_each_camera_s_mqtt_prefix_gets_its_events_and_heartbeats_only(site, tmp_path):
    bundle, a, b = site
    broker = Mosquitto(tmp_path / "broker")
    sub = Subscriber(broker.port, ["site/#"], client_id="own-outputs")
    every = tmp_path / "every.jsonl"
    try:
        proc = run_cli(
            *("camera", bundle, "--source", a, "--source", b, "--headless", *TRACKING),
            *("--events", every, "--mqtt-heartbeat", "0.5", "--loop", "--duration", "3"),
            *("--stream-output", f"0:{broker.url('site/a')}"),
            *("--stream-output", f"1:{broker.url('site/b')}"),
        )
        assert proc.returncode == 0, proc.stderr
        for prefix in ("site/a", "site/b"):
            sub.wait_for(f"{prefix}/status", b"offline")
        time.sleep(0.3)
    finally:
        sub.close()
        broker.stop()
    written = lines(every)[1:]
    for prefix, stream in (("site/a", 0), ("site/b", 1)):
        got = [json.loads(p) for p in sub.on(f"{prefix}/events")]
        for g in got:
            g.pop("seq")
        assert got and got == [e for e in written if e.get("stream", stream) == stream]
        beats = [json.loads(p) for p in sub.on(f"{prefix}/streams/{stream}/heartbeat")]
        assert len(beats) >= 2 and {x["stream"] for x in beats} == {stream}
        other = 1 - stream
        assert sub.on(f"{prefix}/streams/{other}/heartbeat") == []
    topics = {t for _, t, _, _ in sub.messages}
    assert not any(t.startswith("site/") and t.count("/") == 1 for t in topics)  # prefixes only


def text(bundle, cameras: str) -> str:
    return f"model: {{path: {bundle}}}\ncameras:\n{cameras}"


def test_the_file_s_outputs_are_the_flags_and_back(site, tmp_path):
    from edgert.apps.config import convert

    bundle = site[0]
    loaded = load_site_text(
        text(
            bundle,
            "  door: {source: synthetic://, outputs: ['events://d.jsonl', 'door.mp4']}\n"
            "  yard: {source: synthetic://}\n"
            "  dock: {source: synthetic://, outputs: ['rtsp://0.0.0.0:8555/dock']}\n",
        )
    )
    assert loaded.config.stream_sinks == (
        (0, "events://d.jsonl"),
        (0, "door.mp4"),
        (2, "rtsp://0.0.0.0:8555/dock"),
    )
    assert loaded.config.sinks == [] and loaded.config.tracks  # an events output tracks
    ns = flag_table.defaults()
    ns.model, ns.source = str(bundle), ["synthetic://", "synthetic://"]
    ns.stream_output = ["1:mqtt://broker/site/b", "1:b.mp4"]
    data = convert.from_namespace(ns)
    assert data["cameras"]["cam1"]["outputs"] == ["mqtt://broker/site/b", "b.mp4"]
    assert "outputs" not in data["cameras"]["cam0"]
    valid = site_model().model_validate(data).model_dump(mode="json", exclude_unset=True)
    assert convert.to_namespace(valid).stream_output == ns.stream_output


def test_a_camera_s_output_of_every_camera_is_said_at_its_line(site):
    with pytest.raises(ConfigError) as got:
        load_site_text(
            text(
                site[0],
                "  a: {source: synthetic://}\n  b:\n    source: synthetic://\n    outputs:\n"
                "      - out.mp4\n      - http://127.0.0.1:8080\n      - ftp://x/y\n"
                "      - snapshots://shots\n",
            ),
            name="s.yaml",
        )
    said = str(got.value).splitlines()
    assert said[0] == (
        "cameras.b.outputs[1]: http:// serves every camera; give it to the run (--output) (s.yaml:8)"
    ), said
    assert said[1].startswith("cameras.b.outputs[2]: unsupported output 'ftp://x/y'"), said
    assert said[2].startswith("cameras.b.outputs[3]: snapshots:// keeps every camera's"), said
    assert said[2].endswith("(s.yaml:10)") and len(said) == 3, said


def test_an_mqtt_output_of_one_camera_is_still_held_back_by_the_store():
    """With a store on, MQTT publishes what the store committed: a camera's own MQTT too."""
    from edgert.apps.camera.sinks.mqtt import MqttOutput
    from edgert.apps.camera.sinks.own import OneStream
    from edgert.apps.store.follow import follows

    assert follows(OneStream(MqttOutput(object()), 1))
    assert not follows(OneStream(Sinkless(), 1))


class Sinkless:
    takes_frames = takes_events = takes_stats = draws = False
