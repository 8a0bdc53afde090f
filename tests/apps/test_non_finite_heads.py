"""Models whose outputs hold NaN, inf and impossible classes (round 6, G4/G5/G6), one of every
head form and task (YOLO detect, pose, obb and instance segmentation; end-to-end detect, pose
and obb; DETR), made as the review made them (tests.const_heads: a constant ``output0`` with
Ultralytics' metadata), through the real ``edgert run --json`` and ``edgert camera`` with a
file output, snapshots, JSONL and events: every line is JSON (no NaN token), the valid objects
are all there, the broken ones are not, the camera runs to the end (rc 0), and numpy's
RuntimeWarnings never reach stderr. The decoders' own cases:
tests/runtime/tasks/test_non_finite_heads.py."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from tests.conftest import run_cli
from tests.const_heads import const_bundle, meta

pytestmark = pytest.mark.subprocess

nan, inf = np.nan, np.inf
KPTS = [[100.0, 100.0, 1.0]] * 17


def _pose_row(x, score, kpts):
    return [x - 20, 80, x + 20, 120, score, 0] + [v for p in kpts for v in p]


def _pose_col(x, score, kpts):
    return [x, 100, 40, 40, score] + [v for p in kpts for v in p]


# name: (metadata, output0, prototypes, the scores of the objects that must come out)
MODELS = {
    "yolo_detect": (  # the review's nan2: 4 objects became 1
        meta("detect", 2),
        [
            [
                [100, 300, 500, nan, 200, 400],
                [100, 300, 500, 200, 500, 100],
                [50, 50, 50, 50, 50, 1e30],
                [50, 50, 50, 50, 50, 50],
                [0.9, 0.8, 0.7, 0.85, 0, 0],
                [0, 0, 0, 0, 0.6, 0.95],
            ]
        ],
        None,
        [0.9, 0.8, 0.7, 0.6],
    ),
    "yolo_pose": (
        meta("pose", 1, kpt_shape="[17, 3]"),
        np.array(
            [_pose_col(100, 0.9, KPTS), _pose_col(300, 0.95, [[nan, 100, 1]] + KPTS[1:])]
            + [_pose_col(500, 0.8, KPTS)]
        ).T[None],
        None,
        [0.9, 0.8],
    ),
    "yolo_obb": (
        meta("obb", 1),
        [
            [
                [100, 300, nan, 500],
                [100, 300, 300, 500],
                [50] * 4,
                [30] * 4,
                [0.9, 0.8, 0.95, 0.7],
                [0.3, nan, 0.1, 0.2],
            ]
        ],
        None,
        [0.9, 0.7],
    ),
    "yolo_segment": (  # the review's: "results": [] where 2 were valid
        meta("segment", 1),
        [
            [
                [100, nan, 300, 400, 500],
                [100, 200, 300, 400, 500],
                [50, 50, 50, inf, 50],
                [50] * 5,
                [0.9, 0.95, 0.95, 0.95, 0.8],
                [1, 1, nan, 1, 0],
                [0, 0, 0, 0, 1],
            ]
        ],
        np.ones((1, 2, 160, 160), np.float32),
        [0.9, 0.8],
    ),
    "e2e_detect": (  # class NaN / 1e20 was -9223372036854775808, -1 a label, 1.7 class 1
        meta("detect", 2, end2end="True"),
        [
            [
                [10, 10, 50, 50, 0.99, nan],
                [10, 10, 50, 50, 0.98, 1e20],
                [60, 60, 90, 90, 0.97, -1],
                [100, 100, 150, 150, 0.96, 1.7],
                [inf, 100, 200, 200, 0.95, 0],
                [300, 300, 350, 350, 0.9, 0],
                [200, 200, 260, 260, 0.8, 1],
            ]
        ],
        None,
        [0.9, 0.8],
    ),
    "e2e_pose": (
        meta("pose", 1, kpt_shape="[17, 3]", end2end="True"),
        [[_pose_row(100, 0.9, [[nan, 100, 1]] + KPTS[1:]), _pose_row(300, 0.8, KPTS)]],
        None,
        [0.8],
    ),
    "e2e_obb": (
        meta("obb", 1, end2end="True"),
        [
            [
                [100, 100, 50, 30, 0.9, 0, nan],
                [nan, 300, 50, 30, 0.9, 0, 0.1],
                [300, 300, 50, 30, 0.8, 0, 0.2],
            ]
        ],
        None,
        [0.8],
    ),
    "detr": (  # a NaN query was kept at 0.9
        meta("detect", 1, description="Ultralytics rtdetr-l model"),
        [[[nan, 0.5, 0.2, 0.2, 0.9], [0.5, 0.5, 0.2, 0.2, 0.8], [0.3, 0.3, inf, 0.1, 0.95]]],
        None,
        [0.8],
    ),
}


def strict(text: str):
    """json.loads that refuses NaN and Infinity, as JavaScript's and Go's readers do."""

    def refuse(token):
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def quiet(stderr: str) -> None:
    """No traceback, no internal error, no numpy RuntimeWarning with a source path."""
    for bad in ("Traceback", "internal error", "RuntimeWarning", ".py:"):
        assert bad not in stderr, stderr


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nonfinite")
    made = {
        name: const_bundle(folder, name, props, value, protos=protos)
        for name, (props, value, protos, _) in MODELS.items()
    }
    image = folder / "grey.png"
    cv2.imwrite(str(image), np.full((640, 640, 3), 40, np.uint8))
    return made, image


@pytest.mark.parametrize("name", list(MODELS))
def test_run_json_keeps_the_valid_objects_and_is_json(bundles, name):
    made, image = bundles
    proc = run_cli("run", made[name], image, "--json")
    assert proc.returncode == 0, proc.stderr
    quiet(proc.stderr)
    assert "dropped" in proc.stderr  # said once: the model's output is broken
    (line,) = proc.stdout.splitlines()
    objects = strict(line)["results"]
    assert [o["score"] for o in objects] == pytest.approx(MODELS[name][3])
    labels = {"a", "b"}
    for o in objects:
        assert o["label"] in labels and o["class_id"] in (0, 1)
        assert all(np.isfinite(o["box"]))


@pytest.mark.parametrize("name", ["yolo_pose", "yolo_segment", "e2e_obb", "e2e_detect", "detr"])
def test_the_camera_runs_on_with_every_output(bundles, tmp_path, name):
    # G5: the overlay (file output), the snapshots and the JSONL ended the camera at the first
    # frame: "internal error: ValueError: cannot convert float NaN to integer"
    made, _ = bundles
    proc = run_cli(
        "camera",
        made[name],
        "--source",
        "synthetic://",
        "--headless",
        "--max-frames",
        "4",
        "--output",
        f"file://{tmp_path / 'out.mp4'}",
        "--snapshots",
        tmp_path / "snaps",
        "--jsonl",
        tmp_path / "frames.jsonl",
        "--events",
        tmp_path / "events.jsonl",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    quiet(proc.stderr)
    summary = strict(proc.stdout)
    processed = summary["frames_processed"]  # a live source: a frame may drop
    assert summary["candidates_dropped_broken"] >= processed  # counted: one or more a frame
    frames = [strict(x) for x in (tmp_path / "frames.jsonl").read_text().splitlines()][1:]
    assert processed >= 1
    assert [len(f["results"]) for f in frames] == [len(MODELS[name][3])] * processed
    events = [strict(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "track_end" and e.get("snapshot") for e in events)
    assert (tmp_path / "out.mp4").stat().st_size > 0


def test_a_classifier_with_a_nan_score_gives_no_classes(tmp_path, bundles):
    _, image = bundles
    bundle = const_bundle(tmp_path, "cls", meta("classify", 3), [[nan, 1, 2]])
    proc = run_cli("run", bundle, image, "--json")
    assert proc.returncode == 0, proc.stderr
    quiet(proc.stderr)
    assert "dropped 1 classifier output row(s)" in proc.stderr
    assert strict(proc.stdout)["results"] == []  # was three classes scored NaN


@pytest.mark.parametrize("name", ["detr", "e2e_obb"])
def test_a_second_stage_sees_only_the_valid_objects(bundles, tmp_path, name):
    # --secondary measured each crop's quality with int(y1): a NaN box ended the camera
    from tests.tiny import colour_classifier_bundle

    made, _ = bundles
    colours = colour_classifier_bundle(tmp_path / "col")
    proc = run_cli(
        "camera",
        made[name],
        "--source",
        "synthetic://",
        "--headless",
        "--max-frames",
        "8",
        "--secondary",
        colours,
        "--jsonl",
        tmp_path / "frames.jsonl",
    )
    assert proc.returncode == 0, proc.stderr
    quiet(proc.stderr)
    frames = [strict(x) for x in (tmp_path / "frames.jsonl").read_text().splitlines()][1:]
    assert frames and all(len(f["results"]) == len(MODELS[name][3]) for f in frames)


@pytest.mark.parametrize("name", ["yolo_pose", "yolo_obb", "e2e_detect", "detr"])
def test_serves_image_model_answers_json_with_the_valid_objects(bundles, name):
    # serve's NAME_image result string held NaN (pose_nan_image, obb_nan_image, e2e_bad_image)
    from edgert.apps.serve.models import ImageModel
    from edgert.runtime.tasks import load_task_model

    made, image = bundles
    blob = np.array([[image.read_bytes()]], dtype=np.object_)
    with load_task_model(made[name]) as model:
        answer = ImageModel(model, label=name)(blob)
    (text,) = answer["result"][:, 0]
    objects = strict(text.decode())["results"]
    assert [o["score"] for o in objects] == pytest.approx(MODELS[name][3])
