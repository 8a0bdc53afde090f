"""edgert serve behind a real Triton Inference Server (PyTriton), with real tritonclient HTTP and
gRPC clients. PyTriton needs numpy < 2, so these run in their own environment (`make test-serve`,
which CI runs); elsewhere they skip and say why."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

pytestmark = pytest.mark.subprocess

pytest.importorskip(
    "pytriton", reason="PyTriton is not installed here: `make test-serve` runs these"
)
if int(np.__version__.split(".")[0]) >= 2:
    pytest.skip("PyTriton needs numpy < 2: `make test-serve` runs these", allow_module_level=True)

import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402

from edgert.runtime import Engine  # noqa: E402
from edgert.runtime.sample_data import photo_path  # noqa: E402
from edgert.runtime.tasks import load_task_model  # noqa: E402
from tests.conftest import ROOT, assert_user_error, run_cli  # noqa: E402
from tests.ports import free_ports  # noqa: E402
from tests.tiny import classifier_bundle  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    bundle = classifier_bundle(tmp_path_factory.mktemp("serve"), size=32)
    info = start(bundle, "tiny")
    yield info
    if info["proc"].poll() is None:
        info["proc"].kill()
        info["proc"].wait()


def start(bundle, name: str, *extra: str) -> dict:
    """`edgert serve BUNDLE [EXTRA...]` on free ports, once its models are ready (``bundle``: a
    list for several; ``name``: the first's)."""
    http, grpc, metrics = free_ports(3)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "serve",
            *map(str, bundle if isinstance(bundle, list) else [bundle]),
            "--http-port",
            str(http),
            "--grpc-port",
            str(grpc),
            "--metrics-port",
            str(metrics),
            "--max-queue-delay-us",
            "20000",
            *map(str, extra),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    deadline = time.monotonic() + 120
    ready = ["/v2/health/ready", f"/v2/models/{name}/ready", f"/v2/models/{name}_image/ready"]
    while ready and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}{ready[0]}", timeout=1) as r:
                if r.status == 200:
                    ready.pop(0)
        except OSError:
            if proc.poll() is not None:
                raise AssertionError(proc.stdout.read()) from None
            time.sleep(0.5)
    if ready:
        proc.kill()
        raise AssertionError(f"the server never became ready ({ready[0]})")
    return {"bundle": bundle, "http": http, "grpc": grpc, "metrics": metrics, "proc": proc}


def _inputs(module, x):
    inp = module.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return [inp]


def test_tensor_requests_equal_engine_infer(server):
    x = np.random.default_rng(0).random((3, 3, 32, 32), np.float32)
    with Engine.load(server["bundle"]) as engine:
        ref = engine.infer(x)["logits"]
    h = httpclient.InferenceServerClient(f"127.0.0.1:{server['http']}")
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{server['grpc']}")
    got_h = h.infer("tiny", _inputs(httpclient, x)).as_numpy("logits")
    got_g = g.infer("tiny", _inputs(grpcclient, x)).as_numpy("logits")
    assert np.abs(got_h - ref).max() <= 1e-4 and np.abs(got_g - ref).max() <= 1e-4


def test_sixteen_clients_get_their_own_answers_and_requests_are_batched(server):
    with Engine.load(server["bundle"]) as engine:
        rng = np.random.default_rng(1)
        xs = [rng.random((1, 3, 32, 32), np.float32) for _ in range(16)]
        refs = [engine.infer(x)["logits"] for x in xs]
    wrong, errors = [], []

    def client(k: int) -> None:
        try:
            c = grpcclient.InferenceServerClient(f"127.0.0.1:{server['grpc']}")
            for _ in range(10):
                got = c.infer("tiny", _inputs(grpcclient, xs[k])).as_numpy("logits")
                if np.abs(got - refs[k]).max() > 1e-4:
                    wrong.append(k)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and wrong == []
    with urllib.request.urlopen(f"http://127.0.0.1:{server['metrics']}/metrics") as r:
        text = r.read().decode()

    def metric(name: str) -> float:
        m = re.search(rf'^{name}{{model="tiny",version="1"}} (\S+)$', text, re.M)
        return float(m.group(1))

    inferences, executions = metric("nv_inference_count"), metric("nv_inference_exec_count")
    assert inferences >= 160 and executions < inferences  # dynamic batching really batches


def test_a_jpeg_comes_back_with_the_label(server):
    jpeg = photo_path("chelsea").read_bytes()
    with load_task_model(server["bundle"], top_k=5) as model:
        import cv2

        expected = model(cv2.imread(str(photo_path("chelsea")))).classes[0].label
    h = httpclient.InferenceServerClient(f"127.0.0.1:{server['http']}")
    inp = httpclient.InferInput("image", [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[jpeg]], dtype=np.object_))
    out = h.infer("tiny_image", [inp])
    result = json.loads(out.as_numpy("result")[0][0])
    assert result["results"][0]["label"] == expected
    assert out.as_numpy("logits").shape == (1, 3)
    bad = httpclient.InferInput("image", [1, 1], "BYTES")
    bad.set_data_from_numpy(np.array([[b"not an image"]], dtype=np.object_))
    assert "error" in json.loads(h.infer("tiny_image", [bad]).as_numpy("result")[0][0])


def test_images_of_different_sizes_share_one_batch(server):
    import cv2

    photos = [cv2.imread(str(photo_path(p))) for p in ("coffee", "rocket")]
    blobs = [
        cv2.imencode(".png", photos[0][:200, :300])[1].tobytes(),
        cv2.imencode(".jpg", photos[1])[1].tobytes(),
    ]
    h = httpclient.InferenceServerClient(f"127.0.0.1:{server['http']}")
    inp = httpclient.InferInput("image", [2, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[b] for b in blobs], dtype=np.object_))
    out = h.infer("tiny_image", [inp])
    with load_task_model(server["bundle"], top_k=5) as model:
        expected = [
            model(photos[0][:200, :300]).classes[0].label,
            model(photos[1]).classes[0].label,
        ]
    got = [json.loads(r[0])["results"][0]["label"] for r in out.as_numpy("result")]
    assert got == expected and out.as_numpy("logits").shape == (2, 3)


def test_pose_segmentation_and_oriented_boxes_come_back_in_the_image_json(tmp_path):
    """Three bundles of issue 48's tasks, each made from an ONNX alone (Ultralytics metadata),
    served together: NAME_image's JSON carries each object's keypoints (source pixels, with
    visibility), its mask (area and outline polygon in source pixels) and its oriented box
    (centre, sides and angle; corners), as edgert's own model gives them."""
    import cv2

    from edgert.export import export_model
    from tests.tiny import ANGLE, FIGURE_SEEN, blob_detector

    bundles = [
        export_model(
            str(blob_detector(tmp_path / f"{h}.onnx", head=h, ultralytics=True)),
            tmp_path / f"{h}.edgert",
        ).bundle
        for h in ("pose", "segment", "obb")
    ]
    picture = np.zeros((240, 320, 3), np.uint8)
    picture[60:120, 100:160] = 255  # one 60 x 60 square (the models' object)
    jpeg = cv2.imencode(".png", picture)[1].tobytes()
    info = start(bundles, "pose")
    try:
        h = httpclient.InferenceServerClient(f"127.0.0.1:{info['http']}")
        deadline = time.monotonic() + 60
        while not all(h.is_model_ready(f"{n}_image") for n in ("segment", "obb")):
            assert time.monotonic() < deadline, "the other bundles never became ready"
            time.sleep(0.5)
        got = {}
        for name, bundle in zip(("pose", "segment", "obb"), bundles, strict=True):
            inp = httpclient.InferInput("image", [1, 1], "BYTES")
            inp.set_data_from_numpy(np.array([[jpeg]], dtype=np.object_))
            row = json.loads(h.infer(f"{name}_image", [inp]).as_numpy("result")[0][0])
            with load_task_model(bundle) as model:
                expected = model(picture).to_records()
            assert row["results"] == json.loads(json.dumps(expected)), name
            got[name] = max(row["results"], key=lambda o: o["score"])
    finally:
        info["proc"].send_signal(signal.SIGTERM)
        info["proc"].wait(timeout=30)
    x1, y1, x2, y2 = got["pose"]["box"]
    assert abs(x1 - 100) < 6 and abs(y1 - 60) < 6 and abs(x2 - 160) < 6 and abs(y2 - 120) < 6
    kp = np.asarray(got["pose"]["keypoints"])
    assert kp.shape == (17, 3) and list(kp[:, 2]) == list(FIGURE_SEEN)
    assert (kp[:, 0] > x1).all() and (kp[:, 0] < x2).all()
    seg = got["segment"]
    assert 3000 < seg["mask_area"] < 5000 and len(seg["polygon"]) >= 4
    poly = np.asarray(seg["polygon"])
    assert abs(poly[:, 0].min() - 100) < 8 and abs(poly[:, 1].max() - 120) < 8
    cx, cy, w, hh, angle = got["obb"]["rbox"]
    assert abs(cx - 130) < 6 and abs(cy - 90) < 6 and abs(w - 60) < 6 and abs(hh - 60) < 6
    assert abs(angle - ANGLE) < 1e-4 and len(got["obb"]["corners"]) == 4


def test_port_in_use_is_one_sentence(server, tmp_path):
    proc = run_cli("serve", server["bundle"], "--http-port", str(server["http"]))
    assert_user_error(proc, f"port {server['http']}", "--http-port")


def test_sigterm_stops_the_server_within_seconds(server):
    proc = server["proc"]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert time.monotonic() - t0 < 15
    output = proc.stdout.read()
    assert "Traceback" not in output, output
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{server['http']}/v2/health/ready", timeout=1)


def test_a_fixed_batch_bundle_is_served_request_by_request(tmp_path):
    """Without a dynamic batch Triton hands over requests one by one (no batching)."""
    import onnx

    from edgert.export import export_model
    from tests.tiny import image_classifier

    path = image_classifier(tmp_path / "fixed.onnx", size=16)
    model = onnx.load(str(path))
    for value in (*model.graph.input, *model.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_param")
        dim.dim_value = 1
    onnx.save(model, str(path))
    bundle = export_model(
        str(path), tmp_path / "fixed.edgert", task="classify", preprocess={"size": "16x16"}
    ).bundle
    info = start(bundle, "fixed")
    try:
        x = np.random.default_rng(2).random((1, 3, 16, 16), np.float32)
        with Engine.load(bundle) as engine:
            ref = engine.infer(x)["logits"]
        h = httpclient.InferenceServerClient(f"127.0.0.1:{info['http']}")
        assert (
            np.abs(h.infer("fixed", _inputs(httpclient, x)).as_numpy("logits") - ref).max() <= 1e-4
        )
        jpeg = photo_path("chelsea").read_bytes()
        inp = httpclient.InferInput("image", [2, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[jpeg], [jpeg]], dtype=np.object_))
        rows = h.infer("fixed_image", [inp]).as_numpy("result")
        assert [len(json.loads(r[0])["results"]) for r in rows] == [3, 3]
    finally:
        info["proc"].send_signal(signal.SIGTERM)
        info["proc"].wait(timeout=30)


# -- issue 28.6-9: a graceful stop, a quick restart, per-request errors, sentences up front ------
def _descendants(pid: int) -> list[int]:
    from edgert.apps.processes import descendants as below

    return below(pid)


def _alive(pid: int) -> bool:
    from edgert.apps.processes import alive

    return alive(pid)


def _temp_state() -> set:
    import glob
    import tempfile

    shm = set(glob.glob("/dev/shm/*"))
    tmp = set(glob.glob(f"{tempfile.gettempdir()}/folder*"))
    logs = set(glob.glob(f"{tempfile.gettempdir()}/edgert-serve-*.log"))
    return shm | tmp | logs


def test_sigterm_finishes_requests_in_flight_leaves_nothing_and_restarts_at_once(tmp_path):
    """Requests waiting in a 2-second batch window when SIGTERM comes are answered; then no
    process, shared memory, Triton model folder or log of the server is left; exit code 0; and
    the same ports serve again right away (TIME-WAIT sockets of those keep-alive clients)."""
    bundle = classifier_bundle(tmp_path / "b", size=32)
    before = _temp_state()
    http, grpc, metrics = free_ports(3)
    cmd = [
        sys.executable,
        "-m",
        "edgert.apps",
        "serve",
        str(bundle),
        "--http-port",
        str(http),
        "--grpc-port",
        str(grpc),
        "--metrics-port",
        str(metrics),
        "--max-queue-delay-us",
        "2000000",
        "--max-batch",
        "8",
    ]

    def launch():
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                url = f"http://127.0.0.1:{http}/v2/models/tiny/ready"
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status == 200:
                        return proc
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                time.sleep(0.3)
        proc.kill()
        raise AssertionError("never ready")

    # a stop while it starts: deferred until Triton is up, then the same clean stop
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "stopped" in out, out
    assert _temp_state() - before == set()
    proc = launch()
    helpers = _descendants(proc.pid)
    x = np.random.default_rng(3).random((1, 3, 32, 32), np.float32)
    with Engine.load(bundle) as engine:
        ref = engine.infer(x)["logits"]
    answers, errors = [], []

    def client() -> None:
        try:
            c = httpclient.InferenceServerClient(f"127.0.0.1:{http}", network_timeout=30)
            answers.append(c.infer("tiny", _inputs(httpclient, x)).as_numpy("logits"))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(6)]
    while "ready:" not in proc.stdout.readline():  # every model loaded
        pass
    for t in threads:
        t.start()
    time.sleep(0.7)  # the six wait in the batch window
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    for t in threads:
        t.join(timeout=30)
    assert proc.returncode == 0, out
    assert errors == [] and len(answers) == 6, (errors, out)
    assert all(np.abs(a - ref).max() <= 1e-4 for a in answers)
    assert helpers and not [p for p in helpers if _alive(p)]
    assert _temp_state() - before == set()
    assert "Traceback" not in out and "stopped" in out
    proc = launch()  # at once, on the same ports
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 0


def test_one_bad_image_fails_only_its_own_request(tmp_path):
    """A model that takes 32x32 as it is (resize none): an image of another size in the same
    dynamic batch gets its own error; the others their results; no traceback reaches a client."""
    import cv2

    bundle = classifier_bundle(tmp_path / "b", size=32, resize="none")
    info = start(bundle, "tiny")
    try:
        good = cv2.imencode(".png", np.full((32, 32, 3), 90, np.uint8))[1].tobytes()
        wrong = photo_path("chelsea").read_bytes()
        h = httpclient.InferenceServerClient(f"127.0.0.1:{info['http']}")
        inp = httpclient.InferInput("image", [2, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[wrong], [good]], dtype=np.object_))
        rows = [json.loads(r[0]) for r in h.infer("tiny_image", [inp]).as_numpy("result")]
        assert "error" in rows[0] and "Traceback" not in rows[0]["error"]
        assert "resize" in rows[0]["error"] and len(rows[1]["results"]) == 3
    finally:
        info["proc"].send_signal(signal.SIGTERM)
        info["proc"].wait(timeout=60)


def test_conflicts_are_one_sentence_before_anything_starts(tmp_path):
    a = classifier_bundle(tmp_path / "a", name="tiny")
    b = classifier_bundle(tmp_path / "b", name="tiny")
    http, grpc, metrics = free_ports(3)
    ports = ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    t0 = time.monotonic()
    same = ["--http-port", str(http), "--grpc-port", str(http), "--metrics-port", str(metrics)]
    assert_user_error(run_cli("serve", a, *same), "are both", "give each its own port")
    assert_user_error(run_cli("serve", a, b, *ports), "both named 'tiny'")
    assert_user_error(
        run_cli("serve", a, "--host", "192.0.2.1", *ports), "not an address of this machine"
    )
    assert time.monotonic() - t0 < 60


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0  # not listening yet


def test_edgert_ready_means_every_model_answers(tmp_path):
    """A load balancer's view: edgert's /ready (--edgert-metrics-port) polled from the moment
    the process starts; every inference sent right after a 200 succeeds, on both models. Triton's
    own /v2/health/ready is polled beside it, for the timeline."""
    pytest.importorskip("prometheus_client")
    bundle = classifier_bundle(tmp_path, size=32)
    http, grpc, metrics, edgert_port = free_ports(4)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "serve",
            *map(str, bundle if isinstance(bundle, list) else [bundle]),
            "--http-port",
            str(http),
            "--grpc-port",
            str(grpc),
            "--metrics-port",
            str(metrics),
            "--edgert-metrics-port",
            str(edgert_port),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    timeline = {}  # the first time each answer was seen
    changes = []  # (s, probe, status) each time a probe's answer changed
    answered = 0
    x = np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)
    jpeg = photo_path("chelsea").read_bytes()
    try:
        deadline = time.monotonic() + 120
        while answered < 5 and time.monotonic() < deadline:
            ours = _status(f"http://127.0.0.1:{edgert_port}/ready")
            triton = _status(f"http://127.0.0.1:{http}/v2/health/ready")
            now = round(time.monotonic() - t0, 2)
            for probe, code in (("edgert /ready", ours), ("triton /v2/health/ready", triton)):
                timeline.setdefault(f"{probe} {code}", now)
                if (
                    not any(c[1] == probe for c in changes)
                    or [c for c in changes if c[1] == probe][-1][2] != code
                ):
                    changes.append((now, probe, code))
            if ours == 200:  # what a balancer does next: send traffic
                h = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
                logits = h.infer("tiny", _inputs(httpclient, x)).as_numpy("logits")
                assert logits.shape == (1, 3)
                inp = httpclient.InferInput("image", [1, 1], "BYTES")
                inp.set_data_from_numpy(np.array([[jpeg]], dtype=np.object_))
                result = json.loads(h.infer("tiny_image", [inp]).as_numpy("result")[0][0])
                assert result["results"][0]["label"]
                answered += 1
            else:
                assert proc.poll() is None, proc.stdout.read()
                time.sleep(0.05)
        assert answered == 5, timeline
        text = urllib.request.urlopen(f"http://127.0.0.1:{edgert_port}/metrics").read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    print("readiness timeline (s after the process started):", changes)
    assert timeline["edgert /ready 503"] < timeline["edgert /ready 200"], timeline
    assert 'edgert_inferences_total{model="tiny"} 5.0' in text
    assert 'edgert_inferences_total{model="tiny_image"} 5.0' in text
    assert "edgert_build_info{" in text and 'model="tiny"' in text
    ready_line = next(line for line in out.splitlines() if line.startswith("ready:"))
    assert "models: tiny, tiny_image" in ready_line


# -- issue 39: a new bundle version through Triton's model control ------------------------------
def _variant(a, folder, change):
    """A's network (tests/tiny.py, 32 px) with its class weights ``gw`` changed by ``change``,
    exported as another bundle named tiny: a retrained version (small noise) or a bad export
    (the classes rotated)."""
    import onnx
    from onnx import numpy_helper

    from edgert.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(a / "model.onnx"))
    for init in model.graph.initializer:
        if init.name == "gw":
            w = change(numpy_helper.to_array(init))
            init.CopyFrom(numpy_helper.from_array(w.astype(np.float32), "gw"))
    del model.metadata_props[:]
    onnx.save(model, str(folder / "tiny.onnx"))
    (folder / "labels.txt").write_text("cat\ndog\nbird\n")
    return export_model(
        str(folder / "tiny.onnx"),
        folder / "tiny.edgert",
        task="classify",
        labels=folder / "labels.txt",
        preprocess={"resize": "resize_crop", "size": "32x32"},
    ).bundle


def _json_http(method: str, url: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class _Clients:
    """Image requests (HTTP, three photos in turn) and tensor requests (gRPC) without pause,
    each answer kept with the model that made it, each failure kept."""

    def __init__(self, info) -> None:
        import cv2

        self.info = info
        self.blobs = [
            cv2.imencode(".jpg", cv2.imread(str(photo_path(p))))[1].tobytes()
            for p in ("chelsea", "coffee", "rocket")
        ]
        self.models: list = []
        self.tensor_outputs: list = []  # logits of the same tensor: they change at a swap
        self.errors: list = []
        self.size = 32
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._images, daemon=True),
            threading.Thread(target=self._images, daemon=True),
            threading.Thread(target=self._tensors, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _images(self) -> None:
        h = httpclient.InferenceServerClient(f"127.0.0.1:{self.info['http']}")
        k = 0
        while not self.stop.is_set():
            inp = httpclient.InferInput("image", [1, 1], "BYTES")
            inp.set_data_from_numpy(np.array([[self.blobs[k % 3]]], dtype=np.object_))
            k += 1
            try:
                row = json.loads(h.infer("tiny_image", [inp]).as_numpy("result")[0][0])
                self.models.append(row["model"])
            except Exception as exc:  # noqa: BLE001 - every failure is the test's finding
                self.errors.append(f"image: {exc}")

    def _tensors(self) -> None:
        g = grpcclient.InferenceServerClient(f"127.0.0.1:{self.info['grpc']}")
        while not self.stop.is_set():
            size = self.size
            if size is None:  # the input size is changing: no tensor request now
                time.sleep(0.01)
                continue
            x = np.full((1, 3, size, size), 0.5, np.float32)
            try:
                self.tensor_outputs.append(
                    g.infer("tiny", _inputs(grpcclient, x)).as_numpy("logits")
                )
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"tensor: {exc}")
            time.sleep(0.005)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)


def _settled(info, done: int, timeout: float = 90) -> dict:
    """GET /model once ``done`` swaps and refusals were made and none is under way."""
    url = f"http://127.0.0.1:{info['edgert']}/model"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            code, m = _json_http("GET", url)
        except OSError:
            if info["proc"].poll() is not None:
                raise AssertionError(info["proc"].stdout.read()) from None
            raise
        if code == 200 and m["swaps"] + m["refusals"] >= done and not m["busy"]:
            return m
        time.sleep(0.2)
    raise AssertionError(f"no swap settled: {m}")


def _stubs(pid: int) -> list:
    from edgert.apps.processes import cmdline

    return [p for p in _descendants(pid) if b"triton_python_backend_stub" in cmdline(p)]


def test_a_new_version_is_swapped_in_through_triton_while_requests_go_on(tmp_path):
    """`edgert serve` takes new versions of a bundle while clients keep sending image and tensor
    requests: by SIGHUP (the bundle symlink replaced), then by POST /model to one with another
    input size; Triton serves version 2 then 3, no request fails, every image answer names the
    model that made it, the old version's Python stubs are gone and the candidates a
    --swap-check refuses (a corrupt bundle, one whose classes are rotated) leave the model in
    use serving; paths outside --allow-models are 403."""
    root = tmp_path / "models"
    a = classifier_bundle(root / "a", size=32)
    noisy = _variant(a, root / "a2", lambda w: w + 0.01)
    other_size = classifier_bundle(root / "b", size=24)
    rotated = _variant(a, root / "rotated", lambda w: np.roll(w, 1, axis=0))
    corrupt = root / "corrupt" / "tiny.edgert"
    shutil.copytree(a, corrupt)
    (corrupt / "model.onnx").write_bytes(b"not an onnx file")
    link = tmp_path / "current.edgert"
    link.symlink_to(a)
    (edgert,) = free_ports(1)
    info = start(
        link,
        "tiny",
        *("--edgert-metrics-port", edgert, "--model-endpoint", "--swap-check"),
        *("--allow-models", root),
    )
    info["edgert"] = edgert
    proc = info["proc"]
    clients = None
    try:
        stubs = _stubs(proc.pid)
        assert len(stubs) == 2  # tiny and tiny_image, one instance each
        clients = _Clients(info)
        time.sleep(3)  # images for the check
        first = _settled(info, 0)["models"]["tiny"]
        assert first["triton_version"] == 1 and first["path"] == str(link)
        # 1. SIGHUP with the symlink replaced atomically, as deployment tools do
        tmp_link = tmp_path / "next.edgert"
        tmp_link.symlink_to(noisy)
        os.replace(tmp_link, link)
        proc.send_signal(signal.SIGHUP)
        m = _settled(info, 1)
        assert m["swaps"] == 1 and m["refusals"] == 0, m
        assert m["models"]["tiny"]["triton_version"] == 2 and m["last"]["check"]["agreement"] >= 0.9
        second = m["models"]["tiny"]["label"]
        # 2. bad candidates: refused in one sentence each, version 2 goes on
        for n, (bad, why) in enumerate(
            ((corrupt, "corrupt"), (rotated, "agrees with the model in use on")), start=2
        ):
            code, said = _json_http(
                "POST", f"http://127.0.0.1:{edgert}/model", {"bundle": str(bad)}
            )
            assert code == 202, said
            m = _settled(info, n)
            assert m["refusals"] == n - 1 and m["models"]["tiny"]["triton_version"] == 2, m
            assert why in m["last"]["reason"], m["last"]
        code, said = _json_http(
            "POST", f"http://127.0.0.1:{edgert}/model", {"bundle": str(a.parent.parent.parent)}
        )
        assert code == 403 and "--allow-models" in said["error"], said
        # 3. POST /model: another input size (24 px), forced past the check
        clients.size = None
        time.sleep(1)
        code, said = _json_http(
            "POST", f"http://127.0.0.1:{edgert}/model", {"bundle": str(other_size), "force": True}
        )
        assert code == 202, said
        m = _settled(info, 4)
        assert m["swaps"] == 2 and m["models"]["tiny"]["triton_version"] == 3, m
        clients.size = 24
        time.sleep(2)
        third = m["models"]["tiny"]["label"]
        h = httpclient.InferenceServerClient(f"127.0.0.1:{info['http']}")
        assert h.is_model_ready("tiny", "3") and not h.is_model_ready("tiny", "1")
        assert not h.is_model_ready("tiny", "2")
        assert h.get_model_metadata("tiny")["inputs"][0]["shape"] == [-1, 3, 24, 24]
        clients.close()
        assert clients.errors == [], clients.errors[:5]
        seen = list(dict.fromkeys(clients.models))
        assert seen == [first["label"], second, third], seen  # each answer names its model
        deadline = time.monotonic() + 30
        while len(_stubs(proc.pid)) != 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        now = _stubs(proc.pid)
        assert len(now) == 2 and not set(now) & set(stubs), (stubs, now)  # the old ones are gone
        with urllib.request.urlopen(f"http://127.0.0.1:{edgert}/metrics") as r:
            text = r.read().decode()
        assert re.search(r'edgert_model_info\{.*triton_version="3".*\} 1', text), text
        assert re.search(r"^edgert_model_swaps_total 2", text, re.M)
        assert re.search(r"^edgert_model_swap_refusals_total 2", text, re.M)
    finally:
        if clients is not None:
            clients.close()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in out, out
    assert "model: tiny is now" in out and "refused" in out, out


def test_model_endpoint_needs_edgert_port_and_a_loopback_host(tmp_path):
    bundle = classifier_bundle(tmp_path / "b", size=16)
    proc = run_cli("serve", bundle, "--model-endpoint")
    assert_user_error(proc, "--model-endpoint", "--edgert-metrics-port")
    proc = run_cli(
        "serve", bundle, "--model-endpoint", "--edgert-metrics-port", "9", "--host", "0.0.0.0"
    )
    assert_user_error(proc, "--model-endpoint", "loopback")


def test_watch_model_swaps_when_the_bundle_path_changes(tmp_path):
    """--watch-model: the bundle symlink replaced, Triton serves version 2 within seconds, without
    a signal or a request (the swap's sentence printed; the old version freed)."""
    a = classifier_bundle(tmp_path / "a", size=16)
    b = _variant_of(a, tmp_path / "b")
    link = tmp_path / "current.edgert"
    link.symlink_to(a)
    info = start(link, "tiny", "--watch-model")
    proc = info["proc"]
    try:
        h = httpclient.InferenceServerClient(f"127.0.0.1:{info['http']}")
        assert h.is_model_ready("tiny", "1") and not h.is_model_ready("tiny", "2")
        stubs = _stubs(proc.pid)
        nxt = tmp_path / "next.edgert"
        nxt.symlink_to(b)
        os.replace(nxt, link)
        deadline = time.monotonic() + 60
        both = lambda: all(h.is_model_ready(n, "2") for n in ("tiny", "tiny_image"))  # noqa: E731
        while not both() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert both() and not h.is_model_ready("tiny", "1")
        jpeg = photo_path("chelsea").read_bytes()
        inp = httpclient.InferInput("image", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[jpeg]], dtype=np.object_))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # tiny_image may still be switching
            row = json.loads(h.infer("tiny_image", [inp]).as_numpy("result")[0][0])
            if row["model"].endswith(_hash_of(b)):
                break
            time.sleep(0.2)
        assert row["model"].endswith(_hash_of(b)), row
        deadline = time.monotonic() + 30  # version 1's stubs exit, then it is freed
        while set(_stubs(proc.pid)) & set(stubs) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "(was tiny@" in out and "--watch-model)" in out and "version 1 freed" in out, out


def _variant_of(a, folder):
    """A retrained copy of the 16-px test classifier, named tiny like it."""
    from edgert.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "labels.txt").write_text("cat\ndog\nbird\n")
    return export_model(
        str(a / "model.onnx"),
        folder / "tiny.edgert",
        name="tiny",
        task="classify",
        labels=folder / "labels.txt",
        preprocess={"resize": "resize_crop", "size": "16x16", "mean": "0.5,0.5,0.5"},
    ).bundle


def _hash_of(bundle) -> str:
    from edgert.apps.swap.core import model_info

    return model_info(bundle)["hash"]


def test_an_encoder_is_served_with_its_vectors_and_a_broken_one_is_refused(tmp_path):
    """An embed bundle: NAME_image's JSON carries each image's unit vector (size, the encoder's
    norm) as edgert's own model gives it, NAME the raw vectors; a collapsed encoder is refused
    by the load's health check, in one sentence, before anything is served."""
    import cv2

    from tests.embed_models import SAID, encoder_bundle

    bundle = encoder_bundle(tmp_path, "healthy")
    jpeg = cv2.imencode(".png", cv2.imread(str(photo_path("coffee"))))[1].tobytes()
    info = start(bundle, "healthy")
    try:
        h = httpclient.InferenceServerClient(f"127.0.0.1:{info['http']}")
        inp = httpclient.InferInput("image", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[jpeg]], dtype=np.object_))
        out = h.infer("healthy_image", [inp])
        row = json.loads(out.as_numpy("result")[0][0])
    finally:
        info["proc"].send_signal(signal.SIGTERM)
        info["proc"].wait(timeout=30)
    with load_task_model(bundle) as model:
        picture = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
        expected = model(picture).embedding
    assert row["results"]["size"] == 8
    np.testing.assert_allclose(row["results"]["vector"], expected.vector, atol=1e-5)
    assert row["results"]["norm"] == pytest.approx(expected.norm, rel=1e-5)
    raw = out.as_numpy("v")[0]
    np.testing.assert_allclose(raw / np.linalg.norm(raw), expected.vector, atol=1e-5)
    broken = encoder_bundle(tmp_path, "collapsed")
    http, grpc, metrics = free_ports(3)
    proc = run_cli(
        "serve",
        broken,
        "--http-port",
        http,
        "--grpc-port",
        grpc,
        "--metrics-port",
        metrics,
        timeout=120,
    )
    assert_user_error(proc, SAID["collapsed"], "refusing to load it")


def test_a_collapsed_encoder_is_refused_at_the_swap_and_the_encoder_in_use_serves(tmp_path):
    """POST /model to an encoder whose vectors are nearly all the same: the candidate's load runs
    the health check, the swap is refused with its sentence, version 1 goes on serving."""
    from tests.embed_models import SAID, encoder_bundle

    root = tmp_path / "models"
    healthy = encoder_bundle(root / "a", "healthy")
    collapsed = encoder_bundle(root / "b", "collapsed", name="healthy")  # a new version of it
    (edgert,) = free_ports(1)
    info = start(
        healthy,
        "healthy",
        *("--edgert-metrics-port", edgert, "--model-endpoint", "--allow-models", root),
    )
    info["edgert"] = edgert
    try:
        url = f"http://127.0.0.1:{edgert}/model"
        code, said = _json_http("POST", url, {"bundle": str(collapsed)})
        assert code == 202, said
        m = _settled(info, 1)
        assert m["swaps"] == 0 and m["refusals"] == 1, m
        assert SAID["collapsed"] in m["last"]["reason"], m["last"]
        h = httpclient.InferenceServerClient(f"127.0.0.1:{info['http']}")
        inp = httpclient.InferInput("image", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[photo_path("coffee").read_bytes()]], dtype=np.object_))
        row = json.loads(h.infer("healthy_image", [inp]).as_numpy("result")[0][0])
        assert row["results"]["size"] == 8 and row["model"].startswith("healthy@")
    finally:
        info["proc"].send_signal(signal.SIGTERM)
        info["proc"].wait(timeout=30)
