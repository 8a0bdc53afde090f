"""The gate's detector metric: boxes of FP32 and of the quantized model paired by class and IoU."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgert.quantize import gate
from edgert.runtime.tasks.detection import matched_boxes


def test_matched_boxes_pairs_by_class_and_overlap_once_each():
    a = [[0, 0, 10, 10], [20, 20, 30, 30], [0, 0, 10, 10], [50, 50, 60, 60]]
    b = [[1, 1, 10, 10], [20, 20, 30, 30], [50, 50, 52, 52]]
    # box 0 and box 2 of a both overlap b's box 0 (IoU 0.81): it is used once; the class-1 box
    # pairs only with the class-1 box; a's last box overlaps b's last by 0.04 only
    assert matched_boxes(a, [0, 1, 0, 2], b, [0, 1, 2]) == 2
    assert matched_boxes(a, [0, 1, 0, 2], b, [1, 0, 2]) == 0  # right places, wrong classes
    assert matched_boxes([], [], b, [0, 1, 2]) == 0
    assert matched_boxes(a[:1], [0], b[:1], [0], min_iou=0.9) == 0


def _yolo_v8(boxes, scores) -> np.ndarray:
    """[1, 4 + classes, anchors]: centre x, y, width, height rows, then a score row per class;
    padded with empty anchors (a head has many more anchors than rows)."""
    head = np.concatenate([np.asarray(boxes, np.float32).T, np.asarray(scores, np.float32).T])
    return np.pad(head, ((0, 0), (0, 16 - head.shape[1])))[None]


def test_box_f1_of_a_yolo_head():
    boxes = [[20, 20, 10, 10], [60, 60, 16, 16], [100, 30, 12, 12]]
    scores = [[0.9, 0.1], [0.1, 0.8], [0.7, 0.2]]
    ref = {"out": _yolo_v8(boxes, scores)}
    same = gate.evaluate(ref, {"out": _yolo_v8(boxes, scores)}, "detect")
    assert same.metrics["box_f1"] == 1.0
    assert same.metrics["map50"] == same.metrics["map50_95"] == 1.0
    moved = [boxes[0], [80, 80, 16, 16], boxes[2]]  # one box moved off its place
    flipped = [scores[0], scores[1], [0.2, 0.7]]  # one box's class changed
    ev = gate.evaluate(ref, {"out": _yolo_v8(moved, flipped)}, "detect")
    assert ev.metrics["box_f1"] == 2 * 1 / (3 + 3)
    # mAP against FP32's boxes: class 0 finds one of its two at precision 1 (recall 0.5: 51 of
    # COCO's 101 recall points), class 1 none of its one
    assert ev.metrics["map50"] == pytest.approx((51 / 101 + 0.0) / 2)


def _detector(tmp_path, builder: str):
    """A [N, 64, 4 + 3] detector bundle (tests/export/models.py) and 300 calibration inputs."""
    from tests.tiny import models_bundle

    bundle = models_bundle(tmp_path, builder, ("never", "bird", "kite"))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "calib.npz", input=rng.uniform(0, 1, (300, 3, 32, 32)).astype(np.float32))
    return bundle, str(tmp_path / "calib.npz")


def test_int8_build_reads_a_transposed_head_with_the_bundles_classes(tmp_path):
    """A [N, anchors, 4 + nc] head: the gate must decode it with the bundle's class count (3), not
    guess the layout from its shape (64 x 7 looks like YOLOv5's [N, anchors, 5 + nc], whose
    objectness column here is class 0 that never fires: no boxes on either side, F1 1.0 for
    nothing)."""
    from edgert.quantize import build

    bundle, calib = _detector(tmp_path, "build_transposed_yolo")
    report = build(bundle, "int8", calib=calib, calib_size=200, holdout_size=100, prepare="none")
    holdout = json.loads((bundle / "manifest.json").read_text())["quantization"]["int8"]["holdout"]
    assert holdout["boxes_fp32"] > 1.0  # FP32 boxes per hold-out image, as the app would decode
    assert 0.9 <= holdout["box_f1"] <= 1.0
    assert report.files


def test_a_detector_that_finds_nothing_on_the_holdout_is_flagged(tmp_path):
    """Box F1 of a detector that finds no boxes is 1.0 and says nothing: the build says so."""
    from edgert.quantize import build

    bundle, calib = _detector(tmp_path, "build_silent_yolo")
    said: list[str] = []
    build(
        bundle,
        "int8",
        calib=calib,
        calib_size=200,
        holdout_size=100,
        prepare="none",
        say=said.append,
    )
    holdout = json.loads((bundle / "manifest.json").read_text())["quantization"]["int8"]["holdout"]
    assert holdout["boxes_fp32"] == 0 and holdout["box_f1"] == 1.0
    warning = [s for s in said if "finds no boxes" in s]
    assert len(warning) == 1 and "box F1 judges nothing" in warning[0], said


def _blob(tmp_path, head: str):
    """The blob detector of tests.tiny with ``head`` (pose, segment, obb), its bundle's manifest
    and its FP32 outputs on 6 frames with a bright square each."""
    from edgert.export import export_model
    from edgert.runtime import Engine
    from edgert.runtime.bundle import Bundle
    from tests.tiny import blob_detector

    onnx_path = blob_detector(tmp_path / f"{head}.onnx", head=head, ultralytics=True)
    bundle = export_model(str(onnx_path), tmp_path / f"{head}.edgert").bundle
    frames = []
    for k in range(6):
        x = np.zeros((1, 3, 96, 128), np.float32)
        x[..., 20 + 4 * k : 44 + 4 * k, 16 + 12 * k : 40 + 12 * k] = 1.0
        frames.append(x)
    with Engine.load(bundle, backend="onnxruntime") as engine:
        outs = [engine.infer(x) for x in frames]
    ref = {name: np.concatenate([o[name] for o in outs]) for name in outs[0]}
    return Bundle(bundle).manifest, ref


def test_pose_gate_judges_the_keypoints_not_only_the_boxes(tmp_path):
    manifest, ref = _blob(tmp_path, "pose")
    task = gate.Task.of(manifest)
    same = gate.evaluate(ref, {k: v.copy() for k, v in ref.items()}, task)
    assert same.metrics["box_f1"] == 1.0 and same.metrics["keypoint_f1"] == 1.0
    assert same.metrics["keypoint_oks"] == 1.0 and same.passes(gate.parse_gate(None))
    moved = {k: v.copy() for k, v in ref.items()}
    moved["output0"][:, 5::3] += 6.0  # every keypoint 6 px right (the boxes are 24 px)
    ev = gate.evaluate(ref, moved, task)
    assert ev.metrics["box_f1"] == 1.0  # the boxes did not move
    assert ev.metrics["keypoint_f1"] == 0.0 and ev.metrics["keypoint_oks"] < 0.3
    assert any(f.startswith("keypoint_f1") for f in ev.failures(gate.parse_gate(None)))
    slightly = {k: v.copy() for k, v in ref.items()}
    slightly["output0"][:, 5::3] += 0.5  # half a pixel: the same keypoints
    ev = gate.evaluate(ref, slightly, task)
    assert ev.metrics["keypoint_f1"] == 1.0 and ev.metrics["keypoint_oks"] > 0.8


def test_instance_gate_judges_the_masks_not_only_the_boxes(tmp_path):
    manifest, ref = _blob(tmp_path, "segment")
    task = gate.Task.of(manifest)
    same = gate.evaluate(ref, {k: v.copy() for k, v in ref.items()}, task)
    assert same.metrics["mask_f1"] == 1.0 and same.metrics["mask_iou"] == 1.0
    shifted = {k: v.copy() for k, v in ref.items()}
    shifted["output1"] = np.roll(ref["output1"], 4, axis=3)  # prototypes 4 cells (16 px) right
    ev = gate.evaluate(ref, shifted, task)
    # the weaker neighbours' masks are shifted out of their boxes (dropped, as empty masks are)
    assert ev.metrics["box_f1"] >= 0.85 and ev.metrics["mask_f1"] < ev.metrics["box_f1"] - 0.5
    assert ev.metrics["mask_iou"] < 0.5
    assert any(f.startswith("mask_f1") for f in ev.failures(gate.parse_gate(None)))


def test_obb_gate_judges_the_angle_the_upright_boxes_do_not_see(tmp_path):
    """A 60 x 16 box at +0.5 and at -0.5 radians has the same upright box around it: box F1
    cannot tell them apart; the rotated IoU does."""
    manifest, _ = _blob(tmp_path, "obb")

    def head(angle):
        out = np.zeros((1, 6, 4), np.float32)
        out[0, :, 0] = [64, 48, 60, 16, 0.9, angle]
        return {"output0": out}

    task = gate.Task.of(manifest)
    ev = gate.evaluate(head(0.5), head(-0.5), task)
    assert ev.metrics["box_f1"] == 1.0
    assert ev.metrics["rbox_f1"] == 0.0 and ev.metrics["rbox_iou"] < 0.5
    assert gate.evaluate(head(0.5), head(0.51), task).metrics["rbox_f1"] == 1.0


def test_a_detectors_choices_follow_its_boxes_where_the_cosine_disagrees(tmp_path):
    """A model built to show it (issue 49): two candidates of the blob detector. One moves every
    box 3 px (IoU 0.78 with FP32's: its outputs' cosine 0.999); the other leaves the boxes where
    they are but scales the box values of the anchors no frame lights up (a cosine far lower;
    those anchors never score). The cosine would choose the first; the build chooses the second,
    by mAP50-95 against FP32's boxes, and says so."""
    import onnx
    from onnx import numpy_helper

    from edgert.export import export_model
    from edgert.quantize import evaluate, qdq_search
    from edgert.runtime.bundle import Bundle
    from tests.tiny import blob_detector

    onnx_path = blob_detector(tmp_path / "det.onnx")
    labels = tmp_path / "labels.txt"
    labels.write_text("blob\n")
    bundle = export_model(
        str(onnx_path),
        tmp_path / "det.edgert",
        task="detect",
        labels=labels,
        preprocess={"resize": "stretch", "size": "96x128", "scale": 1 / 255},
    ).bundle
    fp32 = onnx.load(str(onnx_path))
    frames = np.zeros((8, 3, 96, 128), np.float32)
    for k in range(8):  # squares in the top-left half only
        frames[k, :, 8 + 3 * k : 32 + 3 * k, 8 + 4 * k : 32 + 4 * k] = 1.0
    ref = evaluate.run(fp32, frames)

    def variant(change):
        model = onnx.ModelProto()
        model.CopyFrom(fp32)
        init = next(i for i in model.graph.initializer if i.name == "boxes")
        boxes = numpy_helper.to_array(init).copy()
        change(boxes)
        init.CopyFrom(numpy_helper.from_array(boxes, "boxes"))
        return model

    def shift(b):
        b[0, 0] += 3.0

    def dark(b):  # the anchors whose centre is right of x 80 or below y 64: never lit here
        far = (b[0, 0] > 80) | (b[0, 1] > 64)
        b[0, :, far] *= 0.3

    candidates = {"minmax": variant(shift), "percentile": variant(dark)}
    candidates.update(entropy=candidates["minmax"], mse=candidates["minmax"])

    class Stats:
        def thresholds(self, method):
            return {"method": method}

    choice = qdq_search.choose_method(
        fp32,
        Stats(),
        frames,
        ref,
        gate.Task.of(Bundle(bundle).manifest),
        None,
        lambda s: None,
        quantize=lambda model, thresholds, sample: candidates[thresholds["method"]],
    )
    moved, kept = choice.scores["minmax"], choice.scores["percentile"]
    assert moved["cosine"] > kept["cosine"] + 0.01  # the cosine prefers the moved boxes
    assert kept["map50_95"] == 1.0 and moved["map50_95"] < 0.8
    assert choice.method == "percentile" and "mAP50-95 against FP32's boxes" in choice.why


def test_the_default_detector_gate_is_map_not_f1_at_the_threshold():
    """Issue 49: a candidate whose scores merely cross the model's 0.25 (each box still found and
    ranked first: mAP 1.0) passes the default gate although its box F1 is 0.5; one whose boxes all
    moved by a quarter of their width (IoU 0.6) fails it on mAP50-95 though its box F1 is 1.0; an explicit box F1 rule still applies,
    and the face detector's rules get box F1's default."""
    boxes = [[20, 20, 10, 10], [60, 60, 16, 16], [100, 30, 12, 12], [40, 90, 14, 14]]
    ref = {"out": _yolo_v8(boxes, [[0.9], [0.3], [0.8], [0.27]])}
    crossed = gate.evaluate(ref, {"out": _yolo_v8(boxes, [[0.9], [0.2], [0.8], [0.24]])}, "detect")
    assert crossed.metrics["box_f1"] == pytest.approx(2 * 2 / (4 + 2))
    assert crossed.metrics["map50_95"] == 1.0 and crossed.passes(gate.parse_gate(None))
    assert not crossed.passes(gate.parse_gate("box_f1>=0.9"))
    moved = [[x + w / 4, y, w, h] for x, y, w, h in boxes]
    off = gate.evaluate(ref, {"out": _yolo_v8(moved, [[0.9], [0.3], [0.8], [0.27]])}, "detect")
    assert off.metrics["box_f1"] == 1.0 and off.metrics["map50_95"] < 0.4
    assert [f.split()[0] for f in off.failures(gate.parse_gate(None))] == ["map50_95"]
    assert gate.with_box_f1(gate.parse_gate(None))["box_f1"] == 0.9
    assert gate.with_box_f1({}) == {}  # --gate off stays off


def test_labels_without_a_box_are_not_a_perfect_map_and_fail_a_labels_rule():
    """Against labels with no box, COCO's "nothing judged" gave FP32 and INT8 a labels mAP of
    1.0 while every detection was false, and a `labels_*` gate passed (round 6, G9). The labels'
    mAPs are now absent (their counts reported), and a rule on them fails with a sentence; a gate
    without labels rules, and the FP32-vs-INT8 mAP's convention, are unchanged."""
    from edgert.quantize.box_map import mean_average_precision
    from edgert.runtime.results import Detection

    dets = [[Detection((2.0, 2.0, 9.0, 9.0), 0.9, 0, "a")] for _ in range(3)]
    region = (0.0, 0.0, 32.0, 32.0)
    empty = [(np.zeros((0, 4)), [], region)] * 3
    got = gate.labels_map(dets, dets, empty)
    assert got == {"labelled_samples": 3.0, "labelled_boxes": 0.0}
    assert gate.labels_map(dets, dets, [None] * 3) == {
        "labelled_samples": 0.0,
        "labelled_boxes": 0.0,
    }
    ev = gate.Evaluation({"cosine": 1.0, "map50_95": 1.0, **got})
    failures = ev.failures(gate.parse_gate("labels_map50_95>=0.9"))
    assert failures == [
        "labels_map_drop is not measured: the labels hold no box on the 3 hold-out samples they "
        "label",
        "labels_map50_95 is not measured: the labels hold no box on the 3 hold-out samples they "
        "label",
    ]
    assert ev.passes({"cosine": 0.99, "map50_95": 0.85})
    # one labelled box: measured, and the detections that miss it score 0, not 1
    one = [(np.array([[20.0, 20.0, 30.0, 30.0]]), [0], region)] + empty[1:]
    measured = gate.labels_map(dets, dets, one)
    assert measured["labels_map50_95"] == measured["labels_map50_95_fp32"] == 0.0
    assert measured["labelled_boxes"] == 1.0
    # FP32 against INT8 keeps its convention: FP32 found nothing, INT8 nothing: agreement
    none = [(np.zeros((0, 4)), [])]
    assert mean_average_precision(none, [(np.zeros((0, 4)), [], [])])["map50_95"] == 1.0
