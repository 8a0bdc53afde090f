"""An ONNX with Ultralytics' metadata (issue 48; the keys and ``str()`` values of Ultralytics
8.4's exporter, engine/exporter.py: ``task``, ``names``, ``imgsz``, ``stride``, ``kpt_shape``,
``end2end``) made a bundle with no flags, and the metadata that lies refused in one sentence. The
graphs are built here: a 1x1 convolution with zero weights whose biases are the head's outputs,
so every candidate says the same known box, score and keypoints. Parity with Ultralytics' own
predictor on real exports: tests/ultralytics (its own environment)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgert.export import export_model
from edgert.runtime.errors import ModelError
from tests.conftest import assert_user_error, run_cli

SIDE = 32


def ultra_onnx(path, bias, props: dict, protos: int = 0, rows: bool = False):
    """[1, 3, 32, 32] -> [1, len(bias), 1024] (every candidate the same ``bias`` values; ``rows``:
    [1, 1024, len(bias)], an end-to-end head's layout), and a [1, protos, 8, 8] prototype output
    of ones when ``protos``; Ultralytics' metadata ``props``."""
    c = len(bias)
    w = numpy_helper.from_array(np.zeros((c, 3, 1, 1), np.float32), "w")
    b = numpy_helper.from_array(np.asarray(bias, np.float32), "b")
    shape = numpy_helper.from_array(np.array([1, c, SIDE * SIDE], np.int64), "shape")
    nodes = [
        helper.make_node("Conv", ["images", "w", "b"], ["conv"]),
        helper.make_node("Reshape", ["conv", "shape"], ["flat" if rows else "output0"]),
    ]
    if rows:
        nodes.append(helper.make_node("Transpose", ["flat"], ["output0"], perm=[0, 2, 1]))
    dims = [1, SIDE * SIDE, c] if rows else [1, c, SIDE * SIDE]
    outputs = [helper.make_tensor_value_info("output0", TensorProto.FLOAT, dims)]
    inits = [w, b, shape]
    if protos:
        inits.append(numpy_helper.from_array(np.ones((1, protos, 8, 8), np.float32), "p"))
        nodes.append(helper.make_node("Identity", ["p"], ["output1"]))
        outputs.append(
            helper.make_tensor_value_info("output1", TensorProto.FLOAT, [1, protos, 8, 8])
        )
    graph = helper.make_graph(
        nodes,
        "head",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, SIDE, SIDE])],
        outputs,
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    base = {
        "author": "Ultralytics",
        "version": "8.4.0",
        "stride": "32",
        "imgsz": f"[{SIDE}, {SIDE}]",
    }
    for key, value in {**base, **props}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, str(value)
    onnx.save(model, str(path))
    return path


# a box centred at (16, 12), 8 x 4, score 0.9 for class 1 of 2, then 17 keypoints (x, y, v)
BOX = [16.0, 12.0, 8.0, 4.0]
SCORES = [0.1, 0.9]
KPTS = [v for k in range(17) for v in (4.0 + k, 20.0, 0.8)]


def pose_onnx(tmp_path):
    """A pose export of two classes (cat, person) and COCO's 17 keypoints, as Ultralytics' says."""
    props = {"task": "pose", "names": {0: "cat", 1: "person"}, "kpt_shape": [17, 3]}
    return ultra_onnx(tmp_path / "pose.onnx", BOX + SCORES + KPTS, props)


@pytest.mark.subprocess
def test_a_pose_export_is_read_from_its_metadata_and_runs(tmp_path):
    import cv2

    onnx_path = pose_onnx(tmp_path)
    result = export_model(onnx_path, tmp_path / "pose.edgert")
    m = result.manifest
    assert m["task"] == "pose" and m["labels"] == ["cat", "person"]
    assert m["head"] == {"form": "yolo", "kpt_shape": [17, 3], "from": "Ultralytics metadata"}
    pre = m["preprocessing"]
    assert (pre["resize"], pre["pad_value"], pre["interpolation"]) == (
        "letterbox",
        114.0,
        "bilinear",
    )
    assert "keypoints 17x3" in m["export"]["described"][0]
    # a 64 x 128 picture: scale 0.25, 8 rows of padding above; every candidate is one box
    image = np.zeros((64, 128, 3), np.uint8)
    cv2.imwrite(str(tmp_path / "p.png"), image)
    proc = run_cli("run", tmp_path / "pose.edgert", tmp_path / "p.png", "--json")
    assert proc.returncode == 0, proc.stderr
    (obj,) = json.loads(proc.stdout.splitlines()[-1])["results"]
    assert obj["label"] == "person" and obj["score"] == pytest.approx(0.9, abs=1e-4)
    assert obj["box"] == pytest.approx([48.0, 8.0, 80.0, 24.0], abs=0.01)
    assert obj["keypoints"][0] == pytest.approx([16.0, 48.0, 0.8], abs=0.01)
    assert obj["keypoints"][16] == pytest.approx([80.0, 48.0, 0.8], abs=0.01)


def test_end_to_end_obb_and_instance_exports_get_their_task_and_head(tmp_path):
    names = {0: "a", 1: "b"}
    obb = export_model(
        ultra_onnx(tmp_path / "obb.onnx", BOX + SCORES + [0.3], {"task": "obb", "names": names}),
        tmp_path / "obb.edgert",
    )
    assert obb.manifest["task"] == "obb" and obb.manifest["head"]["form"] == "yolo"
    seg = export_model(
        ultra_onnx(
            tmp_path / "seg.onnx",
            BOX + SCORES + [1.0] * 4,
            {"task": "segment", "names": names},
            protos=4,
        ),
        tmp_path / "seg.edgert",
    )
    assert seg.manifest["task"] == "segment-instances"
    # an end-to-end detector's rows: x1, y1, x2, y2, score, class
    e2e = export_model(
        ultra_onnx(
            tmp_path / "e2e.onnx",
            [1, 2, 3, 4, 0.5, 1],
            {"task": "detect", "names": names, "end2end": True},
            rows=True,
        ),
        tmp_path / "e2e.edgert",
    )
    assert e2e.manifest["head"]["form"] == "end2end"
    assert "end-to-end head (no NMS)" in e2e.manifest["export"]["described"][0]


@pytest.mark.subprocess
def test_the_users_flags_win_and_each_difference_is_said(tmp_path):
    onnx_path = pose_onnx(tmp_path)
    labels = tmp_path / "l.txt"
    labels.write_text("dog\nhuman\n")
    proc = run_cli(
        "export", onnx_path, "-o", tmp_path / "b.edgert", "--labels", labels, "--size", "32x32"
    )
    assert proc.returncode == 0, proc.stderr
    assert "from the model's metadata" in proc.stdout
    assert "--labels" in proc.stdout and "--size given" in proc.stdout
    manifest = json.loads((tmp_path / "b.edgert" / "manifest.json").read_text())
    assert manifest["labels"] == ["dog", "human"] and manifest["preprocessing"]["size"] == [32, 32]


@pytest.mark.parametrize(
    "props, bias, said",
    [
        ({"task": "detect", "names": {0: "a", 1: "b", 2: "c"}}, BOX + SCORES, "3 classes"),
        (
            {"task": "pose", "names": {0: "a", 1: "b"}, "kpt_shape": [5, 3]},
            BOX + SCORES + KPTS,
            "5x3 keypoints",
        ),
        (
            {"task": "pose", "names": {0: "a", 1: "b"}, "kpt_shape": [17, 4]},
            BOX + SCORES + KPTS,
            "kpt_shape",
        ),
        ({"task": "detect", "names": "__import__('os')"}, BOX + SCORES, "is not a Python literal"),
        ({"task": "detect", "names": {1: "a", 5: "b"}}, BOX + SCORES, "class ids 0..N-1"),
        ({"task": "track", "names": {0: "a"}}, BOX + SCORES, "names the task 'track'"),
        (
            {"task": "detect", "names": {0: "a", 1: "b"}, "end2end": True},
            BOX + SCORES,
            "end-to-end",
        ),
    ],
)
def test_metadata_that_lies_is_one_sentence(tmp_path, props, bias, said):
    onnx_path = ultra_onnx(tmp_path / "m.onnx", bias, props)
    with pytest.raises(ModelError, match=said):
        export_model(onnx_path, tmp_path / "m.edgert")
    assert not (tmp_path / "m.edgert").exists()


@pytest.mark.subprocess
def test_lying_metadata_on_the_command_line(tmp_path):
    onnx_path = ultra_onnx(
        tmp_path / "m.onnx", BOX + SCORES, {"task": "detect", "names": {0: "a", 1: "b", 2: "c"}}
    )
    assert_user_error(
        run_cli("export", onnx_path, "-o", tmp_path / "o.edgert"),
        "Ultralytics metadata",
        "3 classes",
    )


def test_a_pose_model_without_metadata_needs_its_keypoints(tmp_path):
    onnx_path = ultra_onnx(tmp_path / "m.onnx", BOX + SCORES + KPTS, {})
    model = onnx.load(str(onnx_path))
    del model.metadata_props[:]
    onnx.save(model, str(onnx_path))
    with pytest.raises(ModelError, match="--keypoints KxD"):
        export_model(onnx_path, tmp_path / "a.edgert", task="pose", labels=None)
    done = export_model(onnx_path, tmp_path / "b.edgert", task="pose", keypoints="17x3")
    assert done.manifest["head"] == {
        "form": "yolo",
        "kpt_shape": [17, 3],
        "from": "the output shapes",
    }


def _bare(tmp_path, name, bias, **kw):
    """:func:`ultra_onnx` with no metadata at all (an ONNX from another exporter)."""
    path = ultra_onnx(tmp_path / f"{name}.onnx", bias, {}, **kw)
    model = onnx.load(str(path))
    del model.metadata_props[:]
    onnx.save(model, str(path))
    return path


def test_without_metadata_the_task_is_guessed_where_the_shapes_say_one(tmp_path):
    """A second output of prototypes makes a YOLO head instance segmentation; [B, K, 6] rows are
    an end-to-end detector; with --labels the extras after the classes are counted (none:
    detect; one: obb; K x D with --keypoints: pose); each guess is said in export.described."""
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\nperson\n")
    cases = [
        ("seg", BOX + SCORES + [0.5] * 4, {"protos": 4}, {}, "segment-instances"),
        ("e2e", [1, 2, 9, 8, 0.9, 1], {"rows": True}, {}, "detect"),
        ("det", BOX + SCORES, {}, {"labels": labels}, "detect"),
        ("obb", BOX + SCORES + [0.3], {}, {"labels": labels}, "obb"),
        ("pose", BOX + SCORES + KPTS, {}, {"labels": labels, "keypoints": "17x3"}, "pose"),
    ]
    for name, bias, shape, flags, task in cases:
        done = export_model(
            _bare(tmp_path, name, bias, **shape), tmp_path / f"{name}.edgert", **flags
        )
        assert done.manifest["task"] == task, name
        assert done.manifest["export"]["described"][0].startswith(f"task {task}"), name
        assert "guessed from the output shapes" in done.manifest["export"]["described"][0]
    e2e = json.loads((tmp_path / "e2e.edgert" / "manifest.json").read_text())
    assert e2e["head"]["form"] == "end2end"


@pytest.mark.subprocess
def test_shapes_that_could_be_several_tasks_name_the_flags_to_give(tmp_path):
    """[1, 57, 1024] is detect with 53 classes, pose with 2 classes and 17 x 3 keypoints, or obb
    with 52: the export makes a generic bundle and says which flags decode it."""
    onnx_path = _bare(tmp_path, "m", BOX + SCORES + KPTS)
    proc = run_cli("export", onnx_path, "-o", tmp_path / "m.edgert")
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout + proc.stderr
    assert "--task detect, pose (with --keypoints KxD) or obb" in said
    manifest = json.loads((tmp_path / "m.edgert" / "manifest.json").read_text())
    assert manifest["task"] == "generic"
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\nperson\n")
    proc = run_cli("export", onnx_path, "-o", tmp_path / "l.edgert", "--labels", labels)
    assert "51 values after the labels' 2 classes" in proc.stdout + proc.stderr


def test_labels_that_do_not_fit_a_yolo_head_are_one_sentence(tmp_path):
    """--labels naming 3 classes for a head of 4 + 2 classes: refused at export, before any frame
    fails to decode."""
    labels = tmp_path / "labels.txt"
    labels.write_text("a\nb\nc\n")
    onnx_path = _bare(tmp_path, "det", BOX + SCORES)
    with pytest.raises(ModelError, match=r"name 3 classes .* holds 4 box values, 2 classes"):
        export_model(onnx_path, tmp_path / "a.edgert", task="detect", labels=labels)
    assert not (tmp_path / "a.edgert").exists()
    pose = _bare(tmp_path, "pose", BOX + SCORES + KPTS)
    with pytest.raises(ModelError, match="2 classes and 51 values after them"):
        export_model(pose, tmp_path / "p.edgert", task="pose", labels=labels, keypoints="17x3")


def _checkpoint(path):
    """A torch.save archive whose pickle names Ultralytics' DetectionModel (never unpickled: edgert
    reads it as bytes): what `yolo train` leaves as best.pt, as far as edgert looks."""
    import zipfile

    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("best/data.pkl", b"\x80\x02cultralytics.nn.tasks\nDetectionModel\nq\x00.")
        zf.writestr("best/version", "3\n")
    return path


@pytest.mark.subprocess
def test_an_ultralytics_checkpoint_says_what_it_needs(tmp_path):
    """Without --trust-pickle: one sentence (it is a pickle); with it, where ultralytics is not
    installed: one sentence naming the two ways (tests/ultralytics exports a real one)."""
    pt = _checkpoint(tmp_path / "best.pt")
    assert_user_error(
        run_cli("export", pt, "-o", tmp_path / "a.edgert"),
        "is an Ultralytics checkpoint",
        "--trust-pickle",
    )
    import importlib.util

    if importlib.util.find_spec("ultralytics") is None:
        assert_user_error(
            run_cli("export", pt, "-o", tmp_path / "a.edgert", "--trust-pickle"),
            "ultralytics is not installed here",
            "yolo export model=best.pt format=onnx opset=17",
            "replaces this environment's torch",
        )
    assert not (tmp_path / "a.edgert").exists()
