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


def test_faces_task_needs_a_face_bundle(tmp_path):
    bundle = export_model("zoo:digits_cnn", tmp_path / "d.edgert").bundle
    assert_user_error(
        run_cli("camera", bundle, "--task", "faces", "--max-frames", "1", "--headless"),
        "face-detection bundle",
    )


def test_demo_faces(tmp_path):
    proc = run_cli("demo", "--faces", "--workdir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = {
        ln.split()[0]: ln for ln in proc.stdout.splitlines() if ".jpg" in ln and "face(s)" in ln
    }
    assert "1 face(s)" in lines["astronaut.jpg"] and "0 face(s)" in lines["coffee.jpg"]
    assert (tmp_path / "faces_report.json").is_file()
