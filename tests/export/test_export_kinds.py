"""Every MODEL kind through the CLI (a real subprocess) and the Python API."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from edgert.export import export_model
from edgert.runtime import Bundle
from tests.conftest import ROOT, run_cli
from tests.export import models

MODELS_PY = ROOT / "tests" / "export" / "models.py"


def torch_out(module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def onnx_out(bundle, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def manifest(bundle) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


@pytest.mark.subprocess
def test_factory_file_with_weights_cli(tmp_path):
    torch.manual_seed(123)
    trained = models.SmallConv().eval()
    torch.save(trained.state_dict(), tmp_path / "w.pth")
    out = tmp_path / "small.edgert"
    proc = run_cli(
        "export",
        f"{MODELS_PY}:build",
        "--weights",
        tmp_path / "w.pth",
        "--input-shape",
        "1x3x16x16",
        "-o",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    assert "parity vs PyTorch" in proc.stdout
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    # the weights file, not the factory's own initialisation, is what got exported
    np.testing.assert_allclose(onnx_out(out, x), torch_out(trained, x), atol=1e-5)
    m = manifest(out)
    assert m["source"]["kind"] == "factory"
    assert len(m["hashes"]["weights"]) == 64
    assert m["inputs"] == [{"name": "input", "dtype": "float32", "shape": [1, 3, 16, 16]}]


def test_factory_module_api(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    result = export_model(
        "tests.export.models:build_two_heads", tmp_path / "two.edgert", input_shape="2x3x8x8"
    )
    m = manifest(result.bundle)
    assert [o["name"] for o in m["outputs"]] == ["output_0", "output_1"]
    assert m["outputs"][1]["shape"] == [2, 4, 8, 8]
    assert result.parity.passed and result.parity.cases[0].batch == 2


@pytest.mark.subprocess
def test_factory_module_cli(tmp_path):
    out = tmp_path / "m.edgert"
    proc = run_cli(
        "export",
        "tests.export.models:build",
        "--input-shape",
        "1x3x8x8",
        "-o",
        out,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert Bundle(out).manifest.inputs[0].shape == (1, 3, 8, 8)


@pytest.mark.subprocess
def test_torchscript_cli(tmp_path):
    module = models.build()
    scripted = torch.jit.trace(module, torch.randn(1, 3, 12, 12))
    scripted.save(str(tmp_path / "net.ts"))
    out = tmp_path / "ts.edgert"
    proc = run_cli(
        "export", tmp_path / "net.ts", "--input-shape", "1x3x12x12", "-o", out, "--dynamic-batch"
    )
    assert proc.returncode == 0, proc.stderr
    x = np.random.default_rng(1).standard_normal((3, 3, 12, 12)).astype(np.float32)
    np.testing.assert_allclose(onnx_out(out, x), torch_out(module, x), atol=1e-5)
    assert manifest(out)["source"]["kind"] == "torchscript"


@pytest.mark.subprocess
def test_exported_program_cli(tmp_path):
    module = models.build()
    ep = torch.export.export(module, (torch.randn(2, 3, 10, 10),))
    torch.export.save(ep, str(tmp_path / "net.pt2"))
    out = tmp_path / "pt2.edgert"
    proc = run_cli("export", tmp_path / "net.pt2", "-o", out)  # shape read from the program
    assert proc.returncode == 0, proc.stderr
    m = manifest(out)
    assert m["source"]["kind"] == "exported_program"
    assert m["inputs"][0]["shape"] == [2, 3, 10, 10]
    x = np.random.default_rng(2).standard_normal((2, 3, 10, 10)).astype(np.float32)
    np.testing.assert_allclose(onnx_out(out, x), torch_out(module, x), atol=1e-5)


@pytest.mark.subprocess
def test_pickle_needs_trust(tmp_path):
    module = models.build()
    torch.save(module, tmp_path / "whole.pt")
    refused = run_cli(
        "export", tmp_path / "whole.pt", "--input-shape", "1x3x8x8", "-o", tmp_path / "p.edgert"
    )
    assert refused.returncode == 2
    assert "--trust-pickle" in refused.stderr and "arbitrary code" in refused.stderr
    assert not (tmp_path / "p.edgert").exists()
    proc = run_cli(
        "export",
        tmp_path / "whole.pt",
        "--trust-pickle",
        "--input-shape",
        "1x3x8x8",
        "-o",
        tmp_path / "p.edgert",
        env={"PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert manifest(tmp_path / "p.edgert")["source"]["kind"] == "pickle"


@pytest.mark.subprocess
def test_onnx_file_is_wrapped(tmp_path):
    module = models.build()
    torch.onnx.export(
        module,
        (torch.randn(1, 3, 8, 8),),
        str(tmp_path / "m.onnx"),
        dynamo=False,
        opset_version=17,
        input_names=["images"],
        output_names=["scores"],
        dynamic_axes={"images": {0: "n"}, "scores": {0: "n"}},
    )
    out = tmp_path / "o.edgert"
    proc = run_cli("export", tmp_path / "m.onnx", "-o", out)
    assert proc.returncode == 0, proc.stderr
    m = manifest(out)
    assert m["inputs"] == [{"name": "images", "dtype": "float32", "shape": [-1, 3, 8, 8]}]
    assert m["outputs"][0]["name"] == "scores"
    assert m["parity"]["skipped"]
    assert m["export"]["opset"] == 17
    props = {p.key: p.value for p in onnx.load(str(out / "model.onnx")).metadata_props}
    assert props["edgert.format"] == "edgert-bundle/1"


def test_zoo_digits_cnn_api(tmp_path):
    result = export_model("zoo:digits_cnn", tmp_path / "d.edgert")
    m = result.manifest
    assert m["task"] == "classify" and m["labels"] == [str(i) for i in range(10)]
    assert m["metrics"]["test_accuracy"] >= 0.95
    assert m["metrics"]["test_samples"] == 359
    assert m["preprocessing"]["channel_order"] == "GRAY"
    assert result.parity.passed
    assert any(c.label.startswith("real images") for c in result.parity.cases)


@pytest.mark.subprocess
def test_zoo_unknown_name():
    proc = run_cli("export", "zoo:resnet9000")
    from tests.conftest import assert_user_error

    assert_user_error(proc, "no zoo model named", "mobilenet_v2")


@pytest.mark.parametrize(
    ("factory", "shape"), [("build_unet_block", (1, 3, 16, 16)), ("build_attention", (1, 6, 12))]
)
def test_residual_and_attention_models_match(tmp_path, factory, shape):
    module = getattr(models, factory)()
    result = export_model(
        f"{MODELS_PY}:{factory}", tmp_path / "b.edgert", input_shape=[shape], dynamic_batch=True
    )
    assert result.parity.passed
    assert [c.batch for c in result.parity.cases] == [1, 3, 1, 1]  # + negated, uniform
    assert result.parity.max_abs < 1e-4 and result.parity.min_cosine > 0.99999
    x = np.random.default_rng(5).standard_normal((4, *shape[1:])).astype(np.float32)
    np.testing.assert_allclose(
        onnx_out(result.bundle, x), torch_out(module, x), atol=1e-4, rtol=1e-3
    )


@pytest.mark.subprocess
@pytest.mark.parametrize("opset", [17, 21])
def test_an_onnx_past_jetpack_5s_opset_is_said_with_how_to_export_it_again(tmp_path, opset):
    """Issue 73: Ultralytics 8.4 exports opset 22 and edgert wrapped it without a word, though
    JetPack 5's TensorRT 8.5 parses opset 17 at most. Past 17, export says so and how to export
    again (the bundle is still made: JetPack 6 and 7 parse it); at 17 it says nothing."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset == 17 else 10
    onnx.save(model, tmp_path / "relu.onnx")
    proc = run_cli("export", tmp_path / "relu.onnx", "-o", tmp_path / "relu.edgert")
    assert proc.returncode == 0, proc.stderr
    said = "TensorRT 8.5 (JetPack 5) only up to 17" in proc.stdout
    assert said == (opset > 17), proc.stdout
    if said:
        assert "format=onnx opset=17" in proc.stdout
        assert any(
            "opset 21" in n for n in manifest(tmp_path / "relu.edgert")["export"]["described"]
        )
