"""Engine on ONNX Runtime with real ONNX models built here: validation and selection reasons."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgert.runtime import BackendUnavailable, ModelError, ShapeError
from edgert.runtime.engine import Engine
from tests.tiny import matmul_model, matmul_reference

make_model = matmul_model
reference = matmul_reference


def test_dynamic_and_static_batch(tmp_path):
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    with Engine.load(make_model(tmp_path / "d.onnx")) as dyn:
        assert dyn.inputs[0].shape == (-1, 4) and dyn.backend == "onnxruntime"
        np.testing.assert_allclose(dyn.infer(x)["y"], reference(x), rtol=1e-6)
    with Engine.load(make_model(tmp_path / "s.onnx", batch=2)) as static:
        first = static.infer(x[:2])["y"]
        second = static.infer(x[2:4])["y"]  # the pre-bound output buffer is reused...
        np.testing.assert_allclose(
            first, reference(x[:2]), rtol=1e-6
        )  # ...without clobbering results
        np.testing.assert_allclose(second, reference(x[2:4]), rtol=1e-6)


def test_auto_reason_names_the_choice(tmp_path):
    with Engine.load(make_model(tmp_path / "m.onnx")) as engine:
        assert engine.backend_reason.startswith("onnxruntime (providers ")
        assert "CPUExecutionProvider" in engine.backend_reason


def test_bad_inputs_say_expected_and_got(tmp_path):
    engine = Engine.load(make_model(tmp_path / "m.onnx"))
    with pytest.raises(ShapeError, match="has shape 2x5; expected Nx4"):
        engine.infer(np.zeros((2, 5), np.float32))
    with pytest.raises(ShapeError, match="dtype float64; expected float32"):
        engine.infer(np.zeros((2, 4)))
    with pytest.raises(ShapeError, match="unknown input 'image'"):
        engine.infer({"image": np.zeros((2, 4), np.float32)})
    engine.close()
    with pytest.raises(ModelError, match="closed"):
        engine.infer(np.zeros((2, 4), np.float32))


def test_unknown_backend_and_missing_file(tmp_path):
    with pytest.raises(BackendUnavailable, match="unknown backend"):
        Engine.load(make_model(tmp_path / "m.onnx"), backend="coreml")
    with pytest.raises(ModelError, match="does not exist"):
        Engine.load(tmp_path / "missing.onnx")
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelError):
        Engine.load(tmp_path / "bad.onnx")


def nan_model(path):
    """y = log(x): negative inputs give NaN."""
    graph = helper.make_graph(
        [helper.make_node("Log", ["x"], ["y"])],
        "log",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_nan_outputs_warn_once(tmp_path, caplog):
    with Engine.load(nan_model(tmp_path / "log.onnx")) as engine, caplog.at_level("WARNING"):
        bad = -np.ones((1, 4), np.float32)
        assert np.isnan(engine.infer(bad)["y"]).all()
        engine.infer(bad)
    warnings = [r for r in caplog.records if "NaN or Inf" in r.getMessage()]
    assert len(warnings) == 1


NO_TENSORRT = pytest.mark.skipif(
    importlib.util.find_spec("tensorrt") is not None,
    reason="checks the messages given where TensorRT is absent",
)


@NO_TENSORRT
def test_bundle_batch_limit_and_missing_precisions(tmp_path):
    pytest.importorskip("torch", reason="exports a PyTorch model (host side)")
    from edgert.export import export_model

    models_py = Path(__file__).resolve().parents[1] / "export" / "models.py"
    bundle = export_model(
        f"{models_py}:build", tmp_path / "b.edgert", input_shape="1x3x8x8", max_batch=2
    ).bundle
    with Engine.load(bundle) as engine:
        assert engine.infer(np.zeros((2, 3, 8, 8), np.float32))["output"].shape == (2, 5)
        with pytest.raises(ShapeError, match="batch 3 exceeds the bundle's maximum batch 2"):
            engine.infer(np.zeros((3, 3, 8, 8), np.float32))
    with pytest.raises(BackendUnavailable, match="no INT8 model; make one with: edgert build"):
        Engine.load(bundle, backend="onnxruntime", precision="int8")
    with pytest.raises(BackendUnavailable, match="TensorRT is not importable"):
        Engine.load(bundle, backend="tensorrt")


@NO_TENSORRT
def test_engine_file_without_tensorrt_says_why(tmp_path):
    plan = tmp_path / "m.engine"
    plan.write_bytes(b"\x00" * 64)
    with pytest.raises(BackendUnavailable) as info:
        Engine.load(plan)
    text = str(info.value)
    assert "tensorrt: TensorRT is not importable" in text
    assert "onnxruntime: a TensorRT plan (.engine) runs only on the TensorRT backend" in text
