"""Parity passing and failing; the zoo MobileNetV2 bundle end to end; dynamic batch."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from edgert.export import export_model
from edgert.runtime import Bundle, ParityError
from edgert.runtime.engine import Engine
from edgert.runtime.sample_data import load_photo
from edgert.runtime.tasks.postprocess import classify
from tests.conftest import ROOT, assert_user_error, leftovers, run_cli

MODELS_PY = ROOT / "tests" / "export" / "models.py"


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    out = tmp_path_factory.mktemp("zoo") / "X.edgert"
    proc = run_cli("export", "zoo:mobilenet_v2", "-o", out, "--dynamic-batch", "--max-batch", "8")
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


@pytest.mark.subprocess
def test_mobilenet_bundle_parity_and_manifest(mobilenet):
    out, stdout = mobilenet
    m = json.loads((out / "manifest.json").read_text())
    assert m["format"] == "edgert-bundle/1" and m["task"] == "classify"
    assert m["parity"]["passed"] and m["parity"]["max_abs"] <= 1e-4
    labels = [c["label"] for c in m["parity"]["cases"]]
    assert (
        labels[:4]
        == [
            "random, batch 1",
            "random, batch 3",
            "random negated, batch 1",
            "uniform [0, 1), batch 1",
        ]
        and "real images" in labels[4]
    )
    assert m["inputs"] == [{"name": "input", "dtype": "float32", "shape": [-1, 3, 224, 224]}]
    assert m["outputs"] == [{"name": "logits", "dtype": "float32", "shape": [-1, 1000]}]
    pre = m["preprocessing"]
    assert (
        pre["resize"] == "resize_crop" and pre["resize_short"] == 256 and pre["size"] == [224, 224]
    )
    assert pre["mean"] == [0.485, 0.456, 0.406] and pre["channel_order"] == "RGB"
    assert len(m["labels"]) == 1000 and m["labels"][285] == "Egyptian cat"
    assert m["export"]["batch"] == {"min": 1, "opt": 1, "max": 8}
    for tool in ("torch", "onnx", "onnxruntime", "python", "edgert"):
        assert tool in m["tools"]
    model_bytes = (out / "model.onnx").read_bytes()
    import hashlib

    assert m["hashes"]["model.onnx"] == hashlib.sha256(model_bytes).hexdigest()
    props = {p.key: p.value for p in onnx.load(str(out / "model.onnx")).metadata_props}
    assert json.loads(props["edgert.preprocessing"]) == pre
    assert json.loads(props["edgert.labels"])[967] == "espresso"
    assert "max_abs" in stdout and "cosine" in stdout


@pytest.mark.subprocess
def test_mobilenet_classifies_real_photos(mobilenet):
    out, _ = mobilenet
    with Engine.load(out, backend="onnxruntime") as engine:
        batch, _ = engine.preprocessing.batch([load_photo("chelsea"), load_photo("coffee")])
        logits = engine.infer(batch)["logits"]
    top = classify(logits, engine.labels, 3)
    assert top[0][0].label == "Egyptian cat"
    assert top[1][0].label == "espresso" and top[1][0].score > 0.9


@pytest.mark.subprocess
def test_dynamic_batch_equals_per_sample(mobilenet):
    out, _ = mobilenet
    x = np.random.default_rng(0).standard_normal((5, 3, 224, 224)).astype(np.float32)
    with Engine.load(out) as engine:
        together = engine.infer(x)["logits"]
        alone = np.concatenate([engine.infer(x[i : i + 1])["logits"] for i in range(5)])
    np.testing.assert_allclose(together, alone, atol=1e-4, rtol=1e-4)


@pytest.mark.subprocess
def test_parity_failure_from_tolerance_leaves_nothing(tmp_path):
    proc = run_cli(
        "export",
        f"{MODELS_PY}:build",
        "--input-shape",
        "1x3x32x32",
        "--atol",
        "0",
        "--rtol",
        "0",
        "-o",
        tmp_path / "t.edgert",
    )
    # float32 kernels of PyTorch and ONNX Runtime never agree to the last bit on a conv net
    assert_user_error(
        proc, "differs from PyTorch beyond tolerance", "max abs error", "nothing was written"
    )
    assert list(tmp_path.iterdir()) == []


def test_parity_failure_from_a_drifting_model_api(tmp_path):
    with pytest.raises(ParityError) as info:
        export_model(f"{MODELS_PY}:build_drifting", tmp_path / "d.edgert", input_shape="1x4")
    report = info.value.report
    assert not report.passed and report.max_abs > 1e-2
    assert not (tmp_path / "d.edgert").exists() and leftovers(tmp_path) == []


def test_reexport_replaces_a_bundle_in_place(tmp_path):
    out = tmp_path / "b.edgert"
    export_model(f"{MODELS_PY}:build", out, input_shape="1x3x8x8")
    (out / "engines" / "stale.engine").write_bytes(b"old plan")
    export_model(f"{MODELS_PY}:build", out, input_shape="1x3x16x16")
    assert Bundle(out).manifest.inputs[0].shape == (1, 3, 16, 16)
    assert not (out / "engines" / "stale.engine").exists()
    assert leftovers(tmp_path) == []
