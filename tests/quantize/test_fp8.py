"""FP8 (E4M3) Q/DQ: `edgert build --precision fp8` on digits_cnn, gated on ONNX Runtime (which runs
opset-19 FP8 Q/DQ on a CPU), in TensorRT's form, and run by the runtime."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from edgert.runtime.engine import Engine
from tests.conftest import digits_built, digits_logits


@pytest.fixture(scope="module")
def digits_fp8(tmp_path_factory):
    return digits_built(tmp_path_factory.mktemp("f8"), "fp8")


def test_fp8_model_is_tensorrt_form(digits_fp8):
    bundle, report = digits_fp8
    model = onnx.load(str(bundle / "model.fp8.onnx"))
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 19
    inits = {i.name: i for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    qdq = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert qdq
    for n in qdq:
        assert inits[n.input[1]].data_type == TensorProto.FLOAT  # FP32 scales
        zp = inits[n.input[2]]
        assert zp.data_type == TensorProto.FLOAT8E4M3FN and not any(zp.raw_data)  # all 0
    for node in (n for n in model.graph.node if n.op_type in ("Conv", "Gemm")):
        w_dq, x_dq = producers[node.input[1]], producers[node.input[0]]
        assert w_dq.op_type == "DequantizeLinear" and x_dq.op_type == "DequantizeLinear"
        assert inits[w_dq.input[0]].data_type == TensorProto.FLOAT8E4M3FN  # weights stored in FP8
        out_channels = inits[w_dq.input[0]].dims[0]
        assert numpy_helper.to_array(inits[w_dq.input[1]]).shape == (out_channels,)  # per channel
        assert numpy_helper.to_array(inits[x_dq.input[1]]).shape == ()  # per-tensor activations
        if len(node.input) > 2:
            assert inits[node.input[2]].data_type == TensorProto.FLOAT  # FP32 bias
        for consumer in model.graph.node:  # never quantized at the output
            if node.output[0] in consumer.input:
                assert consumer.op_type != "QuantizeLinear"
    m = json.loads((bundle / "manifest.json").read_text())
    q = m["quantization"]["fp8"]
    assert q["passed"] and q["holdout"]["accuracy_drop"] <= 0.01 and m["hashes"]["model.fp8.onnx"]
    assert q["quantized_nodes"] == q["quantizable_nodes"] and "8.9" in q["requires"]
    assert set(q["preparation"]["candidates"]) == {
        "none",
        "bias",
    }  # bias correction for FP8 rounding
    assert report.engine["built"] is False  # no TensorRT here


def test_an_fp8_onnx_from_elsewhere_runs_too(digits_fp8, tmp_path):
    """An FP8 Q/DQ file loaded directly under another name: ONNX Runtime's fusions would reject
    its FP8 zero points, so the runtime sees what it holds and runs it unfused."""
    from edgert.export.zoo import digits_cnn

    bundle, _ = digits_fp8
    other = tmp_path / "digits_fp8_from_elsewhere.onnx"
    other.write_bytes((bundle / "model.fp8.onnx").read_bytes())
    x = digits_cnn.normalise(digits_cnn.dataset()[2][:32])
    with Engine.load(other, backend="onnxruntime") as engine:
        got = engine.infer(x)["logits"]
    with Engine.load(bundle, backend="onnxruntime", precision="fp8") as engine:
        want = engine.infer(x)["logits"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_runtime_runs_the_fp8_model(digits_fp8):
    from edgert.export.zoo import digits_cnn

    bundle, _ = digits_fp8
    _, _, x_test, y_test = digits_cnn.dataset()
    x = digits_cnn.normalise(x_test)
    with Engine.load(bundle, backend="onnxruntime", precision="fp8") as engine:
        assert "model.fp8.onnx" in engine.backend_reason
    logits = digits_logits(bundle, x, precision="fp8")
    ref = digits_logits(bundle, x, precision="fp32")
    assert (logits.argmax(1) == y_test).mean() >= 0.95
    assert (logits.argmax(1) == ref.argmax(1)).mean() >= 0.98


def test_fp8_with_fp16_outside_it_for_tensorrt_11(digits_fp8):
    """model.fp8.fp16.onnx (what TensorRT 11, strongly typed, builds FP8 from on Thor): the FP8
    model's weights and ranges with FP16 scales and FP16 everywhere outside FP8, FP32 I/O, gated
    like the FP8 model; ONNX Runtime runs it (unfused) as accurately."""
    from edgert.export.zoo import digits_cnn
    from edgert.runtime.bundle import sha256_file

    bundle, report = digits_fp8
    variant = report.quantization["fp16_variant"]
    assert variant["written"] and variant["file"] == "model.fp8.fp16.onnx"
    assert variant["holdout"]["cosine"] > 0.99 and variant["holdout"]["accuracy_drop"] <= 0.01
    path = bundle / "model.fp8.fp16.onnx"
    assert json.loads((bundle / "manifest.json").read_text())["hashes"][path.name] == sha256_file(
        path
    )
    q16, q32 = onnx.load(str(path)), onnx.load(str(bundle / "model.fp8.onnx"))
    onnx.checker.check_model(q16, full_check=True)
    assert q16.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    inits = {i.name: i for i in q16.graph.initializer}
    producers = {o: n for n in q16.graph.node for o in n.output}
    for n in q16.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            assert inits[n.input[1]].data_type == TensorProto.FLOAT16
            assert inits[n.input[2]].data_type == TensorProto.FLOAT8E4M3FN
        if n.op_type in ("Conv", "Gemm"):
            assert (
                producers[n.input[0]].op_type == producers[n.input[1]].op_type == "DequantizeLinear"
            )
            if len(n.input) > 2:
                assert inits[n.input[2]].data_type == TensorProto.FLOAT16  # FP16 outside FP8

    def fp8_weights(model):
        dq = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
        found = {i.name: i for i in model.graph.initializer}
        return [found[n.input[0]] for n in dq if n.input[0] in found]

    assert len(fp8_weights(q16)) == len(fp8_weights(q32)) > 0
    assert all(w.data_type == TensorProto.FLOAT8E4M3FN for w in fp8_weights(q16))
    _, _, x_test, y_test = digits_cnn.dataset()
    x = digits_cnn.normalise(x_test)
    out = {
        name: digits_logits(bundle / name, x) for name in ("model.fp8.fp16.onnx", "model.fp8.onnx")
    }
    top1 = {k: v.argmax(1) for k, v in out.items()}
    assert (top1["model.fp8.fp16.onnx"] == top1["model.fp8.onnx"]).mean() >= 0.99
    assert (top1["model.fp8.fp16.onnx"] == y_test).mean() >= 0.95
