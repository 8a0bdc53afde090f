"""Shifting activations bounded below, not only ReLU's (issue 71): a YOLOv8-style block of SiLU
(``x * sigmoid(x) >= -0.2785``), a split, a residual sum, a concatenation and a nearest upsampling,
built here as a real ONNX model and run by ONNX Runtime. Their bounds are found from the graph,
the inputs they feed are moved to the middle of ``[lo, T]``, the FP32 function is unchanged and
INT8 comes closer to FP32."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgert.quantize import equalize, evaluate, gate, int8, ranges, shift
from edgert.quantize.onnx_graph import Graph


def silu(x: str, out: str) -> list:
    return [
        helper.make_node("Sigmoid", [x], [f"{out}_sig"], name=f"{out}_sigmoid"),
        helper.make_node("Mul", [x, f"{out}_sig"], [out], name=f"{out}_mul"),
    ]


def silu_block(mode: str = "nearest"):
    """x[N,3,16,16] -> Conv 3->8 -> SiLU (a1) -> padded Conv 3x3 8->8 -> SiLU (a2) -> Split
    (s0, s1) ; Add(a1, a2) (res) ; Concat(s1, res) (cat) -> Resize x2 ``mode`` (up) -> Conv 1x1
    12->6 (y)."""
    rng = np.random.default_rng(3)
    weights = {
        "w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.6,
        "b1": rng.standard_normal(8).astype(np.float32) * 0.3,
        "w2": rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.25,
        "b2": rng.standard_normal(8).astype(np.float32) * 0.3,
        "w3": rng.standard_normal((6, 12, 1, 1)).astype(np.float32) * 0.4,
        "b3": np.zeros(6, np.float32),
        "split": np.array([4, 4], np.int64),
        "scales": np.array([1, 1, 2, 2], np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        *silu("c1", "a1"),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        *silu("c2", "a2"),
        helper.make_node("Split", ["a2", "split"], ["s0", "s1"], axis=1, name="split"),
        helper.make_node("Add", ["a1", "a2"], ["res"], name="residual"),
        helper.make_node("Concat", ["s1", "res"], ["cat"], axis=1, name="concat"),
        helper.make_node("Resize", ["cat", "", "scales"], ["up"], mode=mode, name="upsample"),
        helper.make_node("Conv", ["up", "w3", "b3"], ["y"], name="conv3"),
    ]
    graph = helper.make_graph(
        nodes,
        "silu_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6, 32, 32])],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(4).uniform(0, 1, (80, 3, 16, 16)).astype(np.float32)


def test_lower_bounds_follow_silu_through_splits_sums_concatenations_and_upsampling():
    gr = Graph(silu_block())
    assert shift.lower_bound(gr, "a1") == shift.SILU_MIN
    assert shift.lower_bound(gr, "s1") == shift.SILU_MIN  # a split keeps its input's bound
    assert shift.lower_bound(gr, "res") == pytest.approx(2 * shift.SILU_MIN)  # a sum adds them
    assert shift.lower_bound(gr, "cat") == pytest.approx(2 * shift.SILU_MIN)  # the least
    assert shift.lower_bound(gr, "up") == pytest.approx(2 * shift.SILU_MIN)
    assert shift.lower_bound(gr, "a1_sig") == 0.0 and shift.nonnegative(gr, "a1_sig")
    assert not shift.nonnegative(gr, "a1")
    for unbounded in ("x", "c1", "c2"):  # an input, convolutions' outputs
        assert shift.lower_bound(gr, unbounded) is None
    # cubic resizing overshoots (negative weights): no bound after it
    assert shift.lower_bound(Graph(silu_block("cubic")), "up") is None
    # a product that is not x * sigmoid(x) has no bound
    m = silu_block()
    mul = next(n for n in m.graph.node if n.name == "a1_mul")
    mul.input[0] = "c2"
    assert shift.lower_bound(Graph(m), "a1") is None


def _stats(model, data):
    return ranges.collect(
        model, data[:64], ranges.activation_inputs(model, ranges.quantizable_nodes(model))
    )


def test_silu_inputs_are_shifted_onto_all_int8_levels_and_int8_gets_closer(data):
    """The padded conv's SiLU input (a border map) and the 1x1 conv's (upsampled concatenation
    of a split and a residual sum) are moved to the middle of ``[lo, T]``, pinned to
    ``(T - lo) / 2``; the image input (no bound) is not. The same FP32 function, Q/DQ in TensorRT
    form, and INT8 with bias correction closer to FP32 than without the shift."""
    model = silu_block()
    th = _stats(model, data).thresholds("minmax")
    shifted, report, pins = shift.shift_activations(model, th, data[:1])
    assert report == {"shifted": 2, "with_border_terms": 1, "skipped_dynamic_size": 0}
    names = [n.name for n in ranges.quantizable_nodes(model)]
    assert [n.name for n in ranges.quantizable_nodes(shifted)] == names
    ref = evaluate.run(model, data)
    assert np.allclose(ref["y"], evaluate.run(shifted, data)["y"], rtol=1e-4, atol=1e-4)
    expected = {
        "a1_shifted_for_conv2": (th["a1"] - shift.SILU_MIN) / 2,
        "up_shifted_for_conv3": (th["up"] - 2 * shift.SILU_MIN) / 2,
    }
    assert pins == pytest.approx(expected)
    q = int8.quantize(shifted, shift.pinned(_stats(shifted, data), pins).thresholds("mse"), data)
    assert not int8.check_structure(q) and sorted(int8.quantized_nodes(q)) == sorted(names)

    def error(m, pins=None):  # bias correction takes back the shift's share of weight rounding
        m = equalize.correct_bias(m, data[:64])[0]
        th = shift.pinned(_stats(m, data), pins or {}).thresholds("minmax")
        qm = int8.quantize(m, th, data[:8], only=["conv2", "conv3"])  # the inputs that moved
        return 1 - float(gate.cosine_rows(ref["y"], evaluate.run(qm, data)["y"]).mean())

    assert error(shifted, pins) < 0.7 * error(model)
