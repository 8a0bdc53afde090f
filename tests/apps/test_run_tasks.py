"""`edgert export --task detect ...` then `edgert run` on a real image file: boxes in source pixels."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from tests.conftest import ROOT, assert_user_error, run_cli

pytestmark = pytest.mark.subprocess

MODELS_PY = ROOT / "tests" / "export" / "models.py"


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("det")
    (tmp / "labels.txt").write_text("person\ncar\n")
    out = tmp / "det.edgert"
    proc = run_cli(
        "export",
        f"{MODELS_PY}:build_tiny_detector",
        "--input-shape",
        "1x3x64x64",
        "-o",
        out,
        "--task",
        "detect",
        "--labels",
        tmp / "labels.txt",
        "--resize",
        "letterbox",
    )
    assert proc.returncode == 0, proc.stderr
    return tmp, out


def test_detection_boxes_in_source_pixels(detector):
    tmp, bundle = detector
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["task"] == "detect" and m["labels"] == ["person", "car"]
    assert m["preprocessing"]["resize"] == "letterbox" and m["preprocessing"]["size"] == [64, 64]
    image = tmp / "wide.png"
    cv2.imwrite(
        str(image), np.full((128, 256, 3), 90, np.uint8)
    )  # letterboxed: scale 0.25, 16 px pad on top
    proc = run_cli("run", bundle, image, "--json")
    assert proc.returncode == 0, proc.stderr
    dets = json.loads(proc.stdout)["results"]
    assert [(d["label"], d["score"]) for d in dets] == [("person", 0.9), ("car", 0.7)]
    assert dets[0]["box"] == pytest.approx([96, 32, 160, 96])
    assert dets[1]["box"] == pytest.approx([24, 80, 56, 112])
    text = run_cli("run", bundle, image, "--conf", "0.8")
    assert text.returncode == 0 and "person" in text.stdout and "car" not in text.stdout


def test_bad_description_options(tmp_path):
    proc = run_cli(
        "export",
        f"{MODELS_PY}:build_tiny_detector",
        "--input-shape",
        "1x3x64x64",
        "--labels",
        tmp_path / "none.txt",
        "-o",
        tmp_path / "x",
    )
    assert_user_error(proc, "cannot read labels file")
    proc = run_cli(
        "export",
        f"{MODELS_PY}:build_tiny_detector",
        "--input-shape",
        "1x3x64x64",
        "--task",
        "detect",
        "--mean",
        "1,2",
        "-o",
        tmp_path / "y",
    )
    assert_user_error(proc, "--mean and --std need 3 values")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_run_prints_keypoints_masks_and_oriented_boxes(tmp_path):
    """`edgert run` on a photo of one bright square with the pose, instance-segmentation and OBB
    bundles of tests.tiny.blob_detector (made from the ONNX alone: Ultralytics metadata): the
    JSON records carry each task's fields in source pixels, and the text says them."""
    from edgert.export import export_model
    from tests.tiny import ANGLE, FIGURE_SEEN, blob_detector

    image = tmp_path / "square.png"
    picture = np.zeros((240, 320, 3), np.uint8)
    picture[60:120, 100:160] = 255
    cv2.imwrite(str(image), picture)
    said = {}
    for head in ("pose", "segment", "obb"):
        onnx_path = blob_detector(tmp_path / f"{head}.onnx", head=head, ultralytics=True)
        bundle = export_model(str(onnx_path), tmp_path / f"{head}.edgert").bundle
        proc = run_cli("run", bundle, image, "--json", "--conf", "0.9")
        assert proc.returncode == 0, proc.stderr
        (obj,) = json.loads(proc.stdout)["results"]
        if head == "obb":  # the box is the upright one around the turned square
            assert np.allclose(obj["rbox"][:4], [130, 90, 60, 60], atol=6), obj["rbox"]
        else:
            assert np.allclose(obj["box"], [100, 60, 160, 120], atol=6), (head, obj["box"])
        said[head] = obj
        text = run_cli("run", bundle, image, "--conf", "0.9")
        assert text.returncode == 0, text.stderr
        said[head + "_text"] = text.stdout
    kp = np.asarray(said["pose"]["keypoints"])
    assert kp.shape == (17, 3) and list(kp[:, 2]) == list(FIGURE_SEEN)
    assert "keypoints 15/17 visible" in said["pose_text"]
    assert 3000 < said["segment"]["mask_area"] < 5000 and len(said["segment"]["polygon"]) >= 4
    assert f"mask {said['segment']['mask_area']:.0f} px" in said["segment_text"]
    assert said["obb"]["rbox"][4] == pytest.approx(ANGLE, abs=1e-4)
    assert f"at {np.degrees(ANGLE):.1f} deg" in said["obb_text"]


def test_an_instance_mask_at_the_source_resolution_where_asked(tmp_path):
    """The records carry a mask's outline; ``Detection.mask.in_source()`` gives its bitmap at the
    photo's resolution: the 60 x 60 square (to the model's 4-pixel prototype cells, 10 source
    pixels here, upsampled bilinearly as Ultralytics' predictor does), its area the record's
    ``mask_area``."""
    from edgert.export import export_model
    from edgert.runtime.tasks import load_task_model
    from tests.tiny import blob_detector

    picture = np.zeros((240, 320, 3), np.uint8)
    picture[60:120, 100:160] = 255
    onnx_path = blob_detector(tmp_path / "seg.onnx", head="segment", ultralytics=True)
    bundle = export_model(str(onnx_path), tmp_path / "seg.edgert").bundle
    with load_task_model(bundle, conf=0.9) as model:
        (obj,) = model(picture).objects
    x, y, bitmap = obj.mask.in_source()
    full = np.zeros((240, 320), bool)
    full[y : y + bitmap.shape[0], x : x + bitmap.shape[1]] = bitmap
    square = np.zeros((240, 320), bool)
    square[60:120, 100:160] = True
    ys, xs = np.nonzero(full)  # the square and the bilinear spill of its cells: 5 px a side
    assert (
        max(abs(xs.min() - 100), abs(xs.max() - 159), abs(ys.min() - 60), abs(ys.max() - 119)) <= 6
    )
    assert (square & ~full).sum() == 0  # the whole square is in its mask
    assert abs(int(bitmap.sum()) - obj.extras["mask_area"]) <= 0.03 * obj.extras["mask_area"]
