"""INT8 for detectors (issue 49): the head found from the graph and kept out of INT8 by rule, the
sensitivity pass ranked by the task's own measure, and what the manifest records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgert.quantize import evaluate, gate, int8, qdq_search, ranges
from edgert.quantize.head import find_head
from edgert.quantize.job import ensure_node_names
from tests.tiny import models_bundle

LABELS = ("kite", "bird", "plane")
HEAD = ("/cv2.0/cv2.0.2/Conv", "/cv3.0/cv3.0.2/Conv", "/cv2.1/cv2.1.2/Conv", "/cv3.1/cv3.1.2/Conv")


def _bundle(tmp_path, builder: str, task: str = "detect", shape: str = "1x3x32x32"):
    labels = LABELS if task == "detect" else None
    return models_bundle(tmp_path, builder, labels, task, shape)


def _model(bundle):
    import onnx

    m = onnx.load(str(bundle / "model.onnx"))
    ensure_node_names(m)
    return m


def _data(n: int = 300) -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 1, (n, 3, 32, 32)).astype(np.float32)


def test_the_head_of_a_yolov8_style_graph_is_its_branches_last_convolutions_and_dfl(tmp_path):
    """Walking back from the output through the decode arithmetic (sigmoid, anchors, strides,
    concatenations, reshapes) stops at each branch's last 1x1 convolution; DFL's expectation
    convolution, fed by its softmax, is decode arithmetic and the walk goes through it."""
    head = find_head(_model(_bundle(tmp_path, "build_yolo_style")))
    assert head is not None
    assert head.outputs == HEAD and head.decode == ("/dfl/Conv",)
    assert "4 output convolutions and 1 DFL" in head.describe()


@pytest.mark.parametrize("builder", ["build", "build_transposed_yolo"])
def test_no_head_on_a_classifier_or_a_single_convolution_output(tmp_path, builder):
    """A classifier's last layer, or one convolution whose output is decoded, is not a head of
    several branches joined: nothing is kept out by rule."""
    task = "detect" if builder == "build_transposed_yolo" else "classify"
    shape = "1x3x32x32" if task == "detect" else "1x3x8x8"
    assert find_head(_model(_bundle(tmp_path, builder, task, shape))) is None


def test_sensitivity_ranks_the_fragile_layer_first_by_map(tmp_path):
    """A detector in which one convolution (p4) is fragile in INT8: quantized alone it costs
    the most mAP50-95 against FP32's boxes, so the pass ranks it first, well ahead of the rest,
    and says the measure it ranked by."""
    model = _model(_bundle(tmp_path, "build_fragile_yolo_style"))
    data = _data()
    fit, validation = data[:200], data[200:264]
    nodes = ranges.quantizable_nodes(model)
    stats = ranges.collect(model, fit, ranges.activation_inputs(model, nodes))
    ref = evaluate.run(model, validation)
    task = gate.Task("detect", 3)
    ranked, measure = qdq_search.sensitivity(
        model,
        stats.thresholds("percentile"),
        [n.name for n in nodes],
        validation,
        ref,
        lambda s: None,
        task=task,
    )
    assert measure == "mAP50-95 against FP32's boxes"
    assert [n for n, _ in ranked][0] == "/p4/Conv"
    assert ranked[0][1] > 3 * ranked[1][1] > 0
    assert [loss for _, loss in ranked] == sorted((loss for _, loss in ranked), reverse=True)
    # a model that is not the same detector: without a task, the cosine, as before
    _, plain = qdq_search.sensitivity(
        model, stats.thresholds("percentile"), ["/p4/Conv"], validation, ref, lambda s: None
    )
    assert plain == "cosine"


def test_int8_build_keeps_the_head_out_and_records_why(tmp_path):
    """`edgert build --precision int8` on a YOLO-style detector: the head's nodes stay out of the
    Q/DQ model, and the manifest says which, why (by rule, with both measurements), and the share
    of the model's multiply-accumulates still in INT8."""
    from edgert.quantize import build

    bundle = _bundle(tmp_path, "build_yolo_style")
    np.savez(tmp_path / "calib.npz", input=_data())
    said: list[str] = []
    build(
        bundle,
        "int8",
        calib=str(tmp_path / "calib.npz"),
        calib_size=200,
        holdout_size=100,
        prepare="none",
        say=said.append,
    )
    q = json.loads((bundle / "manifest.json").read_text())["quantization"]["int8"]
    head = q["head"]
    assert head["nodes"] == [*HEAD, "/dfl/Conv"] and "DFL" in head["found"]
    scores = head["validation"]
    assert set(scores) == {"out_of_int8", "int8"}
    assert "map50_95" in scores["int8"] and "map50_95" in scores["out_of_int8"]
    key = "map50_95"
    assert head["kept_out"] == (
        (scores["out_of_int8"][key], scores["out_of_int8"]["cosine"])
        >= (scores["int8"][key], scores["int8"]["cosine"])
    )
    assert head["why"].startswith("by rule" if head["kept_out"] else "measured better in INT8")
    if head["kept_out"]:
        assert [k["node"] for k in q["kept_out"]][:5] == head["nodes"]
        assert all(k["why"] == "detector head (rule)" for k in q["kept_out"][:5])
    import onnx

    inside = set(int8.quantized_nodes(onnx.load(str(bundle / "model.int8.onnx"))))
    out = {k["node"] for k in q["kept_out"]}
    assert inside.isdisjoint(out) and len(inside) + len(out) == q["quantizable_nodes"]
    macs = ranges.node_macs(_model(bundle))
    assert q["macs_share"] == pytest.approx(
        sum(macs[n] for n in inside) / sum(macs.values()), abs=1e-4
    )
    assert 0.5 < q["macs_share"] < 1.0
    assert any("leaves out the head's 4 output convolutions" in s for s in said)
    assert any("of the MACs" in s for s in said)


def test_the_fallback_gives_back_the_fragile_layer_first_when_the_map_gate_fails(tmp_path):
    """With a gate on mAP50-95 that minmax calibration misses, the fallback ranks by that mAP and
    gives back p4 first; the manifest lists it after the head, with its measured loss."""
    from edgert.quantize import build

    bundle = _bundle(tmp_path, "build_fragile_yolo_style")
    np.savez(tmp_path / "calib.npz", input=_data())
    build(
        bundle,
        "int8",
        calib=str(tmp_path / "calib.npz"),
        calib_size=200,
        holdout_size=100,
        prepare="none",
        calib_method="minmax",
        gate_rules="map50_95>=0.97",
    )
    q = json.loads((bundle / "manifest.json").read_text())["quantization"]["int8"]
    assert q["holdout_before_fallback"]["map50_95"] < 0.97 <= q["holdout"]["map50_95"]
    assert q["fallback_steps"][0]["kept"] == "/p4/Conv"
    given_back = [k for k in q["kept_out"] if k["why"].startswith("sensitivity")]
    assert given_back[0]["node"] == "/p4/Conv"
    assert "mAP50-95 against FP32's boxes loss" in given_back[0]["why"]


def _labelled_folder(tmp_path):
    """A letterboxed YOLO-style detector bundle and 60 noise images of 40x60 (not the model's
    32x32 square: the labels go through the letterbox), labelled with FP32's own detections in
    each image's pixels (as the app maps them), written as COCO JSON and as YOLO txt files."""
    import cv2

    from edgert.runtime.tasks import load_task_model

    letterbox = {"resize": "letterbox", "size": "32x32", "scale": 1 / 255}
    bundle = models_bundle(tmp_path, "build_yolo_style", LABELS, preprocess=letterbox)
    folder, yolo = tmp_path / "images", tmp_path / "yolo"
    folder.mkdir()
    yolo.mkdir()
    rng = np.random.default_rng(1)
    coco = {"images": [], "annotations": [], "categories": []}
    coco["categories"] = [{"id": 7 + i, "name": n} for i, n in enumerate(["Kite", "bird", "plane"])]
    objects = 0
    with load_task_model(bundle) as model:
        for i in range(60):
            image = rng.integers(0, 256, (40, 60, 3), np.uint8)
            cv2.imwrite(str(folder / f"{i:03d}.png"), image)
            coco["images"].append(
                {"id": 100 + i, "file_name": f"{i:03d}.png", "width": 60, "height": 40}
            )
            lines = []
            for d in model(image).objects:
                x1, y1, x2, y2 = (float(v) for v in d.box)
                coco["annotations"].append(
                    {
                        "id": objects,
                        "image_id": 100 + i,
                        "category_id": 7 + d.class_id,
                        "bbox": [x1, y1, x2 - x1, y2 - y1],
                        "iscrowd": 0,
                    }
                )
                cx, cy, w, h = (x1 + x2) / 120, (y1 + y2) / 80, (x2 - x1) / 60, (y2 - y1) / 40
                lines.append(f"{d.class_id} {cx:.6f} {cy:.6f} {w:.6f} {h:.6f}")
                objects += 1
            (yolo / f"{i:03d}.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "coco.json").write_text(json.dumps(coco))
    assert objects > 60  # something to judge
    return bundle, folder


def test_calib_labels_in_both_formats_give_fp32_and_int8_map_against_them(tmp_path):
    """`--calib-labels` as COCO JSON (categories matched by name, ids of their own) and as YOLO
    txt: the same boxes give the same metrics. Labelled with FP32's own detections in the
    images' pixels, FP32 scores ~1.0 against them, which holds only if the boxes are carried
    through the letterbox to the model's input as the app carries detections back."""
    from edgert.quantize import build

    bundle, folder = _labelled_folder(tmp_path)
    got = {}
    for name, labels in (("coco", tmp_path / "coco.json"), ("yolo", tmp_path / "yolo")):
        said: list[str] = []
        build(
            bundle,
            "int8",
            calib=str(folder),
            calib_labels=str(labels),
            calib_size=40,
            holdout_size=20,
            prepare="none",
            gate_rules="labels_map_drop<=1",
            say=said.append,
        )
        got[name] = json.loads((bundle / "manifest.json").read_text())["quantization"]["int8"]
        assert any(
            s.endswith(f"12 other samples of 60 images in {folder}, 12 labelled") for s in said
        )
    coco, yolo = got["coco"]["holdout"], got["yolo"]["holdout"]
    assert coco["labelled_samples"] == yolo["labelled_samples"] == 12  # the hold-out: 60 // 5
    for key in ("labels_map50_fp32", "labels_map50_95_fp32", "labels_map50", "labels_map50_95"):
        assert coco[key] == pytest.approx(yolo[key], abs=2e-3), key
    assert coco["labels_map50_fp32"] == pytest.approx(1.0, abs=1e-6)
    assert coco["labels_map50_95_fp32"] >= 0.95
    assert coco["labels_map_drop"] == pytest.approx(
        coco["labels_map50_95_fp32"] - coco["labels_map50_95"], abs=1e-5
    )
    assert got["coco"]["gate"]["labels_map_drop"] == 1.0
    # the choices go by the labels too: the validation split (the first 8 of the 40 calibration
    # images) is labelled, each method is scored against them, and the one kept has the best
    # mean of its mAP50-95 against the labels and against FP32's boxes
    cal = got["yolo"]["calibration"]
    scores = cal["method_scores"]
    assert all(s["labelled_samples"] == 8 and "labels_map50_95" in s for s in scores.values())
    for s in scores.values():
        assert s["map50_95_both"] == pytest.approx(
            (s["map50_95"] + s["labels_map50_95"]) / 2, abs=2e-5
        )
    best = max(scores, key=lambda m: (scores[m]["map50_95_both"], scores[m]["cosine"]))
    assert cal["method"] == best and "against the labels" in cal["method_why"], cal


def _one_sentence(proc) -> str:
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.subprocess
def test_bad_calib_labels_are_one_sentence(tmp_path):
    """Labels that do not fit: a category that is not one of the model's labels, a box outside
    its image, a YOLO class out of range or a line that is not 5 numbers, a file that is not
    JSON, a source that is not a folder. Each is one sentence naming the file and the place
    (through the CLI: one line, no traceback, a non-zero exit), and nothing is written."""
    from edgert.quantize import build
    from edgert.runtime.errors import SourceError
    from tests.conftest import run_cli

    bundle, folder = _labelled_folder(tmp_path)
    before = (bundle / "manifest.json").read_text()
    coco = json.loads((tmp_path / "coco.json").read_text())
    coco["categories"][2]["name"] = "dog"
    (tmp_path / "dog.json").write_text(json.dumps(coco))

    def refused(calib, labels) -> str:
        return _one_sentence(
            run_cli(
                "build",
                bundle,
                "--precision",
                "int8",
                "--calib",
                calib,
                "--calib-labels",
                labels,
                "--calib-size",
                "40",
            )
        )

    line = refused(folder, tmp_path / "dog.json")
    assert line.endswith(
        f"{tmp_path / 'dog.json'}: category 'dog' (id 9) is not one of the model's labels "
        "(kite, bird, plane)"
    ), line
    np.savez(tmp_path / "calib.npz", input=_data(60))
    line = refused(tmp_path / "calib.npz", tmp_path / "coco.json")
    assert "--calib-labels needs --calib to be a folder of images" in line
    coco["categories"][2]["name"] = "plane"
    coco["annotations"].append({"image_id": 100, "category_id": 9, "bbox": [50, 30, 20, 20]})
    (tmp_path / "outside.json").write_text(json.dumps(coco))
    (tmp_path / "not-json.json").write_text("{")
    coco["images"][0]["width"] = 80  # labels of another version of the image
    (tmp_path / "resized.json").write_text(json.dumps(coco))
    yolo = tmp_path / "yolo"
    cases = [
        (
            "outside.json",
            None,
            f"annotation #{len(coco['annotations']) - 1}: the box (50.0, "
            "30.0, 70.0, 50.0) lies outside the 60x40 image",
        ),
        ("not-json.json", None, "is not a readable JSON file"),
        ("resized.json", None, "image '000.png' is 60x40 but the file says 80x40"),
        (
            "yolo",
            "5 0.5 0.5 0.1 0.1\n",
            "line 1 of {txt}: class 5 is not one of the model's 3 labels (0..2)",
        ),
        (
            "yolo",
            "0 0.5 0.5\n",
            "line 1 of {txt}: expected 'class cx cy w h' (5 numbers), got '0 0.5 0.5'",
        ),
        ("yolo", "0 0.5 0.5 1.5 0.1\n", "centre and size must be fractions of the image"),
    ]
    for name, text, expected in cases:
        if text is not None:
            (yolo / "003.txt").write_text(text)
        with pytest.raises(SourceError) as err:
            build(
                bundle,
                "int8",
                calib=str(folder),
                calib_labels=str(tmp_path / name),
                calib_size=40,
                prepare="none",
            )
        message = str(err.value)
        assert expected.format(txt=yolo / "003.txt") in message and "\n" not in message, message
    assert (bundle / "manifest.json").read_text() == before
    assert not (bundle / "model.int8.onnx").exists()


def test_the_dla_ranges_come_from_the_none_candidates_pass_and_equal_a_pass_of_their_own(
    tmp_path,
):
    """calibration/ranges.json (INT8 on DLA calibrates the FP32 model from it): every float
    tensor of the FP32 model, its thresholds those a separate pass over the calibration split
    gives (collected once, with the unprepared candidate's statistics, no longer twice)."""
    import cv2
    import onnx

    from edgert.quantize import build, calibration, qdq_search
    from edgert.runtime.bundle import Manifest

    bundle = models_bundle(tmp_path, "build_yolo_style", LABELS)
    folder = tmp_path / "cal"
    folder.mkdir()
    rng = np.random.default_rng(2)
    for i in range(40):
        cv2.imwrite(str(folder / f"{i:02d}.png"), rng.integers(0, 256, (32, 32, 3), np.uint8))
    build(bundle, "int8", calib=str(folder), calib_size=30, holdout_size=10, gate_rules="off")
    got = json.loads((bundle / "calibration" / "ranges.json").read_text())
    model = _model(bundle)
    manifest = Manifest.from_dict(json.loads((bundle / "manifest.json").read_text()))
    data = calibration.load(str(folder), manifest, 30, 10)
    fit, _ = qdq_search.split_validation(data.calibration.inputs)
    own = ranges.collect(model, fit, ranges.float_activations(model)).thresholds(got["method"])
    assert set(got["thresholds"]) == set(own) == set(ranges.float_activations(model))
    for t, v in own.items():
        assert got["thresholds"][t] == pytest.approx(v, rel=1e-6), t
    assert onnx.load(str(bundle / "model.int8.onnx"))  # the Q/DQ model is still written


@pytest.mark.subprocess
def test_calib_labels_that_are_no_regular_file_are_refused_at_once(tmp_path):
    """`--calib-labels` read only from a regular file within a bound (round 6, G15): a FIFO
    hung the build for ever and a link to /dev/zero grew to 3.4 GB before a MemoryError; a YOLO
    label file that is a link to /dev/zero was silently read as background. Each is now one
    sentence naming the file, exit 2, before a byte is read, and nothing is written."""
    import os

    from tests.conftest import run_cli

    bundle, folder = _labelled_folder(tmp_path)
    before = (bundle / "manifest.json").read_text()
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    yolo = tmp_path / "yolo"
    (yolo / "004.txt").unlink()
    (yolo / "004.txt").symlink_to("/dev/zero")
    cases = [
        ("fifo.json", "fifo.json is not a regular file (a FIFO): not a COCO annotation file"),
        ("zero.json", "zero.json is not a regular file (a character device)"),
        ("yolo", "004.txt is not a regular file (a character device): not a YOLO label file"),
    ]
    for name, expected in cases:
        proc = run_cli(
            "build",
            bundle,
            "--precision",
            "int8",
            "--calib",
            folder,
            "--calib-labels",
            tmp_path / name,
            "--calib-size",
            "40",
            "--prepare",
            "none",
            timeout=60,
        )
        line = _one_sentence(proc)
        assert proc.returncode == 2 and expected in line, line
    assert (bundle / "manifest.json").read_text() == before
    assert not (bundle / "model.int8.onnx").exists()


def _coco_variant(tmp_path, name: str, change) -> str:
    coco = json.loads((tmp_path / "coco.json").read_text())
    change(coco)
    (tmp_path / name).write_text(json.dumps(coco))
    return str(tmp_path / name)


def test_hostile_coco_labels_are_one_sentence_each(tmp_path):
    """COCO files that crashed the build or said nonsense (round 6, G18, G22): JSON nested
    200,000 deep (RecursionError), a list or an object as an id (unhashable type), a string
    width ("60x40 but the file says 60x40"), a 1e308 box (a 309-digit number in the message),
    an iscrowd that is not 0 or 1. Each is one short sentence naming the place; nothing is
    written."""
    from edgert.quantize import build
    from edgert.runtime.errors import SourceError

    bundle, folder = _labelled_folder(tmp_path)
    before = (bundle / "manifest.json").read_text()
    (tmp_path / "bomb.json").write_text("[" * 200_000 + "]" * 200_000)

    def first_annotation(key, value):
        return lambda c: c["annotations"][0].update({key: value})

    cases = [
        (str(tmp_path / "bomb.json"), "is nested too deeply to be a COCO annotation file"),
        (
            _coco_variant(tmp_path, "a.json", first_annotation("category_id", [7])),
            "annotation #0 has category_id [7], not a number or a string",
        ),
        (
            _coco_variant(tmp_path, "b.json", first_annotation("image_id", [100])),
            "annotation #0 has image_id [100], not a number or a string",
        ),
        (
            _coco_variant(tmp_path, "c.json", lambda c: c["categories"][0].update(id=[7])),
            "category #0 has id [7], not a number or a string",
        ),
        (
            _coco_variant(tmp_path, "d.json", lambda c: c["images"][0].update(id={"a": 1})),
            "image #0 has id {'a': 1}, not a number or a string",
        ),
        (
            _coco_variant(tmp_path, "e.json", lambda c: c["images"][0].update(width="60")),
            "image '000.png' has width '60', not a whole number of pixels",
        ),
        (
            _coco_variant(tmp_path, "f.json", first_annotation("bbox", [1e308, 1, 5, 5])),
            "the box (1e+308, 1.0, 1e+308, 6.0)",
        ),
        (
            _coco_variant(tmp_path, "g.json", first_annotation("iscrowd", "yes")),
            "annotation #0 has iscrowd 'yes'; COCO's iscrowd is 0 or 1",
        ),
    ]
    for labels, expected in cases:
        with pytest.raises(SourceError) as err:
            build(
                bundle,
                "int8",
                calib=str(folder),
                calib_labels=labels,
                calib_size=40,
                prepare="none",
            )
        message = str(err.value)
        assert expected in message and "\n" not in message and len(message) < 300, message
    assert (bundle / "manifest.json").read_text() == before


def test_iscrowd_is_0_or_1_and_labels_without_a_box_are_refused(tmp_path):
    """COCO's iscrowd as some converters write it, the string "0", was truthy: every box was
    dropped as a crowd region, and labels with no box scored FP32 and INT8 a perfect 1.0 (round
    6, G9). "0" / "1" read as 0 / 1 now, and labels that hold no box (none given, or all crowd)
    are one sentence: there is nothing to measure against."""
    from edgert.quantize import box_labels
    from edgert.quantize.calibration import _image_files
    from edgert.runtime.errors import SourceError

    _, folder = _labelled_folder(tmp_path)
    files = _image_files(folder)
    sizes = [(40, 60)] * len(files)

    def boxes(name, change):
        out = box_labels.read(_coco_variant(tmp_path, name, change), folder, files, sizes, LABELS)
        return sum(len(o[1]) for o in out if o is not None)

    def crowd(value):
        return lambda c: [a.update(iscrowd=value) for a in c["annotations"]]

    total = boxes("plain.json", lambda c: None)
    assert total > 60
    assert boxes("str0.json", crowd("0")) == boxes("false.json", crowd(False)) == total
    one = crowd(0)
    assert boxes("one.json", lambda c: (one(c), c["annotations"][0].update(iscrowd="1"))) == (
        total - 1
    )
    for name, change in (
        ("none.json", lambda c: c.update(annotations=[])),
        ("crowd.json", crowd("1")),
    ):
        with pytest.raises(SourceError, match="holds no box on the 60 images it labels"):
            boxes(name, change)
    yolo = tmp_path / "empty-yolo"
    yolo.mkdir()
    for f in files:
        (yolo / f"{f.stem}.txt").write_text("")
    with pytest.raises(SourceError, match="holds no box on the 60 images it labels"):
        box_labels.read(yolo, folder, files, sizes, LABELS)


def test_labels_with_no_box_on_the_hold_out_fail_a_labels_gate_with_a_sentence(tmp_path):
    """Labels whose only boxes sit on a calibration image (000.png; the hold-out's 12 images
    are labelled, without a box): the labels' mAPs were 1.0 ("nothing judged") and the labels
    gate passed (round 6, G9). Now they are absent and the build stops with a sentence."""
    from edgert.quantize import GateFailed, build

    bundle, folder = _labelled_folder(tmp_path)
    before = (bundle / "manifest.json").read_text()
    only = _coco_variant(
        tmp_path,
        "one.json",
        lambda c: c.update(annotations=[a for a in c["annotations"] if a["image_id"] == 100]),
    )
    said: list[str] = []
    with pytest.raises(GateFailed) as err:
        build(
            bundle,
            "int8",
            calib=str(folder),
            calib_labels=only,
            calib_size=40,
            holdout_size=20,
            prepare="none",
            say=said.append,
        )
    assert str(err.value) == (
        "INT8 cannot be gated: labels_map_drop is not measured: the labels hold no box on the 12 "
        "hold-out samples they label (nothing was written)"
    )
    summary = next(s for s in said if s.startswith("INT8 vs FP32 on the hold-out"))
    assert "labelled_boxes 0.0000" in summary and "labels_map50" not in summary, summary
    assert (bundle / "manifest.json").read_text() == before
