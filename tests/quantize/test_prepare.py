"""INT8 preparations on real ONNX models run by ONNX Runtime: activation equalisation into depthwise
convolutions (the FP32 model computes the same, the per-tensor scale fits every channel, INT8 gets
closer to FP32), bias correction (the mean shift of weight rounding is removed), the MSE
calibration threshold, and the build keeping what measures best."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgert.quantize import equalize, evaluate, gate, int8, ranges


def block_model(ceiling: float | None = 6.0, gemm_bias: bool = True):
    """x[N,3,16,16] -> Conv 3->8 (channel gains 1e-2..4) -> ReLU6 (or ReLU) -> depthwise 3x3
    -> ReLU -> GlobalAveragePool -> Flatten -> Gemm 8->5."""
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.4
    w1 *= np.geomspace(0.01, 4.0, 8).astype(np.float32)[:, None, None, None]  # disparate channels
    b1 = rng.uniform(0.0, 0.2, 8).astype(np.float32) * np.geomspace(0.01, 4.0, 8).astype(np.float32)
    w2 = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
    b2 = rng.standard_normal(8).astype(np.float32) * 0.1
    wg = rng.standard_normal((5, 8)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1")]
    if ceiling is None:
        nodes.append(helper.make_node("Relu", ["c1"], ["a1"], name="act1"))
    else:
        nodes += [
            helper.make_node(
                "Constant", [], ["lo"], value=numpy_helper.from_array(np.array(0.0, np.float32))
            ),
            helper.make_node(
                "Constant", [], ["hi"], value=numpy_helper.from_array(np.array(ceiling, np.float32))
            ),
            helper.make_node("Clip", ["c1", "lo", "hi"], ["a1"], name="act1"),
        ]
    nodes += [
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=8, name="dw"),
        helper.make_node("Relu", ["c2"], ["a2"], name="act2"),
        helper.make_node("GlobalAveragePool", ["a2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node(
            "Gemm", ["f", "wg", "bg"] if gemm_bias else ["f", "wg"], ["y"], transB=1, name="fc"
        ),
    ]
    inits = [
        numpy_helper.from_array(v, k)
        for k, v in {"w1": w1, "b1": b1, "w2": w2, "b2": b2, "wg": wg}.items()
    ]
    if gemm_bias:
        inits.append(numpy_helper.from_array(np.zeros(5, np.float32), "bg"))
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(2).uniform(0, 1, (96, 3, 16, 16)).astype(np.float32)


def int8_cosine(model, data) -> float:
    nodes = ranges.quantizable_nodes(model)
    stats = ranges.collect(model, data[:64], ranges.activation_inputs(model, nodes))
    q = int8.quantize(model, stats.thresholds("minmax"), data[:8])
    assert not int8.check_structure(q)
    ref, got = evaluate.run(model, data[64:]), evaluate.run(q, data[64:])
    return float(gate.cosine_rows(ref["y"], got["y"]).mean())


@pytest.mark.parametrize("ceiling", [6.0, 0.5, None])
def test_equalisation_keeps_fp32_and_fills_the_per_tensor_scale(data, ceiling):
    """ReLU6 (and a ceiling the large channels do reach, and plain ReLU) stay exact."""
    model = block_model(ceiling)
    eq, report = equalize.equalize(model, data[:64])
    assert report["pairs"] == 1 and report["gain_max"][0] > 10
    ref, got = evaluate.run(model, data), evaluate.run(eq, data)
    assert np.allclose(ref["y"], got["y"], rtol=1e-4, atol=1e-5)  # the same function
    before = equalize.channel_stats(model, data[:64], ["a1"])["a1"][0]
    after = equalize.channel_stats(eq, data[:64], ["a1"])["a1"][0]
    top = before.max()
    assert top / before.min() > 25  # ranges 1:25+; after: each up to the top, gain capped
    assert np.allclose(after, np.minimum(top, before * equalize.MAX_GAIN), rtol=1e-3)
    assert int8_cosine(eq, data) > int8_cosine(model, data)  # INT8 closer to FP32


def test_bias_correction_removes_the_mean_shift_of_weight_rounding(data):
    model = block_model(gemm_bias=False)  # the Gemm gets a bias of its own
    corrected, report = equalize.correct_bias(model, data[:64])
    assert report["layers"] == 3 and report["max_shift"] > 0
    assert "fc_corrected_bias" in {i.name for i in corrected.graph.initializer}

    # the weights INT8 will store, in FP32 arithmetic: only the rounding differs
    def rounded(m):
        out = onnx.ModelProto()
        out.CopyFrom(m)
        for init in out.graph.initializer:
            if init.name in ("w1", "w2", "wg"):
                w = numpy_helper.to_array(init)
                init.CopyFrom(
                    numpy_helper.from_array(equalize.fake_quantize_per_channel(w), init.name)
                )
        return out

    ref = evaluate.run(model, data)["y"]
    plain = evaluate.run(rounded(model), data)["y"]
    fixed = evaluate.run(rounded(corrected), data)["y"]
    shift_plain = np.abs((plain - ref).mean(0)).max()
    shift_fixed = np.abs((fixed - ref).mean(0)).max()
    assert shift_fixed < 0.5 * shift_plain
    # nodes kept in higher precision get no correction
    skipped, report = equalize.correct_bias(model, data[:64], skip={"conv1", "dw", "fc"})
    assert report == {"layers": 0}


def test_mse_threshold_clips_a_lone_outlier():
    hist = np.zeros(ranges.BINS, np.int64)
    hist[: ranges.BINS // 20] = 100_000  # ten million values up to 5 % of the maximum...
    hist[-1] = 1  # ...and one far outlier
    stats = ranges.ActivationStats({"t": 100.0}, {"t": hist}, 1)
    assert stats.thresholds("mse")["t"] < 20.0 < stats.thresholds("minmax")["t"]


def test_build_keeps_the_preparation_that_measures_best(tmp_path, data):
    from edgert.export import export_model
    from edgert.quantize import build
    from edgert.runtime.errors import ModelError

    onnx.save(block_model(), tmp_path / "block.onnx")
    bundle = export_model(str(tmp_path / "block.onnx"), tmp_path / "b.edgert").bundle
    np.savez(tmp_path / "calib.npz", x=data)
    report = build(
        bundle, "int8", calib=str(tmp_path / "calib.npz"), holdout_size=24, gate_rules="off"
    )
    prep = report.quantization["preparation"]
    scores = {k: v["cosine"] for k, v in prep["candidates"].items()}
    assert prep["kept"] == max(scores, key=scores.get) and "equalize" in prep["kept"]
    assert scores["equalize"] > scores["none"]
    q = onnx.load(str(bundle / "model.int8.onnx"))
    assert "Min" in {n.op_type for n in q.graph.node}  # ReLU6 became Min(ReLU(x), 6 g)
    only = build(
        bundle,
        "int8",
        calib=str(tmp_path / "calib.npz"),
        holdout_size=24,
        gate_rules="off",
        prepare="none",
    )
    assert set(only.quantization["preparation"]["candidates"]) == {"none"}
    slow = build(
        bundle,
        "int8",
        calib=str(tmp_path / "calib.npz"),
        holdout_size=24,
        gate_rules="off",
        prepare="none,equalize+adaround",
    )
    assert set(slow.quantization["preparation"]["candidates"]) == {"none", "equalize+adaround"}
    with pytest.raises(ModelError, match="unknown --prepare 'cle'"):
        build(bundle, "int8", calib=str(tmp_path / "calib.npz"), prepare="cle")


def test_adaptive_rounding_lowers_layer_error_and_stays_on_the_int8_grid(data):
    from edgert.quantize import adaround

    model = block_model()
    nodes = ranges.quantizable_nodes(model)
    stats = ranges.collect(model, data[:64], ranges.activation_inputs(model, nodes))
    th = stats.thresholds("minmax")
    settings = adaround.Settings(iterations=150, samples=64, batch=16)
    rounded, report = adaround.adaround(model, data[:64], th, settings)
    assert report["layers"] == 3 and report["flipped"] > 0
    # the INT8 model of the learned rounding is closer to FP32 on data it did not learn from
    assert 1 - int8_cosine(rounded, data) < 0.8 * (1 - int8_cosine(model, data))
    # the weights sit on each channel's INT8 grid: the Q/DQ model stores exactly these values
    q = int8.quantize(rounded, th, data[:8])
    inits = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    for name in ("w1", "w2", "wg"):
        w = numpy_helper.to_array(next(i for i in rounded.graph.initializer if i.name == name))
        stored = inits[f"{name}_quantized"].astype(np.float32)
        scale = inits[f"{name}_scale"].reshape(-1, *[1] * (w.ndim - 1))
        assert np.allclose(stored * scale, w, rtol=0, atol=1e-6 * np.abs(w).max())
    nearest = equalize.fake_quantize_per_channel(numpy_helper.to_array(model.graph.initializer[0]))
    assert not np.array_equal(nearest, numpy_helper.to_array(rounded.graph.initializer[0]))


def test_fallback_gives_kept_nodes_their_own_weights_and_bias_back(data):
    from edgert.quantize import evaluate as ev_mod
    from edgert.quantize import qdq_search

    model = block_model()
    ref = ev_mod.run(model, data[64:80])
    prep = qdq_search.choose_preparation(
        model,
        data[:64],
        data[64:80],
        ref,
        "generic",
        "minmax",
        ("equalize+bias+adaround",),
        lambda s: None,
    ).best
    assert prep.name == "equalize+bias+adaround" and set(prep.report) == {
        "equalize",
        "bias",
        "adaround",
    }
    rebuilt = prep.rebuild(data[:64], ["dw"])

    def init(m, name):
        return numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == name))

    assert np.array_equal(init(rebuilt, "w2"), init(prep.base, "w2"))  # kept: equalized, unrounded
    assert np.array_equal(init(rebuilt, "b2"), init(prep.base, "b2"))  # ... and uncorrected
    assert np.array_equal(init(rebuilt, "w1"), init(prep.model, "w1"))  # quantized: learned
    assert not np.array_equal(init(rebuilt, "w1"), init(prep.base, "w1"))


def _stats(model, data):
    return ranges.collect(
        model, data[:64], ranges.activation_inputs(model, ranges.quantizable_nodes(model))
    )


@pytest.mark.parametrize("ceiling", [6.0, None])
def test_shift_keeps_fp32_and_uses_all_int8_levels(data, ceiling):
    """The depthwise conv's input (after ReLU6 / ReLU, zero padding: a border map) and the Gemm's
    (pooled ReLU) are moved to the middle of their ranges: the same FP32 function, Q/DQ still in
    TensorRT form with the shifted inputs' scales pinned to half their threshold, and INT8 (with
    bias correction, as the shift preparations run) closer to FP32 than without the shift."""
    from edgert.quantize import shift

    model = equalize.equalize(block_model(ceiling), data[:64])[0]
    th = _stats(model, data).thresholds("minmax")
    shifted, report, pins = shift.shift_activations(model, th, data[:1])
    assert report == {"shifted": 2, "with_border_terms": 1, "skipped_dynamic_size": 0}
    assert {n.op_type for n in shifted.graph.node} >= {"Sub", "Add", "MatMul"}
    # the border terms are products of constants: never quantized, never a node to fall back
    names = [n.name for n in ranges.quantizable_nodes(model)]
    assert [n.name for n in ranges.quantizable_nodes(shifted)] == names
    ref, got = evaluate.run(model, data), evaluate.run(shifted, data)
    assert np.allclose(ref["y"], got["y"], rtol=1e-4, atol=1e-4)  # the same function
    assert sorted(pins.values()) == sorted([th["a1"] / 2, th["f"] / 2])
    stats = shift.pinned(_stats(shifted, data), pins)
    assert all(stats.thresholds(m)[t] == c for m in ranges.METHODS for t, c in pins.items())
    q = int8.quantize(shifted, stats.thresholds("minmax"), data[:8])
    assert not int8.check_structure(q) and sorted(int8.quantized_nodes(q)) == sorted(names)
    inits = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    scales = {
        n.input[0]: float(inits[n.input[1]]) for n in q.graph.node if n.op_type == "QuantizeLinear"
    }
    for t, c in pins.items():
        assert scales[t] == pytest.approx(c / 127, rel=1e-6)  # [-c, c] on all 255 levels

    def error(m, pins=None):  # with bias correction, which also takes back the shift's share
        m = equalize.correct_bias(m, data[:64])[0]  # of weight rounding (c * sum(W_q - W))
        th = shift.pinned(_stats(m, data), pins or {}).thresholds("minmax")
        qm = int8.quantize(m, th, data[:8], only=["dw", "fc"])  # the layers whose inputs moved
        return 1 - float(gate.cosine_rows(ref["y"], evaluate.run(qm, data)["y"]).mean())

    assert error(shifted, pins) < 0.8 * error(model)


def test_shift_leaves_padded_convolutions_of_an_any_size_model(data):
    """Without a fixed height and width no border map fits every input: only the Gemm's input is
    shifted, and the model still computes the same."""
    from edgert.quantize import shift

    model = block_model()
    for d, name in zip(
        model.graph.input[0].type.tensor_type.shape.dim[2:], ("H", "W"), strict=True
    ):
        d.ClearField("dim_value")
        d.dim_param = name
    shifted, report, _ = shift.shift_activations(
        model, _stats(model, data).thresholds("minmax"), data[:1]
    )
    assert report == {"shifted": 1, "with_border_terms": 0, "skipped_dynamic_size": 1}
    assert np.allclose(
        evaluate.run(model, data)["y"], evaluate.run(shifted, data)["y"], rtol=1e-4, atol=1e-4
    )


def test_build_with_shift(tmp_path, data):
    from edgert.export import export_model
    from edgert.quantize import build

    onnx.save(block_model(), tmp_path / "block.onnx")
    bundle = export_model(str(tmp_path / "block.onnx"), tmp_path / "b.edgert").bundle
    np.savez(tmp_path / "calib.npz", x=data)
    report = build(
        bundle,
        "int8",
        calib=str(tmp_path / "calib.npz"),
        holdout_size=24,
        gate_rules="off",
        prepare="equalize+bias,equalize+shift+bias",
    )
    prep = report.quantization["preparation"]
    assert set(prep["candidates"]) == {"equalize+bias", "equalize+shift+bias"}
    assert (
        prep["candidates"]["equalize+shift+bias"]["cosine"]
        > prep["candidates"]["equalize+bias"]["cosine"]
    )
    assert prep["kept"] == "equalize+shift+bias" and prep["shift"]["shifted"] == 2
    q = onnx.load(str(bundle / "model.int8.onnx"))
    assert "Sub" in {n.op_type for n in q.graph.node} and not int8.check_structure(q)
