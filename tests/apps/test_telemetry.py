"""What a fleet sees of `edgert camera`: a real Mosquitto broker (Debian's `mosquitto`) and a real
Prometheus server (Debian's `prometheus`), each started by the test on a free loopback port and
stopped after it (`.ci/run` installs them). The camera runs as users run it: the CLI, in its own
process, on a rendered video through a real detector bundle, with tracking and counting."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.apps.test_tracking_camera import scene_video
from tests.conftest import assert_user_error, run_cli
from tests.ports import free_ports
from tests.power_plant import write_tree
from tests.tiny import blob_detector_bundle, classifier_bundle

pytestmark = pytest.mark.subprocess

if os.environ.get("CI"):  # the Makefile installs edgert[telemetry]: there, missing is a failure
    import paho.mqtt.client as mqtt
    import prometheus_client.parser as prom_parser
else:
    mqtt = pytest.importorskip("paho.mqtt.client")
    prom_parser = pytest.importorskip("prometheus_client.parser")

# CI installs them (.ci/run): there a missing one fails these tests instead of skipping them
needs = {
    name: pytest.mark.skipif(
        not os.environ.get("CI") and shutil.which(exe) is None,
        reason=f"Debian's {name} is needed (.ci/run installs it)",
    )
    for name, exe in (("mosquitto", "mosquitto"), ("prometheus", "prometheus"))
}


def _wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


class Mosquitto:
    """A broker of our own: loopback only, anonymous, persistent sessions kept across its own
    restarts (saved on SIGTERM, as a broker that is restarted keeps its clients' sessions)."""

    def __init__(self, folder: Path) -> None:
        self.port = free_ports(1)[0]
        folder.mkdir(parents=True, exist_ok=True)
        self.conf = folder / "mosquitto.conf"
        self.conf.write_text(
            # run as root (CI), mosquitto would drop to its own user, which cannot write to
            # pytest's private folders: "user root" keeps the test's user
            f"user root\nlistener {self.port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
            f"persistence_location {folder}/\nmax_queued_messages 100000\n"
        )
        self.proc = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["mosquitto", "-c", str(self.conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_port(self.port)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(10)

    def url(self, prefix: str) -> str:
        return f"mqtt://127.0.0.1:{self.port}/{prefix}"


@pytest.fixture
def broker(tmp_path):
    b = Mosquitto(tmp_path / "broker")
    yield b
    b.stop()


class Subscriber:
    """A paho subscriber with a persistent session (QoS 1): what the broker queued for it while
    it was away arrives when it is back."""

    def __init__(self, port: int, topics: list[str], client_id: str = "test-subscriber") -> None:
        self.messages: list[tuple[float, str, bytes, bool]] = []
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False)
        c.reconnect_delay_set(0.2, 1.0)

        def on_connect(client, userdata, flags, rc, props=None):
            for t in topics:
                client.subscribe(t, qos=1)

        c.on_connect = on_connect
        c.on_subscribe = lambda *a: self.subscribed.set()
        c.on_message = self._on_message
        c.connect("127.0.0.1", port, keepalive=5)
        c.loop_start()
        assert self.subscribed.wait(10)
        self.client = c

    def _on_message(self, client, userdata, msg):
        with self.lock:
            self.messages.append((time.monotonic(), msg.topic, msg.payload, msg.retain))

    def on(self, topic: str) -> list[bytes]:
        with self.lock:
            return [p for _, t, p, _ in self.messages if t == topic]

    def wait_for(self, topic: str, payload: bytes, timeout: float = 10.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for t, tp, p, _ in self.messages:
                    if tp == topic and p == payload:
                        return t
            time.sleep(0.02)
        raise AssertionError(f"no {payload!r} on {topic}: {self.on(topic)}")

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tele")
    return blob_detector_bundle(folder / "det"), scene_video(folder / "scene.mp4")


TRACKING = (
    "--conf",
    "0.75",
    "--line",
    "door=160,0,160,240",
    "--zone",
    "pen=200,0,320,0,320,120,200,120",
)


@needs["mosquitto"]
def test_every_event_reaches_a_subscriber_with_heartbeats_and_status(broker, scene, tmp_path):
    bundle, video = scene
    sub = Subscriber(broker.port, ["cam1/#"])
    events = tmp_path / "events.jsonl"
    try:
        proc = run_cli(
            "camera",
            bundle,
            "--source",
            video,
            "--headless",
            *TRACKING,
            "--json",
            "--events",
            events,
            "--mqtt",
            broker.url("cam1"),
            "--mqtt-heartbeat",
            "0.5",
            "--loop",
            "--duration",
            "3",
        )
        assert proc.returncode == 0, proc.stderr
        summary = json.loads(proc.stdout)
        sub.wait_for("cam1/status", b"offline")
        time.sleep(0.3)
    finally:
        sub.close()
    written = [json.loads(x) for x in events.read_text().splitlines()][1:]  # after run_start
    got = [json.loads(p) for p in sub.on("cam1/events")]
    assert len(written) >= 10
    seqs = [g.pop("seq") for g in got]
    assert seqs == list(range(1, len(written) + 1))  # every one, once, in order
    assert got == written  # the very events of --events
    report = next(
        o for o in summary["outputs"] if isinstance(o, dict) and o.get("output") == "mqtt"
    )
    assert report["delivered"] == report["events"] == len(written) and report["dropped"] == 0
    status = sub.on("cam1/status")
    assert status[0] == b"online" and status[-1] == b"offline"  # retained, both
    beats = [json.loads(p) for p in sub.on("cam1/streams/0/heartbeat")]
    assert len(beats) >= 3
    assert {"fps", "frames_dropped", "latency_p99_ms", "power_w", "energy_j", "status"} <= set(
        beats[-1]
    )
    assert beats[-1]["fps"] > 0 and beats[-1]["frames_processed"] > beats[0]["frames_processed"]


@needs["mosquitto"]
def test_a_broker_outage_loses_nothing_within_the_buffer_and_counts_the_rest(
    broker, scene, tmp_path
):
    """The broker is stopped for 4 s mid-run and started again. Events wait in a 40-event
    buffer; beyond it the oldest are dropped and counted. After the reconnect every kept event
    arrives, in order; inference never waited (frames keep flowing through the outage)."""
    bundle, video = scene
    sub = Subscriber(broker.port, ["cam2/events"])
    events = tmp_path / "events.jsonl"
    jsonl = tmp_path / "frames.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "edgert.apps",
        "camera",
        str(bundle),
        "--source",
        str(video),
        "--headless",
        *TRACKING,
        "--json",
        "--events",
        str(events),
        "--jsonl",
        str(jsonl),
        "--mqtt",
        broker.url("cam2"),
        "--mqtt-buffer",
        "40",
        "--loop",
        "--duration",
        "12",
    ]
    camera = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(4.0)
        broker.stop()
        outage = time.time()
        time.sleep(4.0)
        broker.start()
        back = time.time()
        out, err = camera.communicate(timeout=60)
        assert camera.returncode == 2, err  # events were lost: a failed output
        assert "events were not delivered" in err
        time.sleep(1.0)
    finally:
        camera.kill()
        sub.close()
    summary = json.loads(out)
    report = next(
        o for o in summary["outputs"] if isinstance(o, dict) and o.get("output") == "mqtt"
    )
    written = [json.loads(x) for x in events.read_text().splitlines()][1:]  # after run_start
    n = len(written)
    assert report["events"] == n and report["dropped"] > 0, report  # the outage outgrew the buffer
    assert report["delivered"] == n - report["dropped"] and report["buffered"] == 0
    got = [json.loads(p) for p in sub.on("cam2/events")]
    first_seen: list[int] = []
    for g in got:  # QoS 1 is at least once: a resent one may come twice
        if g["seq"] not in first_seen:
            first_seen.append(g["seq"])
    assert first_seen == sorted(first_seen)  # in order
    missing = sorted(set(range(1, n + 1)) - set(first_seen))
    assert len(missing) == report["dropped"]
    assert missing == list(range(missing[0], missing[-1] + 1))  # the oldest of the outage, one run
    print(
        f"outage: {report}; received {len(got)} messages, {len(first_seen)} distinct, "
        f"missing seq {missing[0]}-{missing[-1]}"
    )
    by_seq = {g["seq"]: {k: v for k, v in g.items() if k != "seq"} for g in got}
    assert all(by_seq[s] == written[s - 1] for s in first_seen)
    # frames went on through the outage (none waited for the network): the broker was away from
    # 4 to 8 s after the process started, the pipeline starts 0.5-2 s after it
    assert back - outage >= 4.0
    times = [json.loads(x)["t"] for x in jsonl.read_text().splitlines()[1:]]
    frames_in_outage = [t for t in times if 3.5 < t < 6.0]
    assert len(frames_in_outage) > 50, len(frames_in_outage)


@needs["mosquitto"]
def test_the_last_will_says_offline_when_the_camera_is_killed(broker, tmp_path):
    bundle = classifier_bundle(tmp_path / "m")
    sub = Subscriber(broker.port, ["cam3/status"], client_id="will-watcher")
    camera = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "camera",
            str(bundle),
            "--headless",
            "--duration",
            "60",
            "--mqtt",
            broker.url("cam3"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        sub.wait_for("cam3/status", b"online", timeout=30)
        camera.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        camera.wait(10)
        arrived = sub.wait_for("cam3/status", b"offline", timeout=20)
    finally:
        camera.kill()
        sub.close()
    assert arrived - killed < 5.0  # the broker saw the socket close and sent the Will


def _tls_files(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 it signed (openssl, as a site would)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    cert, key, csr = folder / "server.pem", folder / "server.key", folder / "server.csr"
    ext = folder / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=edgert test CA",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
    )
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        str(key),
        "-out",
        str(csr),
    )
    run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        str(ext),
        "-out",
        str(cert),
    )
    return ca, cert, key


@needs["mosquitto"]
@pytest.mark.skipif(
    not os.environ.get("CI") and shutil.which("openssl") is None,
    reason="openssl makes the test certificates",
)
def tls_broker(tmp_path: Path) -> tuple[subprocess.Popen, int, Path]:
    """Mosquitto with a TLS listener whose certificate a private CA signed: (process, port, CA)."""
    ca, cert, key = _tls_files(tmp_path / "tls")
    port = free_ports(1)[0]
    conf = tmp_path / "tls.conf"
    conf.write_text(
        f"user root\nlistener {port} 127.0.0.1\nallow_anonymous true\ncafile {ca}\n"
        f"certfile {cert}\nkeyfile {key}\n"
    )
    proc = subprocess.Popen(
        ["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return proc, port, ca


def test_mqtts_with_a_private_ca(scene, tmp_path):
    """mqtts:// to a broker whose certificate a private CA signed: --mqtt-ca makes it trusted (the
    host name checked against the certificate); without it the connection is refused and the
    events wait in the buffer (the run still ends cleanly, the loss reported)."""
    broker, port, ca = tls_broker(tmp_path)
    got: list[bytes] = []
    try:
        _wait_port(port)
        sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="tls-subscriber")
        sub.tls_set(ca_certs=str(ca))
        subscribed = threading.Event()
        sub.on_connect = lambda c, *a: c.subscribe("tls/events", qos=1)
        sub.on_subscribe = lambda *a: subscribed.set()
        sub.on_message = lambda c, u, msg: got.append(msg.payload)
        sub.connect("127.0.0.1", port)
        sub.loop_start()
        assert subscribed.wait(10)
        bundle, video = scene
        url = f"mqtts://127.0.0.1:{port}/tls"
        ok = run_cli(
            "camera",
            bundle,
            "--source",
            video,
            "--headless",
            *TRACKING,
            "--json",
            "--mqtt",
            url,
            "--mqtt-ca",
            ca,
        )
        refused = run_cli(
            "camera",
            bundle,
            "--source",
            video,
            "--headless",
            *TRACKING,
            "--json",
            "--mqtt",
            url.replace("/tls", "/untrusted"),
        )
        time.sleep(0.5)
        sub.loop_stop()
        sub.disconnect()
    finally:
        broker.terminate()
        broker.wait(10)
    assert ok.returncode == 0, ok.stderr
    report = next(
        o
        for o in json.loads(ok.stdout)["outputs"]
        if isinstance(o, dict) and o.get("output") == "mqtt"
    )
    assert report["broker"].startswith("mqtts://") and report["delivered"] == report["events"] > 0
    assert len({json.loads(p)["seq"] for p in got}) == report["events"]
    assert refused.returncode == 2, refused.stderr  # nothing delivered: a failed output
    assert "certificate was refused" in refused.stderr, refused.stderr
    r2 = next(
        o
        for o in json.loads(refused.stdout)["outputs"]
        if isinstance(o, dict) and o.get("output") == "mqtt"
    )
    assert r2["connects"] == 0 and r2["delivered"] == 0 and r2["buffered"] == r2["events"] > 0
    assert "TLS certificate was refused" in r2["last_error"]


def test_bad_mqtt_and_metrics_options_are_one_sentence(tmp_path):
    bundle = classifier_bundle(tmp_path / "m")
    assert_user_error(
        run_cli("camera", bundle, "--mqtt", "http://broker/x"),
        "--mqtt",
        "mqtt://[user:pass@]host[:port]/PREFIX",
    )
    proc = run_cli("camera", bundle, "--mqtt", "mqtt://u:s3cret@127.0.0.1:0/x")
    assert_user_error(proc, "port must be a number from 1 to 65535")
    assert "s3cret" not in proc.stderr
    assert_user_error(
        run_cli("camera", bundle, "--metrics", "127.0.0.1:http"), "--metrics", "HOST:PORT"
    )
    proc = run_cli(
        "camera",
        bundle,
        "--mqtt",
        "mqtt://127.0.0.1/x",
        prefix=(),
        env={"PYTHONPATH": str(_no_paho(tmp_path))},
    )
    assert_user_error(proc, "--mqtt needs paho", "pip install 'edgert[telemetry]'", code=1)


def _no_paho(tmp_path: Path) -> Path:
    """A folder first on sys.path whose ``paho`` cannot be imported: the extra is not installed."""
    folder = tmp_path / "nopaho" / "paho"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("raise ImportError('paho is not installed')\n")
    return folder.parent


def _get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@needs["prometheus"]
def test_prometheus_scrapes_frames_and_power_and_ready_waits_for_the_model(tmp_path):
    """A recreated Orin NX board (INA3221 VDD_IN at 7.5 W) and a real Prometheus scraping the
    camera every second: its query API returns the frame counter and the power; the exposition
    parses with prometheus_client's own parser; /ready is 503 until the model is loaded."""
    bundle = classifier_bundle(tmp_path / "m")
    root = tmp_path / "sys"
    write_tree(root, 7.5)
    mport, pport = free_ports(2)
    conf = tmp_path / "prometheus.yml"
    conf.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n  - job_name: edgert\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{mport}']}}]\n"
    )
    prom = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={conf}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{pport}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    camera = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "camera",
            str(bundle),
            "--headless",
            "--duration",
            "20",
            "--metrics",
            f"127.0.0.1:{mport}",
            "--sysfs-root",
            str(root),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        answers = []  # /ready from the moment the process starts
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                code, body = _get(f"http://127.0.0.1:{mport}/ready", 1.0)
            except OSError:
                time.sleep(0.005)
                continue
            answers.append((code, json.loads(body)))
            if code == 200:
                break
        print(
            "ready timeline:",
            [(c, b.get("reason")) for c, b in answers][:3],
            "...",
            len(answers),
            "answers",
        )
        assert answers and answers[0][0] == 503, answers[:3]
        assert answers[-1][0] == 200, answers[-3:]
        assert any(a[1].get("reason") == "the model is loading" for a in answers[:-1]) or all(
            "reason" in a[1] for a in answers[:-1]
        )
        assert _get(f"http://127.0.0.1:{mport}/live")[0] == 200
        _wait_port(pport, 20)
        found = {}
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and len(found) < 2:
            for q in ("edgert_frames_processed_total", "edgert_power_watts"):
                code, body = _get(f"http://127.0.0.1:{pport}/api/v1/query?query={q}")
                result = json.loads(body)["data"]["result"] if code == 200 else []
                if result and float(result[0]["value"][1]) > 0:
                    found[q] = result[0]
            time.sleep(0.5)
        code, text = _get(f"http://127.0.0.1:{mport}/metrics")
    finally:
        camera.send_signal(signal.SIGINT)
        camera.communicate(timeout=30)
        prom.terminate()
        prom.wait(10)
    assert float(found["edgert_frames_processed_total"]["value"][1]) > 0
    assert found["edgert_frames_processed_total"]["metric"]["stream"] == "0"
    assert float(found["edgert_power_watts"]["value"][1]) == pytest.approx(7.5, abs=0.01)
    families = {f.name: f for f in prom_parser.text_string_to_metric_families(text.decode())}
    assert families["edgert_frames_processed"].type == "counter"
    assert families["edgert_stage_latency_seconds"].type == "histogram"
    stages = {s.labels["stage"] for s in families["edgert_stage_latency_seconds"].samples}
    assert {
        "capture_age",
        "preprocess",
        "batch_wait",
        "infer",
        "postprocess",
        "end_to_end",
    } <= stages
    assert families["edgert_energy_joules"].type == "counter"
    rails = {s.labels["rail"]: s.value for s in families["edgert_rail_power_watts"].samples}
    assert rails == {"VDD_IN": pytest.approx(7.5, abs=0.01)}
    info = families["edgert_build_info"].samples[0].labels
    assert info["backend"] == "onnxruntime" and info["version"]


def test_the_web_viewer_port_serves_the_probes_and_metrics(tmp_path):
    bundle = classifier_bundle(tmp_path / "m")
    port = free_ports(1)[0]
    camera = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "camera",
            str(bundle),
            "--duration",
            "20",
            "--output",
            f"http://127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_port(port, 20)
        deadline = time.monotonic() + 20
        while _get(f"http://127.0.0.1:{port}/ready")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _get(f"http://127.0.0.1:{port}/ready")[0] == 200
        assert _get(f"http://127.0.0.1:{port}/live")[0] == 200
        code, text = _get(f"http://127.0.0.1:{port}/metrics")
        assert code == 200 and b'edgert_frames_processed_total{stream="0"}' in text
    finally:
        camera.send_signal(signal.SIGINT)
        camera.communicate(timeout=30)
