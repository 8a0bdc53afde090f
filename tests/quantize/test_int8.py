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
from tests.conftest import ROOT, assert_user_error, digits_built, digits_logits, run_cli

MODELS_PY = ROOT / "tests" / "export" / "models.py"


@pytest.fixture(scope="module")
def digits_int8(tmp_path_factory):
    return digits_built(tmp_path_factory.mktemp("d"), "int8")


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
    assert set(q["seconds"]) == {"prepare_and_calibrate", "gate_and_fallback", "fp16_variant"}
    assert "validation cosine" in q["calibration"]["method_why"]
    assert m["hashes"]["model.int8.onnx"]
    assert (bundle / "calibration" / "verify.npz").is_file()
    assert report.engine["built"] is False and "edgert build" in report.engine["on_device"]
    from edgert.export.zoo import digits_cnn

    _, _, x_test, y_test = digits_cnn.dataset()
    logits = digits_logits(bundle, digits_cnn.normalise(x_test), precision="int8")
    assert (logits.argmax(1) == y_test).mean() >= 0.95


def test_int8_with_fp16_outside_it_for_tensorrt_11(digits_int8):
    """model.int8.fp16.onnx: the same INT8 weights and ranges, FP16 scales (opset 19) and FP16
    everywhere else, FP32 I/O; the runtime runs it (unfused: ONNX Runtime's fusions get FP16
    Q/DQ wrong) as accurately as model.int8.onnx."""
    from edgert.export.zoo import digits_cnn
    from edgert.runtime.bundle import sha256_file

    bundle, report = digits_int8
    variant = report.quantization["fp16_variant"]
    assert variant["written"] and variant["holdout"]["cosine"] > 0.99
    path = bundle / "model.int8.fp16.onnx"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["hashes"]["model.int8.fp16.onnx"] == sha256_file(path)
    q16, q32 = onnx.load(str(path)), onnx.load(str(bundle / "model.int8.onnx"))
    onnx.checker.check_model(q16, full_check=True)
    assert next(o.version for o in q16.opset_import if o.domain in ("", "ai.onnx")) >= 19
    assert q16.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    inits = {i.name: i for i in q16.graph.initializer}
    producers = {o: n for n in q16.graph.node for o in n.output}
    for n in q16.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            assert inits[n.input[1]].data_type == onnx.TensorProto.FLOAT16
        if n.op_type in ("Conv", "Gemm"):  # Q/DQ straight into the layer: TensorRT fuses it
            assert (
                producers[n.input[0]].op_type == producers[n.input[1]].op_type == "DequantizeLinear"
            )
    weights = sorted(
        numpy_helper.to_array(i).tobytes()
        for i in q32.graph.initializer
        if i.data_type == onnx.TensorProto.INT8
    )
    assert weights == sorted(
        numpy_helper.to_array(i).tobytes()
        for i in q16.graph.initializer
        if i.data_type == onnx.TensorProto.INT8
    )
    _, _, x_test, y_test = digits_cnn.dataset()
    x = digits_cnn.normalise(x_test)
    out = {
        name: digits_logits(bundle / name, x)
        for name in ("model.int8.fp16.onnx", "model.int8.onnx")
    }
    agree = (out["model.int8.fp16.onnx"].argmax(1) == out["model.int8.onnx"].argmax(1)).mean()
    assert agree >= 0.99 and (out["model.int8.fp16.onnx"].argmax(1) == y_test).mean() >= 0.95


def test_an_fp16_variant_that_cannot_be_made_is_not_left_from_an_earlier_build(
    digits_int8, tmp_path
):
    """A model with a layer a million times smaller and the next one a million times larger
    (ReLU between: the same function) quantizes to INT8 as well as ever (FP32 scales), but its
    scales do not fit FP16: no variant, and the one an earlier build left is removed with its
    hash, not left for TensorRT 11 to build from."""
    from edgert.export.zoo import digits_cnn
    from edgert.runtime.bundle import sha256_file

    made, _ = digits_int8
    model = onnx.load(str(made / "model.onnx"))
    inits = {i.name: i for i in model.graph.initializer}
    consumers = {i: n for n in model.graph.node for i in n.input}
    first = next(
        n
        for n in model.graph.node
        if n.op_type == "Conv" and consumers[n.output[0]].op_type == "Relu"
    )
    second = consumers[consumers[first.output[0]].output[0]]
    assert second.op_type in ("Conv", "Gemm")
    for name, factor in ((first.input[1], 1e-6), (first.input[2], 1e-6), (second.input[1], 1e6)):
        scaled = numpy_helper.to_array(inits[name]) * np.float32(factor)
        inits[name].CopyFrom(numpy_helper.from_array(scaled.astype(np.float32), name))
    onnx.save(model, tmp_path / "tiny.onnx")
    bundle = export_model(str(tmp_path / "tiny.onnx"), tmp_path / "tiny.edgert").bundle
    # what an earlier build would have left: a variant and its hash
    stale = bundle / "model.int8.fp16.onnx"
    stale.write_bytes((made / "model.int8.fp16.onnx").read_bytes())
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["hashes"]["model.int8.fp16.onnx"] = sha256_file(stale)
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    np.savez(tmp_path / "calib.npz", input=digits_cnn.normalise(digits_cnn.dataset()[0][:300]))
    report = build(bundle, "int8", calib=str(tmp_path / "calib.npz"))
    assert report.quantization["passed"] and report.quantization["holdout"]["cosine"] > 0.99
    variant = report.quantization["fp16_variant"]
    assert not variant["written"] and "smaller than FP16 holds" in variant["why"]
    assert not stale.exists() and "model.int8.fp16.onnx" not in report.files
    assert (
        "model.int8.fp16.onnx" not in json.loads((bundle / "manifest.json").read_text())["hashes"]
    )


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


@pytest.mark.subprocess
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


@pytest.mark.subprocess
def test_calibration_images_of_several_sizes_for_an_any_size_model(tmp_path):
    """A bundle whose model takes images of any size (preprocessing size -1, resize none: a fully
    convolutional net) gets each image as it is; images of two sizes cannot be stacked into one
    calibration set, and the build says so instead of failing inside numpy."""
    import cv2
    from onnx import TensorProto, helper

    w = np.random.default_rng(0).normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H", "W"])],
        [numpy_helper.from_array(w, "w")],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "fcn.onnx"
    )
    bundle = export_model(str(tmp_path / "fcn.onnx"), tmp_path / "fcn.edgert").bundle
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["preprocessing"] = {"size": [-1, -1], "resize": "none", "scale": 0.00392156862745098}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "imgs").mkdir()
    for i in range(20):
        cv2.imwrite(
            str(tmp_path / "imgs" / f"{i}.png"), np.full((48 + (i % 2) * 8, 64, 3), i, np.uint8)
        )
    proc = run_cli("build", bundle, "--precision", "int8", "--calib", tmp_path / "imgs")
    assert_user_error(proc, "give images of one size")
    for i in range(1, 20, 2):  # one size: it calibrates
        cv2.imwrite(str(tmp_path / "imgs" / f"{i}.png"), np.full((48, 64, 3), i, np.uint8))
    proc = run_cli("build", bundle, "--precision", "int8", "--calib", tmp_path / "imgs")
    assert proc.returncode == 0, proc.stderr


def _nan_model(path, value: float):
    """A Conv whose output gets a NaN (or an infinity) added in one channel: the FP32 model
    itself outputs it, whatever its input."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).normal(size=(4, 3, 3, 3)).astype(np.float32)
    c = np.zeros((1, 4, 1, 1), np.float32)
    c[0, 1, 0, 0] = value
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Add", ["y", "c"], ["out"], name="add"),
        ],
        "nan",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 4, 8, 8])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(c, "c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.subprocess
def test_a_model_that_outputs_nan_is_named_not_numpy_s_range_error(tmp_path):
    """Round 6, G22: a model whose FP32 outputs hold NaN failed INT8 with numpy's "supplied range
    of [0.0, nan] is not finite", naming no tensor. Now one sentence says the FP32 model itself
    outputs NaN (or infinite values) in which tensor; exit 2, nothing written."""
    from edgert.export import export_model
    from edgert.quantize import build
    from edgert.runtime.errors import ModelError

    np.savez(tmp_path / "calib.npz", x=np.random.default_rng(0).uniform(0, 1, (80, 3, 8, 8)))
    for name, value in (("nan", np.nan), ("inf", np.inf)):
        onnx_path = _nan_model(tmp_path / f"{name}.onnx", value)
        bundle = export_model(str(onnx_path), tmp_path / f"{name}.edgert").bundle
        before = (bundle / "manifest.json").read_text()
        if name == "nan":
            proc = run_cli(
                "build",
                bundle,
                "--precision",
                "int8",
                "--calib",
                tmp_path / "calib.npz",
                "--calib-size",
                "40",
                "--prepare",
                "none",
            )
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1, proc.stderr
            message = lines[0]
        else:
            with pytest.raises(ModelError) as err:
                build(
                    bundle, "int8", calib=str(tmp_path / "calib.npz"), calib_size=40, prepare="none"
                )
            message = str(err.value)
        what = "NaN" if name == "nan" else "infinite values"
        assert f"the FP32 model itself outputs {what} in 'out' on the calibration data" in message
        assert (bundle / "manifest.json").read_text() == before


@pytest.mark.subprocess
def test_a_calibration_npz_that_is_a_fifo_is_refused(tmp_path):
    """`--calib x.npz` that is a FIFO made np.load wait for ever (the G15 sibling): one sentence,
    exit 2, at once."""
    import os

    bundle = export_model(str(_nan_model(tmp_path / "m.onnx", 0.0)), tmp_path / "m.edgert").bundle
    os.mkfifo(tmp_path / "calib.npz")
    proc = run_cli(
        "build", bundle, "--precision", "int8", "--calib", tmp_path / "calib.npz", timeout=60
    )
    assert_user_error(proc, "calib.npz is not a regular file (a FIFO)")
