"""Hostile Ultralytics metadata (review 6, G13, G17, G22): each refused by ``edgert export`` in
one sentence, exit 2, before it costs memory or writes a bundle; what is printed and stored of it
is escaped; and a bundle an older edgert wrote with no class is refused when it is opened, not
on its first frame. The models are the review's: an ONNX whose ``output0`` is a constant array
(plus 0 x the input's mean), carrying the metadata under test."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import assert_user_error, run_cli

# one candidate: a box centred at (320, 320), 50 x 50, class 0 at 0.9 and class 1 at 0
ONE = [[[320], [320], [50], [50], [0.9], [0.0]]]


def const_onnx(path, props: dict, values, size: int = 640, ultralytics: bool = True):
    """[1, 3, size, size] -> ``output0`` = ``values`` (a constant), Ultralytics' ``props``
    (values as ``str()`` writes them) in its metadata (none unless ``ultralytics``)."""
    c = np.asarray(values, np.float32)
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], keepdims=0),
        helper.make_node("Mul", ["m", "zero"], ["z"]),
        helper.make_node("Add", ["c", "z"], ["output0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "const",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, list(c.shape))],
        initializer=[
            numpy_helper.from_array(c, "c"),
            helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    meta = {"author": "Ultralytics", "task": "detect", "imgsz": str(size), **props}
    if ultralytics:
        helper.set_model_props(model, {k: str(v) for k, v in meta.items()})
    onnx.save(model, str(path))
    return path


def refused(tmp_path, props: dict, values, *said: str, size: int = 640) -> None:
    """Export of such a model: one sentence naming the metadata, exit 2, no bundle."""
    onnx_path = const_onnx(tmp_path / "m.onnx", props, values, size)
    proc = run_cli("export", onnx_path, "-o", tmp_path / "m.edgert")
    assert_user_error(proc, "Ultralytics metadata", *said)
    assert "internal error" not in proc.stderr
    assert not (tmp_path / "m.edgert").exists()


@pytest.mark.subprocess
def test_names_over_its_bound_are_refused_before_they_are_parsed(tmp_path):
    """G13: a million names (about 18 MiB of text) took 14-27 s and 2.2 GB to parse before the
    manifest refused them; the text's size is refused first (4 MiB: 100,000 labels of about 30
    characters)."""
    names = "{" + ", ".join(f"{i}: 'c{i}'" for i in range(10**6)) + "}"
    refused(tmp_path, {"names": names}, ONE, "names is 1", "at most 4.0 MiB")


@pytest.mark.subprocess
def test_other_values_edgert_parses_are_bounded_too(tmp_path):
    refused(tmp_path, {"names": {0: "a", 1: "b"}, "imgsz": "[" * 5000}, ONE, "imgsz is")
    refused(tmp_path, {"names": {0: "a", 1: "b"}, "task": "x" * 10**5}, ONE, "task is")


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "names, said",
    [
        ("{0: 'a', '1': 'b'}", "names has the key '1'; class ids are the integers"),
        ("{0: 'a', None: 'b'}", "names has the key None"),
        ("{0: 'a', 2: 'b'}", "1 missing, 2 beyond"),
        ("{}", "names is empty"),
        ("['a', 'b']", "names is a list"),
        ("{0: None, 1: 'b'}", "names[0] is None, not a string"),
        ("{0: 'a', 1: b'\\xff\\x00'}", "names[1] is b'\\xff\\x00', not a string"),
        ("{0: '', 1: 'b'}", "names[0] '' must be"),
        ("{0: 'a', 1: 'a\\x1b[2J'}", "without control characters"),
        ("{0: 'person', 1: 'person'}", "names[0] and names[1] are both 'person'"),
    ],
)
def test_names_that_are_not_classes_are_one_sentence(tmp_path, names, said):
    """G17, G22: mixed key types were "internal error: TypeError"; no class exported and then
    crashed every run; names that are not strings became labels "None" and "b'\\xff\\x00'"."""
    refused(tmp_path, {"names": names}, ONE, said)


@pytest.mark.subprocess
def test_no_names_at_all_is_one_sentence(tmp_path):
    """G17: the author alone says Ultralytics; a missing names was "internal error: KeyError"."""
    refused(tmp_path, {}, ONE, "has no names")


@pytest.mark.subprocess
def test_a_keypoint_shape_over_the_bound_names_the_metadata(tmp_path):
    """G22: kpt_shape [1001, 3] was refused as the manifest's head.kpt_shape; --keypoints
    1001x3 as well."""
    props = {"task": "pose", "names": {0: "p"}, "kpt_shape": [1001, 3]}
    refused(tmp_path, props, np.zeros((1, 4 + 1 + 3003, 2)), "kpt_shape", "from 1 to 1000")
    bare = const_onnx(tmp_path / "p.onnx", {}, np.zeros((1, 3008, 2)), ultralytics=False)
    proc = run_cli(
        "export", bare, "-o", tmp_path / "p.edgert", "--task", "pose", "--keypoints", "1001x3"
    )
    assert_user_error(proc, "--keypoints 1001x3", "from 1 to 1000")


@pytest.mark.subprocess
def test_the_version_is_escaped_where_it_is_printed_and_stored(tmp_path):
    """G22: an ANSI escape (clear screen) and a line break in ``version`` reached the terminal
    and the manifest's export.described."""
    version = "8.4\x1b[2J\nFORGED LINE" + "x" * 200
    onnx_path = const_onnx(
        tmp_path / "v.onnx", {"names": {0: "a", 1: "b"}, "version": version}, ONE
    )
    proc = run_cli("export", onnx_path, "-o", tmp_path / "v.edgert")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\nFORGED" not in proc.stdout
    assert "Ultralytics 8.4\\x1b[2J\\nFORGED LINE" in proc.stdout
    manifest = json.loads((tmp_path / "v.edgert" / "manifest.json").read_text())
    said = manifest["export"]["described"][0]
    assert "\x1b" not in said and "\n" not in said and "x" * 41 not in said


def _old_bundle(tmp_path, labels):
    """A detector bundle whose head [1, 4, 1] leaves no class: what an older edgert wrote for
    names {} (labels null), or a hand-edited one (labels []): here a generic export of such a
    graph whose manifest is edited to say detect."""
    onnx_path = const_onnx(tmp_path / "z.onnx", {}, np.zeros((1, 4, 1)), ultralytics=False)
    done = run_cli("export", onnx_path, "-o", tmp_path / "z.edgert", "--resize", "letterbox")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "z.edgert" / "manifest.json"
    manifest = json.loads(path.read_text())
    assert manifest["task"] == "generic" and manifest["outputs"][0]["shape"] == [1, 4, 1]
    manifest["task"] = "detect"
    manifest["labels"] = labels
    path.write_text(json.dumps(manifest))
    return tmp_path / "z.edgert"


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "labels, said", [(None, "leaves no class scores"), ([], "labels is an empty list")]
)
def test_a_bundle_with_no_class_is_refused_when_it_is_opened(tmp_path, labels, said):
    """G17: such a bundle crashed `run` (IndexError) and `camera` (argmax of an empty
    sequence) on every frame."""
    import cv2

    bundle = _old_bundle(tmp_path, labels)
    cv2.imwrite(str(tmp_path / "g.png"), np.full((64, 64, 3), 128, np.uint8))
    assert_user_error(run_cli("run", bundle, tmp_path / "g.png"), "manifest.json", said)
    camera = run_cli(
        "camera",
        bundle,
        "--source",
        "synthetic://",
        "--headless",
        "--max-frames",
        "3",
        timeout=120,
    )
    assert_user_error(camera, said)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "props",
    [
        {"edgert.task": "bogus\x1b[2J"},  # was "internal error: KeyError" with the escape raw
        {"edgert.task": "detect", "edgert.labels": "[" * 100_000},  # was RecursionError
        {"edgert.task": "detect", "edgert.labels": '{"a": 1}'},  # became the labels ["a"]
        {"edgert.task": "detect", "edgert.labels": "[]"},
    ],
)
def test_edgert_metadata_that_no_manifest_could_hold_is_not_used(tmp_path, props):
    """The same mistake in the metadata edgert writes into model.onnx (edgert.*): what a manifest
    could not hold is not read, and the model is described as one without metadata."""
    onnx_path = const_onnx(tmp_path / "e.onnx", {}, ONE, ultralytics=False)
    model = onnx.load(str(onnx_path))
    helper.set_model_props(model, {"edgert.format": "edgert-bundle/1", **props})
    onnx.save(model, str(onnx_path))
    proc = run_cli("export", onnx_path, "-o", tmp_path / "e.edgert")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "e.edgert" / "manifest.json").read_text())
    assert manifest["task"] == "generic" and manifest["labels"] is None


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "name, text, said",
    [
        ("l.json", '["a", "b\\u001b[2J"]', "without control characters"),
        ("l.txt", "a\nb\x1b[2J\n", "without control characters"),
        ("l.json", "[]", "is empty"),
    ],
)
def test_a_labels_file_is_held_to_what_a_manifest_holds(tmp_path, name, text, said):
    """The same for --labels: an escape in a label was written into the manifest (and printed
    by every run), an empty JSON list was a bundle of no labels; refused naming the file."""
    labels = tmp_path / name
    labels.write_text(text)
    onnx_path = const_onnx(tmp_path / "d.onnx", {}, ONE, ultralytics=False)
    proc = run_cli(
        "export", onnx_path, "-o", tmp_path / "d.edgert", "--task", "detect", "--labels", labels
    )
    assert_user_error(proc, f"labels file {labels}", said)
    assert not (tmp_path / "d.edgert").exists()


@pytest.mark.subprocess
def test_running_an_onnx_whose_edgert_metadata_is_too_deep(tmp_path):
    """`edgert run MODEL.onnx` reads the same metadata: labels nested 100,000 deep were "internal
    error: RecursionError"; now they are ignored with a warning, as other unreadable metadata."""
    import cv2

    onnx_path = const_onnx(tmp_path / "e.onnx", {}, ONE, ultralytics=False)
    model = onnx.load(str(onnx_path))
    props = {"edgert.format": "edgert-bundle/1", "edgert.labels": "[" * 100_000}
    helper.set_model_props(model, props)
    onnx.save(model, str(onnx_path))
    cv2.imwrite(str(tmp_path / "g.png"), np.full((64, 64, 3), 128, np.uint8))
    proc = run_cli("run", onnx_path, tmp_path / "g.png")
    assert "ignoring unreadable edgert metadata" in proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
