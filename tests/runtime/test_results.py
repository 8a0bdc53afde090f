"""Typed results (runtime/results.py) and the tasks' hooks: the records are the JSON edgert has
always written, every task model gives a Result, and what a result means to a check, the
overlay or ``edgert run`` is its task's hook; a task without a measure is refused, never passed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgert.apps.camera.overlay import draw
from edgert.apps.swap.core import agreement, judge, refuse_to_compare
from edgert.apps.swap.options import SwapOptions
from edgert.export import export_model
from edgert.quantize import gate
from edgert.runtime.results import ClassScore, Detection, Embedding, Result, SemanticMask
from edgert.runtime.tasks import TASK_SPECS, load_task_model, task_spec
from tests.tiny import blob_detector_bundle, classifier_bundle


def _segmenter_bundle(folder: Path) -> Path:
    """A real per-pixel classifier: a 1x1 convolution of the image to 3 class scores [N, 3, H, W]
    (class 2 where blue is brightest, ...)."""
    w = np.eye(3, dtype=np.float32).reshape(3, 3, 1, 1)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["scores"])],
        "tiny_segmenter",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 3, 16, 16])],
        initializer=[helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())],
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "seg.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    pre = {"resize": "stretch", "size": "16x16", "scale": 1 / 255}
    return export_model(str(path), folder / "seg.edgert", task="segment", preprocess=pre).bundle


def _bright_square(h=96, w=128, at=(40, 30), side=24) -> np.ndarray:
    img = np.zeros((h, w, 3), np.uint8)
    x, y = at
    img[y : y + side, x : x + side] = 255
    return img


def test_the_records_are_the_json_edgert_writes():
    d = Detection((10.123456, 20.5, 30.0049, 40.0), 0.8765432, 2, "car")
    plain = Result.of_objects([d], "detect")
    assert plain.to_records() == [
        {"box": [10.12, 20.5, 30.0, 40.0], "label": "car", "score": 0.87654, "class_id": 2}
    ]
    assert list(plain.to_records()[0]) == ["box", "label", "score", "class_id"]
    # tracked: every record says its track (None: no confirmed track yet), after the fixed fields
    tracked = Result.of_objects([d, Detection((0, 0, 1, 1), 0.5, 0, "person", 7)], tracked=True)
    assert [r["track_id"] for r in tracked.to_records()] == [None, 7]
    # a tracker's prediction: its age an extra after track_id, and marked predicted
    coasted = Result.of_objects(
        [Detection((0, 0, 1, 1), 0.5, 0, "person", 7, {"age_s": 1.25})],
        tracked=True,
        predicted=True,
    )
    record = coasted.to_records()[0]
    assert list(record)[-3:] == ["track_id", "age_s", "predicted"] and record["age_s"] == 1.25
    classes = Result.of_classes([ClassScore(3, "tabby", 0.91234567), ClassScore(1, "dog", 0.05)])
    assert classes.to_records()[0] == {"label": "tabby", "index": 3, "score": 0.912346}
    assert classes.held().to_records()[1]["predicted"] is True
    assert classes.top() == ("tabby", pytest.approx(0.91234567))
    mask = np.array([[0, 2], [2, 2]], np.int32)
    semantic = Result("semantic", semantic=SemanticMask.of(mask))
    assert semantic.to_records() == {"mask_shape": [2, 2], "classes": {0: 1, 2: 3}}
    assert semantic.held().to_records() == semantic.to_records()  # one record: nothing to mark
    raw = Result("raw", raw={"y": {"shape": [4], "dtype": "float32"}})
    assert json.loads(json.dumps(raw.to_records())) == {"y": {"shape": [4], "dtype": "float32"}}
    # a written record read back is the same object
    back = Detection.from_record(tracked.to_records()[1])
    assert back == Detection((0.0, 0.0, 1.0, 1.0), 0.5, 0, "person", 7)
    with pytest.raises(ValueError, match="kind is one of"):
        Result("boxes")


def test_every_task_model_gives_typed_results_of_its_task(tmp_path):
    """A real detector, classifier and segmenter through ONNX Runtime: a Result of its kind,
    stamped with its task (what the hooks are found by)."""
    img = _bright_square()
    with load_task_model(blob_detector_bundle(tmp_path / "det")) as det:
        r = det(img)
    assert r.kind == "objects" and r.task == "detect" and r.objects
    best = max(r.objects, key=lambda o: o.score)
    assert best.label == "blob" and best.box == pytest.approx((40, 30, 64, 54), abs=4)
    with load_task_model(classifier_bundle(tmp_path / "cls"), top_k=2) as cls:
        c = cls(img)
    assert c.kind == "classes" and c.task == "classify" and len(c.classes) == 2
    assert {x.label for x in c.classes} <= {"cat", "dog", "bird"}
    blue = np.zeros((32, 32, 3), np.uint8)
    blue[:, :16, 0] = 200  # BGR: blue on the left half, the model sees RGB (class 2 there)
    with load_task_model(_segmenter_bundle(tmp_path / "seg")) as seg:
        s = seg(blue)
    assert s.kind == "semantic" and s.task == "segment" and s.semantic.mask.shape == (16, 16)
    assert s.semantic.classes[2] == 16 * 8  # the left half
    assert s.to_records()["mask_shape"] == [16, 16]


@dataclass
class _Model:  # what refuse_to_compare reads of a task model
    task: str
    labels: tuple = ()


def test_a_task_without_a_measure_is_refused_never_passed():
    """--swap-check on a segmenter (or a generic model) says it cannot judge; it used to pass
    any boxless task with a box F1 of 1.0."""
    for name, spec in TASK_SPECS.items():
        why = refuse_to_compare(_Model(name), _Model(name))
        if spec.compare is None:
            assert why == f"edgert has no measure to compare two {name} models' results by"
        else:
            assert why is None, name
    assert "cannot be checked against" in refuse_to_compare(_Model("detect"), _Model("classify"))


def test_each_measured_task_passes_its_own_results_and_refuses_others():
    o = SwapOptions(check=True)
    box = Detection((10, 10, 50, 50), 0.9, 0, "person")
    moved = Detection((60, 60, 100, 100), 0.9, 0, "person")
    frames = {
        "detect": ([Result.of_objects([box], "detect")] * 5, [Result.of_objects([moved])] * 5),
        "faces": ([Result.of_objects([box], "faces")] * 5, [Result.of_objects([])] * 5),
        # the tasks whose objects are boxes with more (keypoints, a mask, an angle): their boxes
        **{
            task: ([Result.of_objects([box], task)] * 5, [Result.of_objects([moved], task)] * 5)
            for task in ("pose", "segment-instances", "obb")
        },
        # ... and their own shapes where the boxes stay: keypoints moved, a mask shifted, an
        # oriented box turned to the mirror angle (the same upright box)
        **{
            f"{task}+": (
                [Result.of_objects([box.with_extras(**a)], task)] * 5,
                [Result.of_objects([box.with_extras(**b)], task)] * 5,
            )
            for task, a, b in (
                (
                    "pose",
                    {"keypoints": [[20, 20, 1.0], [40, 40, 1.0]]},
                    {"keypoints": [[45, 45, 1.0], [10, 10, 1.0]]},
                ),
                (
                    "segment-instances",
                    {"polygon": [[10, 10], [30, 10], [30, 50], [10, 50]]},
                    {"polygon": [[32, 10], [50, 10], [50, 50], [32, 50]]},
                ),
                ("obb", {"rbox": [30, 30, 50, 10, 0.6]}, {"rbox": [30, 30, 50, 10, -0.6]}),
            )
        },
        "classify": (
            [Result.of_classes([ClassScore(0, "cat", 0.9)])] * 5,
            [Result.of_classes([ClassScore(1, "dog", 0.9)])] * 5,
        ),
        # an encoder: five frames' vectors, and a candidate's of another space
        "embed": tuple(
            [Result("embedding", "embed", embedding=Embedding(v, 1.0)) for v in vs]
            for vs in (np.eye(8, dtype=np.float32)[:5], np.eye(8, dtype=np.float32)[3:])
        ),
    }
    assert {n for n, s in TASK_SPECS.items() if s.compare is not None} == {
        n.rstrip("+") for n in frames
    }
    for key, (ref, other) in frames.items():
        name = key.rstrip("+")
        same = agreement(name, ref, ref)
        assert judge(name, same, o, "live frames") is None, name
        why = judge(name, agreement(name, ref, other), o, "live frames")
        assert why is not None and "5 live frames" in why, (key, why)
        if key.endswith("+"):
            assert agreement(name, ref, other)["box_f1"] == 1.0
            assert any(w in why for w in ("keypoints", "masks", "oriented boxes")), why


def test_the_gate_and_the_swap_check_measure_boxes_alike():
    """The INT8 gate's box F1 is the detect task's compare (by class id there, by label in a swap
    check): the same number on the same boxes."""
    ref = [[Detection((0, 0, 10, 10), 0.9, 1, "a"), Detection((20, 20, 30, 30), 0.8, 2, "b")]] * 3
    got = [[Detection((1, 1, 10, 10), 0.9, 1, "a")]] * 3
    by_gate = gate.box_agreement(ref, got)
    by_swap = agreement(
        "detect", [Result.of_objects(r) for r in ref], [Result.of_objects(g) for g in got]
    )
    assert by_gate["box_f1"] == pytest.approx(by_swap["box_f1"]) == pytest.approx(2 / 3)
    assert by_gate["boxes_fp32"] == by_swap["boxes_per_frame"] == 2


def test_the_overlay_and_edgert_run_use_the_tasks_hooks():
    image = np.zeros((120, 160, 3), np.uint8)
    boxes = Result.of_objects([Detection((20, 30, 80, 90), 0.9, 0, "person", 3)], "detect")
    drawn = draw(image, boxes, [])
    assert drawn[30, 50].any() and drawn[60, 50].sum() == 0  # the box's edge, not its inside
    assert draw(image, boxes.replace(task=""), []).sum() == 0  # no task: nothing to draw
    top = Result.of_classes([ClassScore(0, "cat", 0.9)], "classify")
    assert draw(image, top, [])[:30].any()  # the top label in the corner
    assert task_spec("classify").lines(top) == ["   0.9000  cat"]
    assert task_spec("detect").lines(boxes) == [
        f"   0.9000  {'person':<20} [20.0, 30.0, 80.0, 90.0]"
    ]
    raw = Result("raw", "generic", raw={"y": {"shape": [4], "dtype": "float32"}})
    assert task_spec("generic").lines(raw) == ['  {"y": {"shape": [4], "dtype": "float32"}}']
    assert task_spec("detect").pairs(boxes) == [("person", 0.9)]
    assert task_spec("segment").pairs(Result("semantic")) == []
