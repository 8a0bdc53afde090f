"""The Python API and CLI conventions users of trtexec, Polygraphy and Ultralytics expect (issue:
API and structure). Real console script, real pipes, real package folders."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgert.runtime.sample_data import photo_path
from tests.conftest import ROOT, assert_user_error, run_cli
from tests.tiny import classifier_bundle, matmul_model


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return classifier_bundle(tmp_path_factory.mktemp("api"), size=32)


def console_script() -> str:
    exe = Path(sys.executable).parent / "edgert"
    return str(exe) if exe.is_file() else shutil.which("edgert")


def test_public_names():
    from edgert.runtime import Engine
    from edgert.runtime.engine import Engine as Same
    from edgert.runtime.tasks import load_task_model  # noqa: F401

    assert Engine is Same


def test_misspelt_engine_options_are_refused(tmp_path):
    from edgert.runtime import Engine, ModelError

    model = matmul_model(tmp_path / "m.onnx")
    with pytest.raises(ModelError, match="unknown option 'provder'; did you mean 'providers'"):
        Engine.load(model, provder=["CPUExecutionProvider"])
    with pytest.raises(ModelError, match="unknown option 'use_graph'"):
        Engine.load(model, backend="onnxruntime", use_graph=True)
    with Engine.load(model, intra_op_threads=1) as engine:  # a real option still works
        assert engine.infer(np.ones((1, 4), np.float32))["y"].shape == (1, 3)


def test_export_model_takes_a_module(tmp_path):
    torch = pytest.importorskip("torch")
    from edgert.export import export_model

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    result = export_model(net, tmp_path / "seq.edgert", input_shape=(1, 3, 16, 16))
    assert result.parity.passed
    assert result.manifest["source"]["kind"] == "module"
    assert result.manifest["name"] == "sequential"


@pytest.mark.subprocess
def test_console_script_finds_a_package_in_the_current_folder(tmp_path):
    pytest.importorskip("torch")
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(
        "import torch\ndef build():\n    return torch.nn.Conv2d(3, 4, 3)\n"
    )
    proc = subprocess.run(
        [console_script(), "export", "mypkg.models:build", "--input-shape", "1x3x16x16"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "models.edgert" / "manifest.json").is_file()


@pytest.mark.subprocess
def test_a_closed_pipe_ends_quietly(bundle):
    photos = " ".join(str(photo_path(p)) for p in ("chelsea", "coffee", "rocket") * 20)
    cmd = f"{console_script()} run {bundle} {photos} --json | head -1"
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert json.loads(proc.stdout)["results"]
    assert proc.stderr == "", proc.stderr


@pytest.mark.subprocess
def test_json_everywhere(bundle, tmp_path):
    bench = run_cli("bench", bundle, "--iterations", "5", "--warmup", "0", "--json")
    data = json.loads(bench.stdout)  # stdout is JSON only; progress went to stderr
    assert data["iterations"] == 5 and "ONNX Runtime copies and computes" in data["split_reason"]
    report = tmp_path / "b.json"
    run_cli("bench", bundle, "--iterations", "5", "--warmup", "0", "--json-file", report)
    assert json.loads(report.read_text())["iterations"] == 5
    assert json.loads(run_cli("cache", "list", bundle, "--json").stdout) == []
    triton = json.loads(run_cli("export-triton", bundle, "--repo", tmp_path / "r", "--json").stdout)
    assert "config.pbtxt" in triton["files"] and triton["model"] == "tiny"


@pytest.mark.subprocess
def test_verbosity_after_the_subcommand(bundle):
    quiet = run_cli("run", bundle, photo_path("chelsea"), "-q")
    assert quiet.returncode == 0 and quiet.stderr == ""
    verbose = run_cli("run", bundle, photo_path("chelsea"), "-v")
    assert "INFO" in verbose.stderr
    assert run_cli("run", bundle, photo_path("chelsea"), "--debug").returncode == 0
    assert run_cli("--debug", "run", bundle, photo_path("chelsea")).returncode == 0


@pytest.mark.subprocess
@pytest.mark.parametrize("command", ["run", "demo", "bench", "camera"])
def test_backend_and_precision_are_choices(bundle, command):
    args = [command, bundle, photo_path("chelsea")] if command == "run" else [command]
    if command in ("bench", "camera"):
        args = [command, bundle]
    proc = run_cli(*args, "--backend", "coreml")
    assert proc.returncode == 2 and "invalid choice: 'coreml'" in proc.stderr


def test_choices_match_the_runtime():
    from edgert.apps.argtypes import BACKENDS, PRECISIONS
    from edgert.runtime import engine

    assert BACKENDS == engine.BACKENDS and PRECISIONS == engine.PRECISIONS


def test_every_environment_variable_is_documented():
    used = set()
    for folder in ("runtime", "apps", "export", "quantize"):
        for path in (ROOT / folder).rglob("*.py"):
            used |= set(re.findall(r"EDGERT_[A-Z_]+", path.read_text()))
    doc = (ROOT / "docs" / "cli.md").read_text()
    assert used and all(f"`{v}`" in doc for v in used), used


def test_dev_video_is_a_camera_not_a_file():
    from edgert.apps.camera.sources import open_source
    from edgert.runtime.errors import SourceError

    with pytest.raises(SourceError, match="no such camera: /dev/video97"):
        open_source("/dev/video97")


def test_letterbox_defaults_to_bilinear(tmp_path):
    """(A detector: export now refuses a classifier's output described as a detector's.)"""
    from edgert.export import export_model
    from tests.tiny import blob_detector

    onnx_path = blob_detector(tmp_path / "d.onnx")
    manifest = export_model(
        str(onnx_path),
        tmp_path / "d.edgert",
        task="detect",
        preprocess={"resize": "letterbox"},
    ).manifest
    assert manifest["preprocessing"]["interpolation"] == "bilinear"
    kept = export_model(
        str(onnx_path),
        tmp_path / "e.edgert",
        task="detect",
        preprocess={"resize": "letterbox", "interpolation": "linear"},
    ).manifest
    assert kept["preprocessing"]["interpolation"] == "linear"


def _greedy_nms(boxes, scores, thr):
    """The textbook rule, written out here as the reference."""
    order = list(np.argsort(-scores, kind="stable"))
    keep = []
    while order:
        i = order.pop(0)
        keep.append(i)
        rest = []
        for j in order:
            lt = np.maximum(boxes[i, :2], boxes[j, :2])
            rb = np.minimum(boxes[i, 2:], boxes[j, 2:])
            inter = np.prod(np.clip(rb - lt, 0, None))
            area = lambda b: (b[2] - b[0]) * (b[3] - b[1])  # noqa: E731
            if inter / (area(boxes[i]) + area(boxes[j]) - inter) <= thr:
                rest.append(j)
        order = rest
    return np.array(keep)


def test_one_nms_keeps_the_same_boxes_as_the_textbook_rule():
    from edgert.runtime.tasks.detection import batched_nms, nms

    rng = np.random.default_rng(3)
    for n in (1, 5, 80, 300):
        c = rng.uniform(0, 300, (n, 2))
        boxes = np.column_stack([c, c + rng.uniform(5, 80, (n, 2))])
        scores = rng.uniform(0, 1, n)
        np.testing.assert_array_equal(nms(boxes, scores, 0.45), _greedy_nms(boxes, scores, 0.45))
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [0, 0, 10, 10]], float)
    kept = batched_nms(boxes, np.array([0.9, 0.8, 0.7]), np.array([0, 0, 1]), 0.5)
    assert sorted(kept.tolist()) == [0, 2]  # another class is never suppressed
    assert nms(np.zeros((0, 4)), np.zeros(0), 0.5).size == 0


@pytest.mark.subprocess
def test_wrong_camera_uri_is_reported_before_the_model_loads(tmp_path):
    proc = run_cli("camera", tmp_path / "no-such-model.edgert", "--source", tmp_path / "none.mp4")
    assert_user_error(proc, "none.mp4 does not exist")


def test_task_models_share_one_interface(bundle):
    from edgert.runtime.sample_data import load_photo
    from edgert.runtime.tasks import load_task_model

    with load_task_model(bundle, top_k=2) as model:
        assert model.task == "classify"
        result = model(load_photo("chelsea"))
        top = result.to_records()  # the typed result, and the JSON edgert writes of it
        assert len(result.classes) == 2 and result.classes[0].label == top[0]["label"]
        assert len(top) == 2 and {"label", "index", "score"} <= set(top[0])
    with pytest.raises(Exception, match="face-detection bundle"):
        load_task_model(bundle, task="faces")


@pytest.mark.subprocess
def test_auto_precision_runs_the_fastest_gated_model_on_a_cpu(tmp_path):
    """edgert build records batch-1 ONNX Runtime CPU latencies; "auto" runs the fastest."""
    from edgert.runtime import Engine
    from edgert.runtime.backends.onnxruntime import fastest_on_cpu

    assert fastest_on_cpu({"int8": {"fp32": 1.9, "int8": 5.9}}, {"model.int8.onnx"})[0] == "fp32"
    assert fastest_on_cpu({"int8": {"fp32": 5.0, "int8": 3.1}}, {"model.int8.onnx"})[0] == "int8"
    assert fastest_on_cpu({"int8": {"fp32": 5.0, "int8": 3.1}}, set())[0] == "fp32"  # unrecorded
    bundle = classifier_bundle(tmp_path, size=16)
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(0).random((80, 3, 16, 16), np.float32))
    proc = run_cli(
        "build",
        bundle,
        "--precision",
        "int8",
        "--calib",
        tmp_path / "cal.npz",
        "--holdout-size",
        "20",
        "--gate",
        "off",
    )
    assert proc.returncode == 0, proc.stderr
    manifest_path = bundle / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    speeds = manifest["quantization"]["int8"]["onnxruntime_cpu_ms"]
    assert speeds["fp32"] > 0 and speeds["int8"] > 0
    for fp32_ms, int8_ms, chosen in ((1.0, 9.0, "model.onnx"), (9.0, 1.0, "model.int8.onnx")):
        manifest["quantization"]["int8"]["onnxruntime_cpu_ms"] = {"fp32": fp32_ms, "int8": int8_ms}
        manifest_path.write_text(json.dumps(manifest))
        with Engine.load(bundle) as engine:
            assert engine.source.name == chosen
            assert "fastest gated model on ONNX Runtime CPU" in engine.backend_reason
