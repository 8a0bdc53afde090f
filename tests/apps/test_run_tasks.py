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
