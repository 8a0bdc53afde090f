"""edgert camera with a pose and an instance-segmentation bundle (issue 48), each made from an ONNX
alone, its task, labels, size and keypoint shape read from the Ultralytics metadata it carries
(tests.tiny.blob_detector with ``ultralytics=True``: a real model whose objects are the bright
squares of the frame, keypoints placed in each box, masks from the frame's brightness), on the
rendered two-square video of the tracking tests: the overlay draws skeletons and mask tints
(checked by pixels in the written video and the snapshots), the JSONL carries keypoints and mask
outlines on tracked objects, the line counts both squares, and frames the gate skipped carry the
tracks' keypoints moved with their boxes."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from tests.apps.test_tracking_camera import scene_video
from tests.conftest import run_cli
from tests.tiny import FIGURE_SEEN, blob_detector

pytestmark = pytest.mark.subprocess


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    from edgert.export import export_model

    folder = tmp_path_factory.mktemp("tasks")
    bundles = {}
    for head in ("pose", "segment"):
        onnx_path = blob_detector(folder / f"{head}.onnx", head=head, ultralytics=True)
        bundles[head] = export_model(str(onnx_path), folder / f"{head}.edgert").bundle
    return bundles, scene_video(folder / "scene.mp4")


def _camera(bundle, video, out, *extra):
    proc = run_cli(
        "camera",
        bundle,
        "--source",
        video,
        "--headless",
        "--conf",
        "0.75",
        "--json",
        "--line",
        "door=160,0,160,240",
        "--jsonl",
        out / "frames.jsonl",
        "--events",
        out / "events.jsonl",
        *extra,
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(x) for x in (out / "frames.jsonl").read_text().splitlines()[1:]]
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()[1:]]
    return json.loads(proc.stdout), records, events


def _frames(path):
    cap = cv2.VideoCapture(str(path))
    out = []
    while True:
        ok, img = cap.read()
        if not ok:
            return out
        out.append(img)


def _red(img, x, y) -> bool:
    b, g, r = img[int(round(y)), int(round(x))].astype(int)
    return r > 200 and g < 90 and b < 90


def test_pose_bundle_draws_skeletons_writes_keypoints_and_counts(scene, tmp_path):
    bundles, video = scene
    manifest = json.loads((bundles["pose"] / "manifest.json").read_text())
    assert manifest["task"] == "pose" and manifest["labels"] == ["blob"]
    assert manifest["head"]["kpt_shape"] == [17, 3]
    assert "from the model's metadata" in manifest["export"]["described"][0]
    summary, records, events = _camera(
        bundles["pose"],
        video,
        tmp_path,
        *("--output", f"file://{tmp_path / 'overlay.mp4'}", "--snapshots", tmp_path / "shots"),
    )
    counts = summary["streams"][0]["counts"]["door"]
    assert (counts["in"], counts["out"]) == (1, 1)
    objects = [o for r in records for o in r["results"]]
    assert len({o["track_id"] for o in objects if o.get("track_id")}) == 2
    for o in objects:
        x1, y1, x2, y2 = o["box"]
        kp = np.asarray(o["keypoints"])
        assert kp.shape == (17, 3) and list(kp[:, 2]) == list(FIGURE_SEEN)
        assert (kp[:, 0] >= x1).all() and (kp[:, 0] <= x2).all()  # in its box, source pixels
        assert (kp[:, 1] >= y1).all() and (kp[:, 1] <= y2).all()
    # the overlay: a red dot on each visible keypoint, none on the hidden ears
    pictures = _frames(tmp_path / "overlay.mp4")
    checked = 0
    for r in records:
        for o in r["results"]:
            img = pictures[r["frame"]]
            kp = o["keypoints"]
            assert all(_red(img, x, y) for x, y, v in kp if v > 0.5), r["frame"]
            assert not any(_red(img, x, y) for x, y, v in kp if v < 0.5), r["frame"]
            checked += 1
    assert checked > 60
    # each track's snapshot shows its skeleton: red keypoints on the picture
    ends = [e for e in events if e["event"] == "track_end"]
    assert len(ends) == 2
    for e in ends:
        snap = cv2.imread(e["snapshot"])
        red = (snap[..., 2] > 200) & (snap[..., 1] < 90) & (snap[..., 0] < 90)
        assert red.sum() >= 15 * 5, e  # 15 visible dots of radius 3


def test_segmentation_bundle_tints_masks_writes_outlines_and_counts(scene, tmp_path):
    bundles, video = scene
    manifest = json.loads((bundles["segment"] / "manifest.json").read_text())
    assert manifest["task"] == "segment-instances" and manifest["labels"] == ["blob"]
    summary, records, _ = _camera(
        bundles["segment"], video, tmp_path, "--output", f"file://{tmp_path / 'overlay.mp4'}"
    )
    counts = summary["streams"][0]["counts"]["door"]
    assert (counts["in"], counts["out"]) == (1, 1)
    pictures = _frames(tmp_path / "overlay.mp4")
    tinted = 0
    for r in records:
        for o in r["results"]:
            x1, y1, x2, y2 = o["box"]
            poly = np.asarray(o["polygon"])
            # the 60x60 square (its mask at the model's 4-pixel prototype cells, 2.5x)
            if x1 < 10 or x2 > 310:
                continue  # at the frame's edge: part of the square
            assert 3000 < o["mask_area"] < 5000
            assert abs(poly[:, 0].min() - x1) < 12 and abs(poly[:, 0].max() - x2) < 12
            assert abs(poly[:, 1].min() - y1) < 12 and abs(poly[:, 1].max() - y2) < 12
            # inside: white tinted by the track's colour (40 %): no longer white
            inside = pictures[r["frame"]][int(y1) + 15 : int(y2) - 15, int(x1) + 15 : int(x2) - 15]
            assert inside.reshape(-1, 3).mean(0).min() < 215, r["frame"]
            tinted += 1
    assert tinted > 60
    # without the overlay the square stays white: the tint is the overlay's
    plain = _frames(video)[29][40:80, 145:185]
    assert plain.reshape(-1, 3).mean(0).min() > 235


def test_skipped_frames_carry_each_tracks_keypoints_moved_with_it(scene, tmp_path):
    bundles, video = scene
    _, records, _ = _camera(bundles["pose"], video, tmp_path, "--gate", "interval:3")
    predicted = [o for r in records for o in r["results"] if o.get("predicted")]
    assert len(predicted) > 20
    for o in predicted:
        kp = np.asarray(o["keypoints"])
        x1, y1, x2, y2 = o["box"]
        assert kp.shape == (17, 3)
        # the nose at the figure's spot in the predicted box (0.1 of its height from the top)
        assert abs(kp[0, 0] - (x1 + x2) / 2) < 2 and abs(kp[0, 1] - (y1 + 0.1 * (y2 - y1))) < 2
