"""FP16 models, building from an .onnx, and the build command's bad inputs."""

from __future__ import annotations

import json

import onnx

from edgert.export import export_model
from tests.conftest import assert_user_error, run_cli


def test_fp16_model_and_its_error(tmp_path):
    bundle = export_model("zoo:digits_cnn", tmp_path / "d.edgert").bundle
    proc = run_cli("build", bundle, "--precision", "fp16", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert "model.fp16.onnx" in report["files"]
    fp16 = onnx.load(str(bundle / "model.fp16.onnx"))
    assert fp16.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # FP32 I/O kept
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in fp16.graph.initializer)
    # a valid ONNX model: nodes in topological order (the converter appends its input casts last)
    onnx.checker.check_model(fp16, full_check=True)
    hold = report["quantization"]["holdout"]
    assert hold["cosine"] > 0.999 and hold["accuracy_drop"] <= 0.01
    assert report["engine"]["built"] is False


def test_build_wraps_an_onnx_file(tmp_path):
    bundle = export_model("zoo:digits_cnn", tmp_path / "d.edgert").bundle
    onnx_file = tmp_path / "plain.onnx"
    onnx_file.write_bytes((bundle / "model.onnx").read_bytes())
    (tmp_path / "imgs").mkdir()
    import cv2
    import numpy as np

    rng = np.random.default_rng(0)
    for i in range(40):
        cv2.imwrite(
            str(tmp_path / "imgs" / f"{i}.png"), rng.integers(0, 255, (8, 8), dtype=np.uint8)
        )
    proc = run_cli(
        "build", onnx_file, "--precision", "int8", "--calib", tmp_path / "imgs", "--gate", "off"
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "plain.edgert" / "model.int8.onnx").is_file()


def test_build_bad_arguments(tmp_path):
    bundle = export_model("zoo:digits_cnn", tmp_path / "d.edgert").bundle
    assert_user_error(
        run_cli("build", tmp_path / "missing"), "neither a bundle folder nor an .onnx"
    )
    assert_user_error(run_cli("build", bundle, "--dla", "0"), "no DLA")
    assert_user_error(run_cli("build", bundle, "--gate", "cosine=1"), "not of the form")
    assert_user_error(run_cli("build", bundle, "--opt-level", "9"), "between 0 and 5")
    assert run_cli("build", bundle, "--precision", "int4").returncode == 2


def test_sort_nodes_orders_a_shuffled_graph_and_keeps_a_valid_order():
    from onnx import TensorProto, helper

    from edgert.quantize.fp16 import sort_nodes

    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Neg", ["x"], ["b"], name="b"),
        helper.make_node("Add", ["a", "a"], ["c"], name="c"),
        helper.make_node("Mul", ["c", "b"], ["y"], name="y"),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("x", "y")]
    graph = helper.make_graph([nodes[3], nodes[2], nodes[1], nodes[0]], "g", io[:1], io[1:])
    sort_nodes(graph)
    assert [n.name for n in graph.node] == ["b", "a", "c", "y"]
    onnx.checker.check_model(helper.make_model(graph), full_check=True)
    sort_nodes(graph)  # already valid: unchanged
    assert [n.name for n in graph.node] == ["b", "a", "c", "y"]
