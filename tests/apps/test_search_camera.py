"""One embedding per track, search and re-identification through a real camera (issue 70): a real
detector (tests/tiny.blob_detector) finds two objects textured with real photos (the bundled
"chelsea" and "rocket", brightened for the detector) moving through a rendered video; a real
embedder built here (the crop at 4x4 pixels, its mean taken out: a "tiny image" vector) runs as
``--secondary``. Each track gets its vector in a ``track_embedding`` event and one row of the
store's embeddings; a second stream showing the same scene 1.5 s later links each of its tracks
to the first stream's track of the same object (``track_reid``), a field of both tracks.
``/api/search`` over real HTTP answers the track itself first for ``similar_to``, applies the
filters, ranks an uploaded picture's look-alike first, and refuses a body too big or not a
picture with one sentence."""

from __future__ import annotations

import http.client
import json
import sqlite3
import time

import cv2
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgert.runtime.sample_data import load_photo
from tests.conftest import run_cli
from tests.ports import free_ports
from tests.procs import running
from tests.tiny import blob_detector_bundle

W, H, FPS, FRAMES, DELAY = 320, 240, 10, 60, 15
SIDE = 60
TEXTURES = {"A": "chelsea", "B": "rocket"}


def texture(name: str) -> np.ndarray:
    """A real photo at the object's size, brightened so the blob detector scores it > 0.6."""
    img = cv2.resize(load_photo(name), (SIDE, SIDE), interpolation=cv2.INTER_AREA)
    return (165 + 0.35 * img).clip(0, 255).astype(np.uint8)


def scripted(t: int) -> list:
    """(object, cx, cy) in frame ``t``: A goes right along y=60, B left along y=180."""
    return [("A", 40 + 4 * t, 60), ("B", 280 - 4 * t, 180)] if 0 <= t < FRAMES else []


def render(path, delay: int = 0):
    """The scene, ``delay`` frames late (black before)."""
    tex = {k: texture(v) for k, v in TEXTURES.items()}
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), FPS, (W, H))
    for i in range(FRAMES + delay):
        img = np.zeros((H, W, 3), np.uint8)
        for obj, cx, cy in scripted(i - delay):
            x, y = cx - SIDE // 2, cy - SIDE // 2
            x0, x1 = max(0, x), min(W, x + SIDE)
            img[y : y + SIDE, x0:x1] = tex[obj][:, x0 - x : x1 - x]
        writer.write(img)
    writer.release()
    return path


def tiny_image_embedder(folder, name: str = "tiny", **export):
    """A real encoder without training: x [N, 3, 16, 16] -> 4x4 average pool -> 48 values,
    less their mean (a "tiny image" vector; edgert normalises it). ``export``: more of
    export_model's arguments (a text tower)."""
    from edgert.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    graph = helper.make_graph(
        [
            helper.make_node("AveragePool", ["x"], ["p"], kernel_shape=[4, 4], strides=[4, 4]),
            helper.make_node("Flatten", ["p"], ["f"]),
            helper.make_node("ReduceMean", ["f"], ["m"], axes=[1], keepdims=1),
            helper.make_node("Sub", ["f", "m"], ["v"]),
        ],
        "tiny_image",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, ["N", 48])],
    )
    path = folder / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    pre = {"resize": "stretch", "size": "16x16", "scale": 1 / 255}
    return export_model(
        str(path), folder / f"{name}.edgert", name=name, task="embed", preprocess=pre, **export
    ).bundle


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    root = tmp_path_factory.mktemp("search")
    return (
        blob_detector_bundle(root / "det"),
        tiny_image_embedder(root / "emb"),
        render(root / "a.mp4"),
        render(root / "b.mp4", DELAY),
    )


def _object(box, t: int):
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    near = [o for o, x, y in scripted(t) if abs(x - cx) < 35 and abs(y - cy) < 35]
    return near[0] if near else None


@pytest.mark.subprocess
def test_each_track_gets_one_embedding_and_the_late_stream_s_tracks_are_re_identified(
    scene, tmp_path
):
    det, emb, a, b = scene
    store = tmp_path / "s.db"
    proc = run_cli(
        *("camera", det, "--source", a, "--source", b, "--headless", "--conf", "0.6", "--json"),
        *("--secondary", f"{emb}:reid=0.9", "--store", f"{store}?batch_s=0.1"),
        *("--events", tmp_path / "ev.jsonl", "--jsonl", tmp_path / "fr.jsonl"),
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(x) for x in (tmp_path / "ev.jsonl").read_text().splitlines()]
    frames = [json.loads(x) for x in (tmp_path / "fr.jsonl").read_text().splitlines()]
    # the truth: which scripted object each (stream, track) followed
    truth: dict = {}
    for f in frames:
        for o in f.get("results") or []:
            if o.get("track_id") is not None:
                obj = _object(o["box"], f["frame"] - (DELAY if f["stream"] == 1 else 0))
                truth.setdefault((f["stream"], o["track_id"]), set()).add(obj)
    assert all(len(v) == 1 for v in truth.values()), truth
    vecs = [e for e in events if e["event"] == "track_embedding"]
    keyed = {(e["stream"], e["track_id"]) for e in vecs}
    assert len(keyed) >= 4 and keyed <= set(truth)  # both objects on both streams
    for e in vecs:
        assert e["secondary"] == "tiny" and e["dim"] == 48 and e["form"] == "int8"
        assert e["how"] == "mean" and 1 <= e["crops"] <= 3 and e["primary"] == "blob"
    (report,) = json.loads(proc.stdout)["secondary"]
    assert report["task"] == "embed" and report["most_attempts"] <= 3  # the embedder's budget
    links = [e for e in events if e["event"] == "track_reid"]
    assert links, "no track was re-identified"
    for e in links:  # every link joins the same object on the two streams
        mine, other = (e["stream"], e["track_id"]), (e["other_stream"], e["other_track_id"])
        assert mine[0] != other[0] and truth[mine] == truth[other], (e, truth)
        assert e["similarity"] >= 0.9
    linked = {(e["stream"], e["track_id"]) for e in links}
    linked |= {(e["other_stream"], e["other_track_id"]) for e in links}
    assert {next(iter(truth[k])) for k in linked} == {"A", "B"}
    conn = sqlite3.connect(store)
    rows = conn.execute(
        "SELECT t.stream, t.track_id, e.dim, e.form FROM embeddings e JOIN tracks t "
        "ON t.id = e.track"
    ).fetchall()
    assert {(s, t) for s, t, _, _ in rows} == keyed and len(rows) == len(keyed)
    assert {(d, f) for _, _, d, f in rows} == {(48, "int8")}
    kept = conn.execute(
        "SELECT a.stream, a.track_id, b.stream, b.track_id FROM reid r JOIN tracks a ON "
        "a.id = r.track JOIN tracks b ON b.id = r.other"
    ).fetchall()
    assert {(x[0], x[1], x[2], x[3]) for x in kept} == {
        (e["stream"], e["track_id"], e["other_stream"], e["other_track_id"]) for e in links
    }
    conn.close()


def _call(port: int, method: str, path: str, body: bytes | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request(method, path, body=body)
        r = conn.getresponse()
        data = r.read()
        return r.status, (json.loads(data) if data[:1] == b"{" else data.decode())
    finally:
        conn.close()


@pytest.mark.subprocess
def test_api_search_over_http_finds_the_track_itself_first_and_refuses_hostile_uploads(
    scene, tmp_path
):
    det, emb, a, b = scene
    port = free_ports(1)[0]
    store = tmp_path / "s.db"
    app = running(
        *("camera", det, "--source", a, "--source", b, "--loop", "--headless"),
        *("--conf", "0.6", "--secondary", emb, "--store", f"{store}?batch_s=0.2"),
        *("--output", f"http://127.0.0.1:{port}", "--duration", "90"),
    )
    try:
        deadline, tracks = time.monotonic() + 70, []
        while time.monotonic() < deadline and len(tracks) < 4:
            try:
                page = _call(port, "GET", "/api/events?limit=200")[1]["events"]
                tracks = sorted({e["track"] for e in page if e["kind"] == "track_embedding"})
            except (OSError, ValueError, KeyError, TypeError):
                pass
            time.sleep(0.5)
        assert len(tracks) >= 4, tracks
        for t in tracks[:4]:
            status, found = _call(port, "GET", f"/api/search?similar_to={t}&limit=3")
            assert status == 200 and found["results"][0]["track"]["id"] == t, found
            first = found["results"][0]
            assert first["similarity"] > 0.99
            assert first["track"] == _call(port, "GET", f"/api/tracks/{t}")[1]
            assert [r["similarity"] for r in found["results"]] == sorted(
                (r["similarity"] for r in found["results"]), reverse=True
            )
        camera = _call(port, "GET", f"/api/tracks/{tracks[0]}")[1]["camera"]
        status, found = _call(
            port, "GET", f"/api/search?similar_to={tracks[0]}&camera={camera}&label=blob"
        )
        assert status == 200 and found["results"]
        assert all(r["track"]["camera"] == camera for r in found["results"])
        status, found = _call(port, "GET", f"/api/search?similar_to={tracks[0]}&label=cat")
        assert status == 200 and found["results"] == []
        status, said = _call(port, "GET", "/api/search?similar_to=999999")
        assert status == 404 and "track 999999 has no embedding" in said["error"]
        status, said = _call(port, "GET", "/api/search?colour=red")
        assert status == 400 and "unknown filter 'colour'" in said["error"]
        # an uploaded picture (PNG, JPEG): a track of the object whose texture it is ranks first,
        # and each object's picture finds its own tracks, not the other's
        top = {}
        for obj, name in TEXTURES.items():
            framed = cv2.copyMakeBorder(texture(name), 6, 6, 6, 6, cv2.BORDER_CONSTANT)  # margin
            ok, pic = cv2.imencode(".png" if obj == "A" else ".jpg", framed)
            status, found = _call(port, "POST", "/api/search?limit=2", pic.tobytes())
            assert status == 200 and len(found["results"]) == 2, found
            assert found["results"][0]["similarity"] > 0.9, found["results"][0]["similarity"]
            top[obj] = {r["track"]["id"] for r in found["results"]}
        assert not top["A"] & top["B"], top
        # hostile uploads: too big, not a picture, a picture that does not decode
        status, said = _call(port, "POST", "/api/search", b"\x89PNG\r\n\x1a\n" + b"0" * 70000)
        assert status == 413 and "at most 64 KiB" in said
        status, said = _call(port, "POST", "/api/search", b"GIF89a not ours")
        assert status == 400 and said == {"error": "the body is not a JPEG or PNG picture"}
        status, said = _call(port, "POST", "/api/search", b"\xff\xd8\xff" + b"\x00" * 100)
        assert status == 400 and "OpenCV can decode" in said["error"]
        status, counts = _call(port, "GET", "/api/counts")
        assert status == 200 and counts["all"]["tracks"] >= 4
    finally:
        app.terminate()
        _, err = app.communicate(timeout=60)
    assert app.returncode in (0, 130, 143), err
