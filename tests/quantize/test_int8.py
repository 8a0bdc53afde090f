"""INT8: Q/DQ structure in TensorRT form, digits accuracy, the gate and the automatic fallback."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from edgert.export import export_model
from edgert.quantize import GateFailed, build
from edgert.quantize import gate as gate_mod
from edgert.runtime.engine import Engine
from tests.conftest import ROOT, assert_user_error, run_cli

MODELS_PY = ROOT / "tests" / "export" / "models.py"


@pytest.fixture(scope="module")
def digits_int8(tmp_path_factory):
    bundle = export_model(
        "zoo:digits_cnn", tmp_path_factory.mktemp("d") / "digits.edgert", dynamic_batch=True
    ).bundle
    report = build(bundle, "int8", calib_size=300, holdout_size=200)
    return bundle, report


def test_qdq_structure_is_tensorrt_form(digits_int8):
    bundle, _ = digits_int8
    model = onnx.load(str(bundle / "model.int8.onnx"))
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 13
    inits = {i.name: i for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    qdq = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert qdq
    for n in qdq:
        assert inits[n.input[1]].data_type == onnx.TensorProto.FLOAT  # FP32 scales
        zp = numpy_helper.to_array(inits[n.input[2]])
        assert zp.dtype == np.int8 and not zp.any()  # symmetric: all zero points 0
    convs = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm")]
    for conv in convs:
        w_dq = producers[conv.input[1]]
        assert w_dq.op_type == "DequantizeLinear"
        weight = numpy_helper.to_array(inits[w_dq.input[0]])
        scale = numpy_helper.to_array(inits[w_dq.input[1]])
        assert weight.dtype == np.int8
        out_channels = weight.shape[0] if conv.op_type == "Conv" else None
        if out_channels:
            assert scale.shape == (out_channels,)  # per-channel weight scales
        if len(conv.input) > 2:
            assert (
                conv.input[2] in inits and inits[conv.input[2]].data_type == onnx.TensorProto.FLOAT
            )  # FP32 bias
        act = producers[conv.input[0]]
        assert (
            act.op_type == "DequantizeLinear"
        )  # activations quantized at the weighted op's input...
    consumers = {i for n in model.graph.node for i in n.input}
    for conv in convs:  # ...and never at its output
        for n in model.graph.node:
            if conv.output[0] in n.input:
                assert n.op_type != "QuantizeLinear"
    assert consumers


def test_digits_int8_accuracy_and_manifest(digits_int8):
    bundle, report = digits_int8
    m = json.loads((bundle / "manifest.json").read_text())
    q = m["quantization"]["int8"]
    hold = q["holdout"]
    assert hold["accuracy_fp32"] >= 0.95
    assert hold["accuracy_drop"] <= 0.01
    assert hold["cosine"] >= 0.99 and q["passed"]
    assert q["calibration"]["method"] in ("minmax", "percentile", "entropy", "mse")
    assert set(q["calibration"]["method_scores"]) == {"minmax", "percentile", "entropy", "mse"}
    prep = q["preparation"]
    assert set(prep["candidates"]) == {"none", "equalize", "bias", "equalize+bias"}
    best = max(prep["candidates"].values(), key=lambda c: (c["cosine"], c.get("agreement", 0)))
    assert prep["candidates"][prep["kept"]] == best  # what measured best is what was kept
    assert set(q["seconds"]) == {"prepare_and_calibrate", "gate_and_fallback"}
    assert "validation cosine" in q["calibration"]["method_why"]
    assert m["hashes"]["model.int8.onnx"]
    assert (bundle / "calibration" / "verify.npz").is_file()
    assert report.engine["built"] is False and "edgert build" in report.engine["on_device"]
    from edgert.export.zoo import digits_cnn

    _, _, x_test, y_test = digits_cnn.dataset()
    with Engine.load(bundle, backend="onnxruntime", precision="int8") as engine:
        x = digits_cnn.normalise(x_test)
        logits = np.concatenate(
            [engine.infer(x[i : i + 32])["logits"] for i in range(0, len(x), 32)]
        )
    assert (logits.argmax(1) == y_test).mean() >= 0.95


def test_sensitive_layer_passes_only_after_fallback(tmp_path):
    bundle = export_model(
        f"{MODELS_PY}:build_sensitive",
        tmp_path / "s.edgert",
        input_shape="1x3x16x16",
        dynamic_batch=True,
    ).bundle
    x = np.random.default_rng(0).uniform(0, 1, (120, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", input=x)
    report = build(bundle, "int8", calib=str(tmp_path / "calib.npz"), calib_method="minmax")
    q = report.quantization
    assert q["holdout_before_fallback"]["cosine"] < 0.99  # the plain INT8 model fails the gate
    assert q["kept_fp32"] == [q["fallback_steps"][0]["kept"]] and "conv2" in q["kept_fp32"][0]
    assert q["holdout"]["cosine"] >= 0.99 and q["passed"]


def test_forced_gate_failure_writes_nothing(tmp_path):
    bundle = export_model("zoo:digits_cnn", tmp_path / "d.edgert").bundle
    proc = run_cli(
        "build", bundle, "--precision", "int8", "--calib-size", "64", "--gate", "cosine>=0.9999999"
    )
    assert_user_error(proc, "misses the accuracy gate", "cosine", "nothing was written")
    assert not (bundle / "model.int8.onnx").exists()
    with pytest.raises(GateFailed):
        build(bundle, "int8", calib_size=64, gate_rules={"cosine": 1.5})


def test_gate_rules_parse():
    rules = gate_mod.parse_gate("cosine>=0.995, agreement>=0.9")
    assert (
        rules["cosine"] == 0.995
        and rules["agreement"] == 0.9
        and rules["top5_contains_fp32"] == 0.97
    )
    assert gate_mod.parse_gate("off") == {}
    with pytest.raises(ValueError):
        gate_mod.parse_gate("cosine<=0.9")
    with pytest.raises(ValueError):
        gate_mod.parse_gate("cosine=0.9")
