"""A secondary's swaps go through the primary's swap queue (fault battery 6, G7, G8, G22): a real
camera with a real secondary and real bundles POSTed over HTTP. A slow model POSTed, then a fast
one right after: the last POSTed runs (it used to be the last load to finish). A burst of POSTs:
one load at a time (the camera's threads do not grow with the requests), the requests that
waited superseded (said in events), the last POSTed runs. ``"force"`` is a JSON boolean, as the
primary's endpoint says."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.apps.test_hot_swap import _http, answered
from tests.apps.test_secondary import FPS, H, W, _running, _square
from tests.ports import free_ports
from tests.tiny import COLOURS, blob_detector_bundle, colour_classifier_bundle


def slow_colour_bundle(folder: Path, layers: int = 24, side: int = 1024) -> Path:
    """The colour classifier of tests/tiny.py (the same logits) with ``layers`` MatMuls of
    ``side`` x ``side`` added at 0 x their sum: about 100 MB of weights, so it loads (and is
    hashed) far slower than the plain one."""
    from edgert.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    w = (10 * (np.eye(3) - 1 / 3)).astype(np.float32)
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w"], ["l0"], transB=1),
        helper.make_node("Gemm", ["f", "p"], ["h0"]),
    ]
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array((rng.standard_normal((3, side)) * 0.01).astype(np.float32), "p"),
        helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
    ]
    for i in range(layers):
        m = (rng.standard_normal((side, side)) * 0.01).astype(np.float32)
        inits.append(numpy_helper.from_array(m, f"m{i}"))
        nodes.append(helper.make_node("MatMul", [f"h{i}", f"m{i}"], [f"h{i + 1}"]))
    nodes += [
        helper.make_node("ReduceSum", [f"h{layers}"], ["s"], keepdims=1),
        helper.make_node("Mul", ["s", "zero"], ["z"]),
        helper.make_node("Add", ["l0", "z"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "slow_colours",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
        initializer=inits,
    )
    path = folder / "colours.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    labels = folder / "labels.txt"
    labels.write_text("\n".join(COLOURS) + "\n")
    pre = {"resize": "stretch", "size": "16x16", "scale": 1 / 255}
    bundle = export_model(
        str(path), folder / "colours.edgert", task="classify", labels=labels, preprocess=pre
    ).bundle
    path.unlink()  # the bundle holds its own copy
    return bundle


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("secondary-swap")
    video = root / "long.mp4"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"mp4v"), FPS, (W, H))
    for t in range(600):  # two squares to and fro: their tracks live through the swaps
        img = np.zeros((H, W, 3), np.uint8)
        _square(img, 160 + 100 * np.sin(t / 20), 50, "red")
        _square(img, 160 - 100 * np.sin(t / 25), 190, "blue")
        writer.write(img)
    writer.release()
    models = root / "models"
    return {
        "det": blob_detector_bundle(root / "det"),
        "video": video,
        "models": models,
        "col": colour_classifier_bundle(models / "col"),
        "fast": colour_classifier_bundle(models / "fast"),
        "slow": slow_colour_bundle(models / "slow"),
    }


class Camera:
    """``edgert camera`` with the colour secondary and POST /model on a free port."""

    def __init__(self, m: dict, tmp_path: Path) -> None:
        port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{port}/model"
        self.events = tmp_path / "events.jsonl"
        self.proc = _running(
            m["det"],
            m["video"],
            "--loop",
            "--secondary",
            m["col"],
            "--metrics",
            f"127.0.0.1:{port}",
            "--model-endpoint",
            "--allow-models",
            m["models"],
            "--json",
            "--events",
            self.events,
            "--duration",
            "90",
        )
        answered(self.url, self.proc, ready=lambda got: got.get("secondary"))

    def post(self, bundle, **more) -> tuple[int, dict]:
        return _http("POST", self.url, {"secondary": "colours", "bundle": str(bundle), **more})

    def secondary(self) -> dict:
        return _http("GET", self.url)[1]["secondary"][0]

    def settled(self, requests: int, timeout: float = 60.0) -> dict:
        """GET /model's secondary once ``requests`` swaps were done or superseded."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.secondary()
            if got["swaps"] + got.get("superseded", 0) >= requests and not got.get("busy"):
                return got
            time.sleep(0.1)
        raise AssertionError(f"the secondary's swaps did not settle: {got}")

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/task"))

    def stop(self) -> tuple[dict, list]:
        if self.proc.poll() is None:
            self.proc.terminate()
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        events = [json.loads(x) for x in self.events.read_text().splitlines()]
        return json.loads(out), events


@pytest.mark.subprocess
def test_the_last_model_posted_runs_whatever_the_loads_take(models, tmp_path):
    cam = Camera(models, tmp_path)
    try:
        assert cam.post(models["slow"])[0] == 202
        code, said = cam.post(models["fast"])
        assert code == 202 and said["secondary"] == "colours", said
        cam.settled(2)
        time.sleep(1.0)  # a load still running on its own thread (as before) would end now
        assert cam.secondary()["bundle"] == str(models["fast"]), cam.secondary()
    finally:
        summary, events = cam.stop()
    assert summary["secondary"][0]["bundle"] == str(models["fast"]), summary["secondary"]
    swaps = [e for e in events if e["event"] in ("model_swap", "model_swap_superseded")]
    assert swaps[-1]["event"] == "model_swap" and swaps[-1]["bundle"] == str(models["fast"])


@pytest.mark.subprocess
def test_a_burst_of_posts_is_one_load_at_a_time_and_the_last_wins(models, tmp_path):
    cam = Camera(models, tmp_path)
    try:
        before = cam.threads()
        bundles = [models["slow"] if i % 2 else models["fast"] for i in range(30)]
        with ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(cam.post, bundles))
        assert all(code == 202 for code, _ in answers), answers
        during = cam.threads()  # every answer came: loads still queued take no thread
        assert cam.post(models["fast"], force=True)[0] == 202  # the last one POSTed
        assert during <= before + 4, (before, during)
        got = cam.settled(31, 120)
        after = cam.threads()
        assert got["bundle"] == str(models["fast"]), got
        assert got["superseded"] > 0 and got["swaps"] + got["superseded"] == 31, got
        code, said = cam.post(models["slow"], force="yes")  # as the primary's endpoint says
        assert code == 400 and "JSON boolean" in said["error"], said
    finally:
        summary, events = cam.stop()
    # one swap thread, whatever the burst: no thread a request (there were 31)
    assert after <= before + 4, (before, after)
    superseded = [e for e in events if e["event"] == "model_swap_superseded"]
    assert superseded and all(e["secondary"] == "colours" and e["by"] for e in superseded)
    assert summary["secondary"][0]["bundle"] == str(models["fast"])
