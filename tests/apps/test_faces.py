"""MTCNN faces: our three networks with facenet-pytorch's weights, one bundle, found on the astronaut
photo and not on the coffee photo, through the camera app and the demo."""

from __future__ import annotations

import json

import pytest

from edgert.export import export_model
from edgert.runtime.sample_data import photo_path
from tests.conftest import assert_user_error, run_cli


@pytest.fixture(scope="module")
def mtcnn(tmp_path_factory):
    return export_model("zoo:mtcnn", tmp_path_factory.mktemp("f") / "mtcnn.edgert")


def test_bundle_holds_three_networks_checked_against_pytorch(mtcnn):
    m = json.loads((mtcnn.bundle / "manifest.json").read_text())
    assert m["task"] == "faces" and set(m["models"]) == {"pnet", "rnet", "onet"}
    assert m["models"]["pnet"]["inputs"][0]["shape"] == [-1, 3, -1, -1]  # a pyramid: any size
    assert m["models"]["rnet"]["inputs"][0]["shape"] == [-1, 3, 24, 24]
    for name in ("pnet", "rnet", "onet"):
        assert (
            m["parity_all"][name]["passed"] and (mtcnn.bundle / m["models"][name]["file"]).is_file()
        )


@pytest.mark.subprocess
@pytest.mark.parametrize(("photo", "faces"), [("astronaut", 1), ("coffee", 0), ("chelsea", 0)])
def test_faces_through_the_camera_app(mtcnn, tmp_path, photo, faces):
    jsonl = tmp_path / "f.jsonl"
    proc = run_cli(
        "camera", mtcnn.bundle, "--source", photo_path(photo), "--headless", "--jsonl", jsonl
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(jsonl.read_text().splitlines()[1])["results"]  # after the header
    assert len(found) == faces
    if faces:
        x1, y1, x2, y2 = found[0]["box"]
        # Eileen Collins' face in scikit-image's astronaut photo (512x512)
        assert 150 < x1 < 200 and 40 < y1 < 90 and 240 < x2 < 300 and 150 < y2 < 200
        assert found[0]["label"] == "face" and found[0]["score"] > 0.9


@pytest.mark.subprocess
def test_faces_task_needs_a_face_bundle(tmp_path):
    bundle = export_model("zoo:digits_cnn", tmp_path / "d.edgert").bundle
    assert_user_error(
        run_cli("camera", bundle, "--task", "faces", "--max-frames", "1", "--headless"),
        "face-detection bundle",
    )


@pytest.mark.subprocess
def test_demo_faces(tmp_path):
    proc = run_cli("demo", "--faces", "--workdir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = {
        ln.split()[0]: ln for ln in proc.stdout.splitlines() if ".jpg" in ln and "face(s)" in ln
    }
    assert "1 face(s)" in lines["astronaut.jpg"] and "0 face(s)" in lines["coffee.jpg"]
    assert (tmp_path / "faces_report.json").is_file()


@pytest.mark.subprocess
def test_int8_face_detector_is_gated_end_to_end_and_runs(tmp_path):
    """`edgert build --precision int8` on the MTCNN bundle: each network calibrated on what the FP32
    detector gives it, the INT8 detector gated against FP32 on hold-out images (face box F1), three
    INT8 files written; `--precision int8` then runs them and finds the astronaut's face."""
    bundle = export_model("zoo:mtcnn", tmp_path / "mtcnn.edgert").bundle
    image = photo_path("astronaut")
    assert_user_error(run_cli("run", bundle, image, "--precision", "int8"), "no INT8 face detector")
    proc = run_cli(
        "build", bundle, "--precision", "int8", "--calib-size", "120", "--holdout-size", "60"
    )
    assert proc.returncode == 0, proc.stderr
    m = json.loads((bundle / "manifest.json").read_text())
    q = m["quantization"]["int8"]
    assert q["passed"] and q["holdout"]["box_f1"] >= 0.9 and q["holdout"]["boxes_fp32"] > 0.2
    for name, file in (("pnet", "model"), ("rnet", "rnet"), ("onet", "onet")):
        assert (
            q["networks"][name]["file"] == f"{file}.int8.onnx"
            and f"{file}.int8.onnx" in m["hashes"]
        )
        assert q["networks"][name]["quantized_nodes"] > 0
    found = {}
    for precision in ("fp32", "int8"):
        proc = run_cli("run", bundle, image, "--precision", precision, "--json")
        assert proc.returncode == 0, proc.stderr
        found[precision] = json.loads(proc.stdout)["results"]
    assert len(found["fp32"]) == len(found["int8"]) == 1
    assert found["int8"][0]["box"] == pytest.approx(found["fp32"][0]["box"], abs=3)
    assert_user_error(
        run_cli("build", bundle, "--precision", "fp16"),
        "not built for a face-detection bundle",
        "INT8 is: edgert build --precision int8",
    )


@pytest.mark.subprocess
def test_face_detector_calibration_needs_whole_images(mtcnn, tmp_path):
    import numpy as np

    np.savez(tmp_path / "x.npz", input=np.zeros((40, 3, 24, 24), np.float32))
    proc = run_cli("build", mtcnn.bundle, "--precision", "int8", "--calib", tmp_path / "x.npz")
    assert_user_error(proc, "must hold uint8 images")
    assert not (mtcnn.bundle / "model.int8.onnx").exists()


@pytest.mark.subprocess
def test_int8_face_detector_gives_nodes_back_when_the_gate_asks_more(tmp_path):
    """A stricter cosine than P-Net's INT8 reaches (0.9956 here): P-Net, the network furthest from
    FP32, keeps its most sensitive convolutions in FP32 until the detector passes."""
    bundle = export_model("zoo:mtcnn", tmp_path / "mtcnn.edgert").bundle
    proc = run_cli(
        "build",
        bundle,
        "--precision",
        "int8",
        "--calib-size",
        "120",
        "--holdout-size",
        "60",
        "--gate",
        "cosine>=0.9965",
    )
    assert proc.returncode == 0, proc.stderr
    q = json.loads((bundle / "manifest.json").read_text())["quantization"]["int8"]
    assert q["holdout_before_fallback"]["cosine_pnet"] < 0.9965 <= q["holdout"]["cosine"]
    assert q["networks"]["pnet"]["kept_fp32"] and not q["networks"]["rnet"]["kept_fp32"]
    assert "pnet gives nodes back to FP32" in proc.stdout + proc.stderr


@pytest.mark.subprocess
def test_face_detector_calibration_from_a_damaged_npz(mtcnn, tmp_path):
    (tmp_path / "x.npz").write_bytes(b"not a zip file")
    proc = run_cli("build", mtcnn.bundle, "--precision", "int8", "--calib", tmp_path / "x.npz")
    assert_user_error(proc, "not a readable .npz")


@pytest.mark.subprocess
def test_a_face_bundle_without_all_three_networks_is_refused(mtcnn, tmp_path):
    """A manifest from elsewhere that names only some of P-Net, R-Net and O-Net: one sentence
    (for running it and for quantizing it), not a KeyError."""
    import shutil

    bundle = tmp_path / "two.edgert"
    shutil.copytree(mtcnn.bundle, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    del manifest["models"]["onet"]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    assert_user_error(run_cli("run", bundle, photo_path("astronaut")), "onet")
    assert_user_error(run_cli("build", bundle, "--precision", "int8", "--calib-size", "20"), "onet")
