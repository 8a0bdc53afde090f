"""Round four of the hostile-input battery (issue 33), MQTT's side, against a real Mosquitto
(Debian's, started on a free loopback port with an ACL, and a TLS listener): nothing is dropped
while the broker is connected, a refused publish is not counted as delivered, a prefix the
broker keeps for itself and TLS options with a plain URI are refused, a run that lost events
exits non-zero, a TLS port spoken to in clear and a certificate refusal are named, client ids
do not collide and a take-over says why."""

from __future__ import annotations

import logging
import subprocess
import time

import pytest

from edgert.apps.telemetry.mqtt import MqttPublisher, TlsOptions, parse_uri
from edgert.runtime.errors import OutputError
from tests.apps.test_telemetry import TRACKING, Mosquitto, Subscriber, _wait_port, needs, tls_broker
from tests.apps.test_tracking_camera import scene_video
from tests.conftest import assert_user_error, run_cli
from tests.ports import free_ports
from tests.tiny import blob_detector_bundle


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mqtt")
    return blob_detector_bundle(folder / "det"), scene_video(folder / "scene.mp4")


@pytest.fixture
def broker(tmp_path):
    b = Mosquitto(tmp_path / "broker")
    yield b
    b.stop()


def _publisher(broker, prefix: str, **kw) -> MqttPublisher:
    pub = MqttPublisher(parse_uri(broker.url(prefix)), **kw)
    deadline = time.monotonic() + 10
    while not pub.connected and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pub.connected, pub.last_error
    return pub


# -- E7: back-pressure, not loss, while connected -------------------------------------------------
@pytest.mark.subprocess
@needs["mosquitto"]
@pytest.mark.parametrize("buffer", [10, 1000])
def test_a_burst_while_connected_loses_nothing(broker, buffer):
    """6,554 events as fast as they come: 165 were dropped with the default buffer (4,535 with
    10) while the broker was up the whole time. Now publish_event waits for room."""
    sub = Subscriber(broker.port, ["burst/events"], client_id=f"burst-sub-{buffer}")
    pub = _publisher(broker, "burst", buffer=buffer)
    try:
        for i in range(3000):
            pub.publish_event({"event": "line_cross", "i": i})
        pub.close(drain_s=30)
        report = pub.report()
        deadline = time.monotonic() + 10
        while len(sub.on("burst/events")) < 3000 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        sub.close()
    assert report["events"] == report["delivered"] == 3000, report
    assert report["dropped"] == report["refused"] == report["buffered"] == 0
    assert len(sub.on("burst/events")) == 3000


# -- E8: a refused publish is not delivered; $ prefixes refused ----------------------------------
@pytest.mark.subprocess
@needs["mosquitto"]
def test_a_publish_the_broker_refuses_is_counted_as_refused(tmp_path, caplog):
    port = free_ports(1)[0]
    acl = tmp_path / "acl"
    acl.write_text("topic readwrite open/#\n")  # anonymous clients may publish under open/ only
    conf = tmp_path / "acl.conf"
    conf.write_text(f"user root\nlistener {port} 127.0.0.1\nallow_anonymous true\nacl_file {acl}\n")
    proc = subprocess.Popen(
        ["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_port(port)
        with caplog.at_level(logging.WARNING):
            pub = MqttPublisher(parse_uri(f"mqtt://127.0.0.1:{port}/closed/cam"))
            for i in range(20):
                pub.publish_event({"event": "track_start", "i": i})
            pub.close(drain_s=10)
    finally:
        proc.terminate()
        proc.wait(10)
    report = pub.report()
    assert report["delivered"] == 0 and report["refused"] == 20, report
    assert "the broker refused events on closed/cam/events" in caplog.text


def test_prefixes_and_uris_the_broker_would_not_take_are_refused():
    with pytest.raises(OutputError, match=r"begins with '\$'"):
        parse_uri("mqtt://127.0.0.1:1883/$SYS/fb")
    with pytest.raises(OutputError, match="may not hold '#'"):
        parse_uri("mqtt://127.0.0.1:1883/fb/#")
    with pytest.raises(OutputError, match="in brackets") as info:
        parse_uri("mqtt://::1:1883/fb")
    assert "[::1:1883]" in str(info.value)
    target = parse_uri("mqtt://u:p#ss@127.0.0.1:11883/fb")  # E3: '#' in a password
    assert (target.password, target.port, target.prefix) == ("p#ss", 11883, "fb")
    assert "p#ss" not in target.shown
    assert parse_uri("mqtt://[::1]:11883/fb").shown == "mqtt://[::1]:11883/fb"
    with pytest.raises(OutputError) as info:
        parse_uri("mqtt://u:p#ss@127.0.0.1:99999/fb")
    assert "p#ss" not in str(info.value) and "port" in str(info.value)


# -- E4: TLS options need a TLS broker ---------------------------------------------------------------
@pytest.mark.subprocess
def test_tls_options_with_a_plain_uri_are_refused(scene, tmp_path):
    bundle, video = scene
    ca = tmp_path / "ca.pem"
    ca.write_text("not used")
    proc = run_cli(
        "camera",
        bundle,
        "--source",
        video,
        "--headless",
        "--mqtt",
        "mqtt://127.0.0.1:1/fb",
        "--mqtt-ca",
        ca,
    )
    assert_user_error(proc, "--mqtt-ca is for a TLS broker: write mqtts://", "clear text")
    proc = run_cli(
        "camera",
        bundle,
        "--source",
        video,
        "--headless",
        "--mqtt",
        "mqtts://127.0.0.1:1/fb",
        "--mqtt-key",
        ca,
    )
    assert_user_error(proc, "--mqtt-key is the key of a client certificate: give --mqtt-cert too")
    with pytest.raises(OutputError, match="--mqtt-insecure is for a TLS broker"):
        TlsOptions(insecure=True).check(parse_uri("mqtt://h/fb"))


# -- E12: lost events make the exit non-zero, and the reasons are named ---------------------------
@pytest.mark.subprocess
@needs["mosquitto"]
def test_a_run_whose_events_never_arrive_exits_non_zero(scene):
    bundle, video = scene
    port = free_ports(1)[0]  # no broker
    proc = run_cli(
        "camera",
        bundle,
        "--source",
        video,
        "--headless",
        *TRACKING,
        "--mqtt",
        f"mqtt://127.0.0.1:{port}/down",
        "--mqtt-buffer",
        "3",
    )
    assert proc.returncode == 2, proc.stderr
    assert "events were not delivered" in proc.stderr and "connection refused" in proc.stderr
    assert "dropped from the full buffer while the broker was away" in proc.stdout


@pytest.mark.subprocess
@needs["mosquitto"]
def test_plain_mqtt_to_a_tls_port_and_a_refused_certificate_are_named(scene, tmp_path):
    broker, port, _ = tls_broker(tmp_path)
    bundle, video = scene
    try:
        _wait_port(port)
        plain = run_cli(
            "camera",
            bundle,
            "--source",
            video,
            "--headless",
            *TRACKING,
            "--mqtt",
            f"mqtt://127.0.0.1:{port}/tls",
        )
        untrusted = run_cli(
            "camera",
            bundle,
            "--source",
            video,
            "--headless",
            *TRACKING,
            "--mqtt",
            f"mqtts://localhost:{port}/tls",
        )
    finally:
        broker.terminate()
        broker.wait(10)
    assert plain.returncode == 2 and f"port {port} speaks TLS: write mqtts://" in plain.stderr
    assert untrusted.returncode == 2
    assert "the broker's TLS certificate was refused" in untrusted.stderr, untrusted.stderr


# -- E14: client ids -------------------------------------------------------------------------------
@pytest.mark.subprocess
@needs["mosquitto"]
def test_default_client_ids_differ_and_a_take_over_says_why(broker, caplog):
    a = _publisher(broker, "ids/a")
    b = _publisher(broker, "ids/b")
    ids = {p.client._client_id.decode() for p in (a, b)}
    assert len(ids) == 2 and all(len(i.rsplit("-", 1)[1]) == 8 for i in ids)  # 32 random bits
    for p in (a, b):
        p.close()
    with caplog.at_level(logging.WARNING):  # each reconnect takes the other's connection over
        first = _publisher(broker, "ids/c", client_id="same-id")
        second = _publisher(broker, "ids/d", client_id="same-id")
        deadline = time.monotonic() + 15
        while "same client id" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.1)
        for p in (second, first):
            p.close(drain_s=0.5)
    assert "another client with the same client id may be using it" in caplog.text


# -- E18 and E19 -----------------------------------------------------------------------------------
@pytest.mark.subprocess
def test_heartbeat_floor_and_empty_file_names(scene):
    bundle, video = scene
    proc = run_cli(
        "camera", bundle, "--source", video, "--mqtt", "mqtt://h/fb", "--mqtt-heartbeat", "1e-6"
    )
    assert_user_error(proc, "--mqtt-heartbeat", "at least 0.5 s")
    for flag in ("--events", "--jsonl"):
        proc = run_cli("camera", bundle, "--source", video, "--headless", flag, "")
        assert_user_error(proc, f"{flag} needs a file name")
