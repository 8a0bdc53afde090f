"""A running camera takes a new model (issue 39): real bundles (ONNX Runtime), a real camera
process, real HTTP to its /model route, real signals. 100 swaps between two classifiers of
different input sizes on two streams lose no frame and label every result; a swap to other
classes; a detector swap keeps its tracks and counts; corrupt, wrong-task and disagreeing
candidates are refused while the old model serves; a forced collapse is rolled back; two
requests at once and a SIGHUP during a swap are done in order; the endpoint is off unless asked
for and refuses paths outside its folders."""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.apps.test_gate import quiet_scene
from tests.conftest import ROOT, assert_user_error, run_cli
from tests.ports import free_ports
from tests.procs import SCENE, edgert, rss_mb
from tests.tiny import blob_detector, blob_detector_bundle, classifier_bundle, image_classifier


def _http(method: str, url: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            code, text = r.status, r.read()
    except urllib.error.HTTPError as exc:
        code, text = exc.code, exc.read()
    try:
        return code, json.loads(text)
    except ValueError:  # "not found": no route (yet)
        return code, {"text": text.decode(errors="replace")}


_STARTED: list = []


@pytest.fixture(autouse=True)
def _no_camera_left():
    """A test that fails half-way leaves no camera running (they have no --duration)."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def answered(url: str, proc, seconds: float = 60, ready=None) -> None:
    """Returns once GET ``url`` answers 200 (and ``ready(body)`` holds: a second stage listed
    once it attached, after the port first answers); AssertionError with the process's stderr
    when it ends first, or when ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            code, body = _http("GET", url)
            if code == 200 and (ready is None or ready(body)):
                return
        except OSError:
            pass
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read())
        time.sleep(0.1)
    raise AssertionError(f"the camera never answered GET {url} within {seconds:g} s")


class Camera:
    """`edgert camera` in its own process with its metrics port (GET /model)."""

    def __init__(self, bundle, *args: str, source=("synthetic://",), endpoint=True) -> None:
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}/model"
        sources = [a for s in source for a in ("--source", str(s))]
        self.proc = subprocess.Popen(
            edgert(
                *("camera", bundle, *sources, "--headless", "--metrics", f"127.0.0.1:{self.port}"),
                *(["--model-endpoint"] if endpoint else []),
                *("--json", *args),
            ),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _STARTED.append(self.proc)
        answered(self.url, self.proc)

    def model(self) -> dict:
        return _http("GET", self.url)[1]

    def swap(self, bundle, force: bool = False) -> tuple[int, dict]:
        return _http("POST", self.url, {"bundle": str(bundle), "force": force})

    def settled(self, done: int, timeout: float = 60) -> dict:
        """GET /model once ``done`` requests (swaps, refusals) are through and nothing waits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.model()
            if m["swaps"] + m["refusals"] >= done and not m["busy"]:
                return m
            time.sleep(0.02)
        raise AssertionError(f"not settled after {timeout} s: {self.model()}")

    def rss_mb(self) -> float:
        return rss_mb(self.proc.pid)

    def stop(self) -> dict:
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode in (0, 143), err
        return json.loads(out)


def _records(path: Path) -> list:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return [r for r in lines if "frame" in r and "results" in r]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """A (16 px input) and B (24 px, another name): classifiers of the same three classes."""
    root = tmp_path_factory.mktemp("swap")
    return classifier_bundle(root / "a", name="a"), classifier_bundle(root / "b", "b", size=24)


@pytest.mark.subprocess
def test_a_hundred_swaps_lose_no_frame_and_label_every_result(bundles, tmp_path):
    a, b = bundles
    frames = tmp_path / "frames.jsonl"
    cam = Camera(
        a,
        *("--jsonl", frames, "--rollback-window", "0", "--allow-models", a.parent.parent),
        source=("synthetic://", "synthetic://"),
    )
    rss = {}
    labels = set()
    for i in range(100):
        code, said = cam.swap(b if i % 2 == 0 else a)
        assert code == 202, said
        m = cam.settled(i + 1)
        labels.add(m["model"]["label"])
        time.sleep(0.04)  # a frame or so on each model, at 30 fps
        if i + 1 in (20, 100):
            rss[i + 1] = cam.rss_mb()
    summary = cam.stop()
    assert summary["model"]["swaps"] == 100 and summary["model"]["refusals"] == 0
    assert summary["frames_dropped"] == 0, summary["streams"]
    records = _records(frames)
    by_stream = collections.defaultdict(list)
    for r in records:
        by_stream[r["stream"]].append(r)
    assert sorted(by_stream) == [0, 1]
    for rs in by_stream.values():
        assert [r["frame"] for r in rs] == list(range(len(rs)))  # none dropped, none twice
        assert {r["model"] for r in rs} == labels and len(labels) == 2  # each labelled
        changes = sum(x["model"] != y["model"] for x, y in zip(rs, rs[1:], strict=False))
        assert changes >= 80, changes  # the swaps seen in each stream's results
    assert rss[100] - rss[20] < 25, rss  # the old models' sessions are freed


def _other_classes(folder: Path) -> Path:
    from edgert.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    onnx_path = image_classifier(folder / "c.onnx", size=20, classes=5)
    labels = folder / "labels.txt"
    labels.write_text("apple\npear\nplum\nfig\nkiwi\n")
    pre = {"resize": "resize_crop", "size": "20x20"}
    return export_model(
        str(onnx_path), folder / "c.edgert", task="classify", labels=labels, preprocess=pre
    ).bundle


@pytest.mark.subprocess
def test_a_model_of_other_classes_and_input_size_takes_over(bundles, tmp_path):
    a, _ = bundles
    c = _other_classes(tmp_path / "c")
    frames = tmp_path / "frames.jsonl"
    cam = Camera(a, "--jsonl", frames, "--allow-models", tmp_path)
    time.sleep(1.0)
    assert cam.swap(c)[0] == 202
    assert cam.settled(1)["model"]["name"] == "c"
    time.sleep(1.0)
    cam.stop()
    records = _records(frames)
    last_a = max(i for i, r in enumerate(records) if r["model"].startswith("a@"))
    after = records[last_a + 1 :]
    assert after and all(r["model"].startswith("c@") for r in after)
    assert {r["results"][0]["label"] for r in after} <= {"apple", "pear", "plum", "fig", "kiwi"}
    assert {r["results"][0]["label"] for r in records[: last_a + 1]} <= {"cat", "dog", "bird"}


def _detector(folder: Path, height: int, width: int, scale: float = 1 / 255) -> Path:
    """A blob detector bundle; a tiny ``scale`` makes one that sees nothing (a collapse)."""
    from edgert.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    onnx_path = blob_detector(folder / "blobs.onnx", height, width)
    labels = folder / "labels.txt"
    labels.write_text("blob\n")
    pre = {"resize": "stretch", "size": f"{height}x{width}", "scale": scale}
    return export_model(
        str(onnx_path), folder / "blobs.edgert", task="detect", labels=labels, preprocess=pre
    ).bundle


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    folder = tmp_path_factory.mktemp("swapscene")
    return blob_detector_bundle(folder / "det"), quiet_scene(folder / "scene.mp4")


@pytest.mark.subprocess
def test_a_detector_swap_keeps_tracks_and_counts(scene, tmp_path):
    """The scene's two crossings with a swap to a retrained detector (the same class; here the
    same network exported again, so the run without a swap is known: one in, one out) while the
    first object crosses: the counts are those of a run without a swap, and track IDs go on from
    where they were (a new model does not start the tracks again)."""
    det, video = scene
    other = _detector(tmp_path / "other", 96, 128)
    events = tmp_path / "events.jsonl"
    cam = Camera(
        det,
        *SCENE,
        *("--events", events, "--allow-models", tmp_path, "--rollback-window", "0"),
        source=(video,),
    )
    # the file is read faster than real time: swap at once, while the first object crosses
    assert cam.swap(other)[0] == 202
    cam.settled(1)
    summary = cam.proc.communicate(timeout=120)[0]
    summary = json.loads(summary)
    assert summary["model"]["swaps"] == 1 and summary["model"]["model"]["name"] == "blobs"
    counts = summary["streams"][0]["counts"]["door"]
    assert (counts["in"], counts["out"]) == (1, 1), counts
    es = [json.loads(x) for x in events.read_text().splitlines()]
    starts = [e["track_id"] for e in es if e["event"] == "track_start"]
    assert starts == sorted(set(starts)) and len(starts) == 2, es
    assert [e["event"] for e in es if e["event"].startswith("model_")] == ["model_swap"]
    crossings = [e for e in es if e["event"] == "line_cross"]
    assert all("@" in e["model"] for e in crossings)


def _shuffled(a: Path, folder: Path) -> Path:
    """A's network with its class weights rotated (a bad export): the same classes, other
    answers."""
    from edgert.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(a / "model.onnx"))
    for init in model.graph.initializer:
        if init.name == "gw":
            w = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array(np.roll(w, 1, axis=0), "gw"))
    del model.metadata_props[:]
    onnx.save(model, str(folder / "shuffled.onnx"))
    labels = folder / "labels.txt"
    labels.write_text("cat\ndog\nbird\n")
    pre = {"resize": "resize_crop", "size": "16x16"}
    return export_model(
        str(folder / "shuffled.onnx"),
        folder / "shuffled.edgert",
        task="classify",
        labels=labels,
        preprocess=pre,
    ).bundle


@pytest.mark.subprocess
def test_bad_candidates_are_refused_and_the_old_model_serves(bundles, scene, tmp_path):
    a, b = bundles
    corrupt = tmp_path / "corrupt.edgert"
    shutil.copytree(a, corrupt)
    (corrupt / "model.onnx").write_bytes(b"not an onnx file")
    shuffled = _shuffled(a, tmp_path / "shuffled")
    cam = Camera(a, "--swap-check", "--allow-models", tmp_path, "--allow-models", b.parent)
    assert cam.swap(corrupt)[0] == 202
    m = cam.settled(1)
    assert m["refusals"] == 1 and m["model"]["name"] == "a", m
    assert m["last"]["event"] == "model_swap_refused" and "corrupt.edgert" in m["last"]["reason"]
    assert cam.swap(shuffled)[0] == 202
    m = cam.settled(2)
    assert m["refusals"] == 2 and m["model"]["name"] == "a", m
    assert "agrees with the model in use on" in m["last"]["reason"], m["last"]
    assert m["last"]["check"]["agreement"] < 0.9
    assert cam.swap(shuffled, force=True)[0] == 202  # forced past the check
    m = cam.settled(3)
    assert m["swaps"] == 1 and m["model"]["name"] == "shuffled" and m["last"]["forced"], m
    with urllib.request.urlopen(f"http://127.0.0.1:{cam.port}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    for line in (
        "edgert_model_swaps_total 1.0",
        "edgert_model_swap_refusals_total 2.0",
        "edgert_model_rollbacks_total 0.0",
    ):
        assert line in metrics.splitlines(), line
    assert re.search(r'^edgert_model_info\{.*name="shuffled".*\} 1\.0$', metrics, re.M), metrics
    summary = cam.stop()
    assert summary["frames_processed"] > 0 and summary["model"]["refusals"] == 2
    # a classifier for a run that tracks and counts: refused, the detector goes on
    det, video = scene
    cam = Camera(det, *SCENE, "--loop", "--allow-models", a.parent, source=(video,))
    assert cam.swap(a)[0] == 202
    m = cam.settled(1)
    assert m["refusals"] == 1 and "needs a detector" in m["last"]["reason"], m
    assert m["model"]["name"] == "blobs"
    cam.stop()


@pytest.mark.subprocess
def test_a_collapsed_model_is_rolled_back(scene, tmp_path):
    det, video = scene
    blind = _detector(tmp_path / "blind", 96, 128, scale=1 / 2550)  # sees nothing
    events = tmp_path / "events.jsonl"
    cam = Camera(
        det,
        *SCENE,
        *("--loop", "--events", events, "--allow-models", tmp_path, "--swap-check"),
        *("--rollback-window", "20"),
        source=(video,),
    )
    time.sleep(3.0)  # the model in use's rates: the scene loops several times
    assert cam.swap(blind)[0] == 202
    m = cam.settled(1)
    assert m["refusals"] == 1 and "F1" in m["last"]["reason"], m  # the check refuses it
    assert cam.swap(blind, force=True)[0] == 202
    m = cam.settled(2)
    assert m["swaps"] == 1 and m["model"]["path"] == str(blind), m
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and cam.model()["rollbacks"] == 0:
        time.sleep(0.2)
    m = cam.model()
    assert m["rollbacks"] == 1 and m["model"]["path"] == str(det), m
    assert "blob: 0.00 a frame" in m["last"]["reason"], m["last"]
    summary = cam.stop()
    es = [json.loads(x) for x in events.read_text().splitlines()]
    kinds = [e["event"] for e in es if e["event"].startswith("model_")]
    assert kinds == ["model_swap_refused", "model_swap", "model_rollback"], kinds
    assert summary["model"]["rollbacks"] == 1


@pytest.mark.subprocess
def test_two_requests_at_once_and_a_sighup_during_a_swap_are_done_in_order(bundles, tmp_path):
    a, b = bundles
    c = _other_classes(tmp_path / "c")
    current = tmp_path / "current"
    current.symlink_to(a)
    cam = Camera(current, "--allow-models", tmp_path, "--allow-models", a.parent.parent)
    assert cam.swap(b)[0] == 202 and cam.swap(c)[0] == 202  # two at once
    m = cam.settled(2)
    assert m["swaps"] == 2 and m["model"]["name"] == "c", m
    tmp = tmp_path / "next"
    tmp.symlink_to(b)
    os.replace(tmp, current)  # as deployment tools replace it: atomically
    assert cam.swap(a)[0] == 202
    cam.proc.send_signal(signal.SIGHUP)  # during that swap: the path is read after it
    m = cam.settled(4)
    assert m["swaps"] == 4 and m["model"]["name"] == "b", m
    assert m["last"]["requested_by"] == "SIGHUP"
    cam.proc.send_signal(signal.SIGHUP)  # the same bundle again: nothing to swap
    time.sleep(1.0)
    assert cam.model()["swaps"] == 4
    cam.stop()


@pytest.mark.subprocess
def test_watch_model_swaps_when_the_path_changes(bundles, tmp_path):
    a, b = bundles
    current = tmp_path / "current"
    current.symlink_to(a)
    cam = Camera(current, "--watch-model", endpoint=False)
    tmp = tmp_path / "next"
    tmp.symlink_to(b)
    os.replace(tmp, current)
    m = cam.settled(1, timeout=20)
    assert m["model"]["name"] == "b" and m["last"]["requested_by"] == "--watch-model", m
    cam.stop()


def test_a_bundle_replaced_while_the_first_model_loads_is_swapped_to(bundles, tmp_path):
    """--watch-model compares with the path as it was before the model in use was read from it:
    a deployment that replaces the bundle while the camera starts is a change, not one missed
    (the slot used to take its fingerprint after the load, and saw the new bundle as the old)."""
    from edgert.apps.swap.camera import Loaded, ModelSlot, SwapOptions, fingerprint, model_info
    from edgert.runtime.tasks import load_task_model

    a, b = bundles
    current = tmp_path / "current"
    current.symlink_to(a)
    info, seen = model_info(current), fingerprint(str(current))  # as the camera does
    model = load_task_model(current)
    tmp = tmp_path / "next"
    tmp.symlink_to(b)
    os.replace(tmp, current)  # replaced after the load began, before the slot exists
    said = []
    slot = ModelSlot(
        Loaded(model, info, str(current)),
        load_task_model,
        SwapOptions(watch=True, rollback_s=0, poll_s=0.1),
        say=said.append,
        seen=seen,
    ).start()
    try:
        deadline = time.monotonic() + 20
        while slot.swaps == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert slot.swaps == 1 and slot.current.info["name"] == "b", said
        time.sleep(0.5)  # polled again: the same bundle is no second swap
        assert slot.swaps == 1 and slot.report()["busy"] is False, said
    finally:
        slot.close()
        slot.current.close()


@pytest.mark.subprocess
def test_the_endpoint_is_off_unless_asked_for_and_keeps_to_its_folders(bundles, tmp_path):
    a, b = bundles
    cam = Camera(a, endpoint=False)
    code, said = cam.swap(b)
    assert code == 404 and "--model-endpoint" in said["error"], said
    cam.stop()
    cam = Camera(a)  # by default only the running bundle's own folder
    code, said = cam.swap(b)
    assert code == 403 and "--allow-models" in said["error"], said
    code, said = cam.swap(a.parent / ".." / ".." / Path(b).parent.name / b.name)
    assert code == 403, said  # .. does not lead out of it
    code, said = _http("POST", cam.url, None)
    assert code == 400 and "bundle" in said["error"], said
    # a body naming a secondary is never taken as the primary's swap (this camera runs none)
    code, said = _http("POST", cam.url, {"secondary": "attr", "bundle": str(a)})
    assert code == 404 and "runs no --secondary" in said["error"], said
    assert cam.model()["swaps"] == 0
    cam.stop()
    proc = run_cli("camera", a, "--headless", "--model-endpoint", "--max-frames", "5")
    assert_user_error(proc, "--model-endpoint answers on the --metrics port")


def _ready(port: int) -> tuple[int, dict]:
    return _http("GET", f"http://127.0.0.1:{port}/ready")


def _until_ready_changes(cam: Camera, timeout: float = 60) -> list:
    """/ready's answers, polled until it stops saying "checking" (the canary's verdict)."""
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, body = _ready(cam.port)
        seen.append((code, body))
        if code == 200 or "was not taken" in body.get("reason", ""):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"/ready never gave a verdict: {seen[-3:]}")


@pytest.mark.subprocess
def test_a_canary_is_ready_only_once_its_model_passed_the_check(bundles, tmp_path):
    """``--check-against PREVIOUS`` (issue 54: what gates a DaemonSet's rollout): the run starts
    on PREVIOUS and /ready says 503 "checking" while the new model runs beside it on live frames;
    a new version that agrees is taken and /ready says 200; one that disagrees is refused, /ready
    stays 503 with the check's reason, and the cameras go on with PREVIOUS."""
    a, _ = bundles
    newer = tmp_path / "a-v2.edgert"
    shutil.copytree(a, newer)  # the same network, another release of it
    manifest = json.loads((newer / "manifest.json").read_text())
    (newer / "manifest.json").write_text(json.dumps({**manifest, "version": "2"}))
    cam = Camera(newer, "--check-against", a, endpoint=False)
    seen = _until_ready_changes(cam)
    checking = [b for c, b in seen if c == 503 and "checking" in b.get("reason", "")]
    assert checking and checking[0]["serving"].startswith("a@"), seen[:3]
    assert seen[-1][0] == 200, seen[-1]
    m = cam.model()
    assert m["model"]["version"] == "2" and m["swaps"] == 1, m
    assert m["last"]["check"]["agreement"] == 1
    assert cam.stop()["frames_processed"] > 0

    shuffled = _shuffled(a, tmp_path / "shuffled")
    cam = Camera(shuffled, "--check-against", a, endpoint=False)
    code, body = _until_ready_changes(cam)[-1]
    assert code == 503 and "agrees with the model in use on" in body["reason"], body
    assert body["serving"].startswith("a@") and cam.model()["model"]["name"] == "a"
    time.sleep(1.0)  # it goes on serving with the model it started on, and stays not ready
    assert _ready(cam.port)[0] == 503
    summary = cam.stop()
    assert summary["frames_processed"] > 0 and summary["model"]["refusals"] == 1


@pytest.mark.subprocess
def test_a_canary_without_a_port_to_say_it_on_is_one_sentence(bundles):
    a, b = bundles
    proc = run_cli("camera", b, "--headless", "--max-frames", "2", "--check-against", a)
    assert_user_error(proc, "--check-against gives its verdict on /ready")


def test_a_canary_tries_again_when_its_check_could_not_judge(tmp_path, monkeypatch):
    """Too few live frames to check (a camera still connecting, a quiet gated scene) is not a
    verdict: the canary asks again after RETRY_S and /ready says it is still checking; a
    disagreement is final; once the new model served, a later swap to a third model does not
    make the pod unready, its own rollback does. The slot is a stand-in with the fields the
    canary reads (the real one runs in the tests above)."""
    import threading
    from types import SimpleNamespace

    from edgert.apps.swap.camera import Canary

    a = classifier_bundle(tmp_path / "a", name="a")
    asked = []
    old = SimpleNamespace(path="old.edgert", info={"n": "old"}, label="old@1")
    slot = SimpleNamespace(
        lock=threading.Lock(), current=old, last=None, busy=False, requests=[], on_tick=None
    )
    slot.request = lambda path, why: asked.append(why)
    canary = Canary(slot, str(a))
    canary.start()
    assert asked == ["--check-against"] and slot.on_tick is not None
    assert "checking" in canary()[1]["reason"]
    now = [1000.0]
    monkeypatch.setattr("edgert.apps.swap.camera.time.time", lambda: now[0])
    slot.last = {
        "event": "model_swap_refused",
        "reason": "only 2 live frames came within 30 s",
        "check": {"frames": 2, "judged": False},
        "time": now[0],
    }
    slot.on_tick()
    assert len(asked) == 1  # not yet: RETRY_S has not passed
    ok, body = canary()
    assert not ok and "checking" in body["reason"] and "only 2 live frames" in body["reason"]
    now[0] += Canary.RETRY_S
    slot.on_tick()
    assert asked == ["--check-against", "--check-against, attempt 2"]
    slot.last = {
        "event": "model_swap_refused",
        "reason": "agrees on 40% of 20 live frames",
        "check": {"agreement": 0.4},
        "time": now[0],
    }
    now[0] += 60
    slot.on_tick()
    assert len(asked) == 2  # a verdict is final
    assert "was not taken (agrees on 40%" in canary()[1]["reason"]
    new = SimpleNamespace(path=str(a), info=canary.info, label="a@2")
    slot.current = new
    assert canary() is None
    slot.current = SimpleNamespace(path="third.edgert", info={}, label="third@1")
    slot.last = {"event": "model_swap", "from": "a@2", "to": "third@1", "time": now[0]}
    assert canary() is None  # a deliberate swap later: not the canary's business
    slot.current = old
    slot.last = {"event": "model_rollback", "from": "a@2", "reason": "cat: 0.1 a frame"}
    assert "was rolled back (cat: 0.1 a frame)" in canary()[1]["reason"]
