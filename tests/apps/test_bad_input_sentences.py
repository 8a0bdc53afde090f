"""Bad input from the command line gets one sentence and exit 2, never an internal error or a
traceback; nothing unbounded is accepted (issue: reliability 6, 9, 15). Real files and processes."""

from __future__ import annotations

import json
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.conftest import assert_user_error, run_cli
from tests.tiny import classifier_bundle, image_classifier, matmul_model

pytestmark = pytest.mark.subprocess


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return classifier_bundle(tmp_path_factory.mktemp("bad"))


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("--duration", "0"), "--duration"),
        (("--duration", "-5"), "--duration"),
        (("--iterations", "-1"), "--iterations"),
        (("--batch", "0"), "--batch"),
        (("--warmup", "nan"), "--warmup"),
        (("--idle-seconds", "-1"), "--idle-seconds"),
    ],
)
def test_bench_refuses_unbounded_or_negative_settings(tiny, args, fragment):
    t0 = time.monotonic()
    proc = run_cli("bench", tiny, *args, timeout=60)
    assert_user_error(proc, fragment)
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("build", "B", "--holdout-size", "-3"), "--holdout-size"),
        (("build", "B", "--calib-size", "0"), "--calib-size"),
        (("camera", "B", "--fps", "-1"), "--fps"),
        (("camera", "B", "--width", "-640"), "--width"),
        (("camera", "B", "--max-frames", "-2"), "--max-frames"),
        (("camera", "B", "--conf", "1.5"), "--conf"),
        (("export-triton", "B", "--repo", "r", "--instances", "0"), "--instances"),
        (("run", "B", "x.jpg", "--top-k", "0"), "--top-k"),
    ],
)
def test_negative_and_absurd_numbers_are_refused(tiny, tmp_path, args, fragment):
    args = tuple(str(tiny) if a == "B" else a for a in args)
    assert_user_error(run_cli(*args, cwd=tmp_path), fragment)


def test_camera_output_ports_and_video_paths(tiny, tmp_path):
    for uri in ("http://127.0.0.1:99999", "http://127.0.0.1:port"):
        proc = run_cli("camera", tiny, "--output", uri, "--max-frames", "2", "--headless")
        assert_user_error(proc, "port")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for target in (blocker / "out.mp4", "/proc/edgert-out.mp4"):
        proc = run_cli("camera", tiny, "--output", target, "--max-frames", "2", "--headless")
        assert_user_error(proc, "cannot write video")


def test_labels_file_that_is_binary_or_of_the_wrong_length(tmp_path):
    onnx_path = image_classifier(tmp_path / "m.onnx")
    binary = tmp_path / "labels.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    proc = run_cli("export", onnx_path, "--task", "classify", "--labels", binary, "--size", "16x16")
    assert_user_error(proc, "labels file")
    five = tmp_path / "five.txt"
    five.write_text("a\nb\nc\nd\ne\n")
    proc = run_cli("export", onnx_path, "--task", "classify", "--labels", five, "--size", "16x16")
    assert_user_error(proc, "5 classes", "has 3")
    assert not (tmp_path / "m.edgert").exists()


def test_preprocessing_sizes_are_validated_at_export(tmp_path):
    onnx_path = image_classifier(tmp_path / "m.onnx")
    for size in ("0x0", "100000x100000", "-4x16"):
        proc = run_cli("export", onnx_path, "--task", "classify", "--size", size)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "size" in proc.stderr
    assert not (tmp_path / "m.edgert").exists()


def test_future_opset_and_comma_shapes_say_what_to_do(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 99)])
    onnx.save(model, str(tmp_path / "op99.onnx"))
    assert_user_error(run_cli("export", tmp_path / "op99.onnx"), "opset 99", "older opset")
    net = tmp_path / "net.py"
    net.write_text("import torch\ndef build():\n    return torch.nn.Conv2d(3, 4, 3)\n")
    proc = run_cli("export", f"{net}:build", "--input-shape", "1,3,32,32")
    assert_user_error(proc, "1x3x32x32")


def test_build_reuses_the_bundle_of_an_unchanged_onnx(tmp_path):
    onnx_path = image_classifier(tmp_path / "m.onnx")
    assert run_cli("build", onnx_path, "--precision", "fp16", "--holdout-size", "4").returncode == 0
    bundle = tmp_path / "m.edgert"
    marker = bundle / "engines" / "plan-from-the-device.engine"
    marker.write_bytes(b"a plan built earlier")
    proc = run_cli("build", onnx_path, "--precision", "fp16", "--holdout-size", "4")
    assert proc.returncode == 0, proc.stderr
    assert "using the bundle" in proc.stdout + proc.stderr
    assert marker.is_file() and (bundle / "model.fp16.onnx").is_file()


def test_build_on_a_corrupt_or_escaping_model(tmp_path):
    bundle = classifier_bundle(tmp_path / "a")
    (bundle / "model.onnx").write_bytes(b"\x08\x07garbage" * 10)
    assert_user_error(run_cli("build", bundle, "--precision", "fp16"), "SHA-256")
    # a model whose weights live "outside" the bundle, with a manifest that records it
    other = classifier_bundle(tmp_path / "b")
    model = onnx.load(str(other / "model.onnx"))
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.zeros(200, np.float32).tobytes())
    init = model.graph.initializer[0]
    init.ClearField("raw_data")
    del init.float_data[:]
    init.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "../../secret.bin"), ("offset", "0"), ("length", "432")):
        entry = init.external_data.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(other / "model.onnx"))
    from edgert.runtime.bundle import sha256_file

    manifest = json.loads((other / "manifest.json").read_text())
    manifest["hashes"]["model.onnx"] = sha256_file(other / "model.onnx")
    (other / "manifest.json").write_text(json.dumps(manifest))
    assert_user_error(run_cli("build", other, "--precision", "int8"), "outside the bundle")


@pytest.mark.parametrize(
    "arrays, fragment",
    [
        ({}, "holds no arrays"),
        ({"x": np.zeros((0, 3, 16, 16), np.float32)}, "no numeric samples"),
        ({"x": np.full((8, 3, 16, 16), np.nan, np.float32)}, "NaN"),
        ({"x": np.array(["a", "b"])}, "no numeric samples"),
        ({"x": np.zeros((8, 3, 16, 16), np.float32), "labels": np.zeros(3)}, "labels"),
    ],
)
def test_empty_or_garbage_calibration_npz(tiny, tmp_path, arrays, fragment):
    path = tmp_path / "cal.npz"
    np.savez(path, **arrays)
    proc = run_cli("build", tiny, "--precision", "int8", "--calib", path)
    assert_user_error(proc, fragment)


def test_calibration_npz_that_is_not_a_zip(tiny, tmp_path):
    path = tmp_path / "cal.npz"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    assert_user_error(run_cli("build", tiny, "--precision", "int8", "--calib", path), "npz")


def test_wrong_typed_manifest_fields_are_sentences(tmp_path):
    bundle = classifier_bundle(tmp_path)
    data = json.loads((bundle / "manifest.json").read_text())
    data["outputs"] = [{"name": "logits", "dtype": "float32", "shape": "-1x3"}]
    (bundle / "manifest.json").write_text(json.dumps(data))
    assert_user_error(run_cli("bench", bundle, "--iterations", "1"), "invalid shape")


def test_bench_model_without_bundle_still_runs(tmp_path):
    proc = run_cli(
        "bench", matmul_model(tmp_path / "m.onnx"), "--iterations", "20", "--warmup", "0"
    )
    assert proc.returncode == 0, proc.stderr
