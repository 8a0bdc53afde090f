"""Export never writes a bundle its own runtime refuses (review 6, G19): the final description
(task, labels, keypoints, input size; from the model's metadata or the flags) is checked against
the graph's concrete shapes by the check the runtime makes when it opens a bundle
(runtime/tasks/fit.py), so the two say the same; symbolic dimensions are not checked."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from tests.conftest import assert_user_error, run_cli
from tests.export.test_ultralytics_hostile import ONE, const_onnx

POSE = np.zeros((1, 4 + 1 + 17 * 3, 2))  # [1, 56, 2]: one class, 17 x 3 keypoints
POSE_META = {"task": "pose", "names": {0: "person"}, "kpt_shape": [17, 3]}


def _grey(tmp_path, side: int = 64):
    import cv2

    path = tmp_path / "g.png"
    cv2.imwrite(str(path), np.full((side, side, 3), 128, np.uint8))
    return path


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "props, values, size, flags, said",
    [
        (
            {"names": {0: "a", 1: "b"}, "imgsz": [640, 640]},
            ONE,
            64,
            [],
            ["takes 1x3x64x64", "metadata's imgsz"],
        ),
        (POSE_META, POSE, 640, ["--keypoints", "5x3"], ["4 + 1 classes + 15", "--keypoints 5x3"]),
        (
            {"task": "obb", "names": {0: "a"}},
            np.zeros((1, 6, 3)),
            640,
            ["--labels", "LABELS"],
            ["4 + 3 classes + 1", "--labels"],
        ),
        (
            POSE_META,
            POSE,
            640,
            ["--task", "detect"],
            ["no YOLO layout for 1 classes", "--task detect"],
        ),
        (POSE_META, POSE, 640, ["--size", "320x320"], ["takes 1x3x640x640", "--size 320x320"]),
    ],
)
def test_a_description_the_graph_contradicts_is_refused_at_export(
    tmp_path, props, values, size, flags, said
):
    """Each was rc 0 (one only "said"), then every run failed on its first frame."""
    labels = tmp_path / "three.txt"
    labels.write_text("a\nb\nc\n")
    flags = [str(labels) if f == "LABELS" else f for f in flags]
    onnx_path = const_onnx(tmp_path / "m.onnx", props, values, size)
    proc = run_cli("export", onnx_path, "-o", tmp_path / "m.edgert", *flags)
    assert_user_error(proc, "the bundle would not run", *said)
    assert "internal error" not in proc.stderr
    assert not (tmp_path / "m.edgert").exists()


@pytest.mark.subprocess
def test_export_and_load_refuse_in_the_same_words(tmp_path):
    """A bundle that fitted, its manifest then edited to another input size: `run` refuses it when
    it opens it, in the words export uses for the same description, not on a frame."""
    onnx_path = const_onnx(tmp_path / "m.onnx", POSE_META, POSE)
    assert run_cli("export", onnx_path, "-o", tmp_path / "ok.edgert").returncode == 0
    path = tmp_path / "ok.edgert" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["preprocessing"]["size"] = [320, 320]
    path.write_text(json.dumps(manifest))
    loaded = run_cli("run", tmp_path / "ok.edgert", _grey(tmp_path))
    assert_user_error(loaded, "manifest.json", "so no frame could run")
    exported = run_cli("export", onnx_path, "-o", tmp_path / "no.edgert", "--size", "320x320")
    assert_user_error(exported, "the bundle would not run")
    why = exported.stderr.split("would not run: ")[1].split(" (as ")[0]
    assert why.startswith("the preprocessing makes colour 320x320") and why in loaded.stderr


def _symbolic(path, inputs: dict, outputs: dict):
    """The model at ``path`` with the given axes of its input / output made symbolic."""
    model = onnx.load(str(path))
    for value, axes in ((model.graph.input[0], inputs), (model.graph.output[0], outputs)):
        for axis, name in axes.items():
            value.type.tensor_type.shape.dim[axis].dim_param = name
    onnx.save(model, str(path))
    return path


@pytest.mark.subprocess
def test_symbolic_dimensions_are_not_checked(tmp_path):
    """A graph of any input size takes --size 320x320 over the metadata's 640; a head of any
    channel count takes what the labels say: both export and run."""
    onnx_path = _symbolic(
        const_onnx(tmp_path / "m.onnx", {"names": {0: "a", 1: "b"}}, ONE),
        {2: "h", 3: "w"},
        {1: "c"},
    )
    proc = run_cli("export", onnx_path, "-o", tmp_path / "d.edgert", "--size", "320x320")
    assert proc.returncode == 0, proc.stderr
    ran = run_cli("run", tmp_path / "d.edgert", _grey(tmp_path), "--json")
    assert ran.returncode == 0, ran.stderr
    (obj,) = json.loads(ran.stdout.splitlines()[-1])["results"]
    assert obj["label"] == "a"


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "edit, said",
    [
        (lambda m: m["head"].pop("kpt_shape"), "a pose model records its keypoint shape"),
        (lambda m: m.update(labels=["a", "b", "c"]), "4 + 3 classes + 51"),
        (lambda m: m["head"].update(form="end2end"), "rows hold 6 + 51 values"),
        (lambda m: m["preprocessing"].update(channel_order="GRAY"), "grey 640x640"),
    ],
)
def test_a_manifest_edited_to_contradict_its_graph_is_refused_when_opened(tmp_path, edit, said):
    """Every `run` of these failed on its first frame (or, for the keypoints, on every frame)."""
    onnx_path = const_onnx(tmp_path / "m.onnx", POSE_META, np.zeros((1, 4 + 1 + 51, 2)))
    assert run_cli("export", onnx_path, "-o", tmp_path / "p.edgert").returncode == 0
    path = tmp_path / "p.edgert" / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    loaded = run_cli("run", tmp_path / "p.edgert", _grey(tmp_path))
    assert_user_error(loaded, "manifest.json", said, "so no frame could run")
