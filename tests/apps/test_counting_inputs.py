"""Round four of the hostile-input battery (issue 33), counting's side: fractions follow a frame
whose size changes, a zone of thousands of points is checked once and fast, events files are
appended to across restarts, and a zone exit at the end of a run says so. The analytics are fed
real frames and the detections a detector gives (dicts with boxes); the CLI runs a real detector
bundle on rendered frames."""

from __future__ import annotations

import json
import logging
import math

import cv2
import numpy as np
import pytest

from edgert.apps.camera.analytics import Analytics, parse_all, parse_geometry
from edgert.apps.camera.pipeline import Frame
from edgert.runtime.errors import GeometryError
from edgert.runtime.results import Detection, Result
from edgert.runtime.tracking import counting
from tests.apps.test_tracking_camera import scene_video, square_at
from tests.conftest import assert_user_error, run_cli
from tests.tiny import blob_detector_bundle


def _frame(i: int, size: tuple[int, int], box=None) -> Frame:
    w, h = size
    objects = [Detection(tuple(box), 0.9, 0, "blob")] if box else []
    results = Result.of_objects(objects, "detect")
    return Frame(i, i * 0.1, np.zeros((h, w, 3), np.uint8), 0, results=results)


def test_a_fractional_line_follows_the_frame_when_its_size_changes(caplog):
    """10 frames at 320x240, then a box crossing the middle of 1280x960 frames: the line at half
    the width is at x=640 there (it stayed at x=160, and the crossing was missed)."""
    geometries = parse_all(["door=0.5,0,0.5,1", "fixed=100,0,100,240"], [], 1)
    analytics = Analytics(1, geometries)
    for i in range(10):
        analytics.update(_frame(i, (320, 240)))
    with caplog.at_level(logging.WARNING):
        for k, x in enumerate(range(400, 900, 25)):
            analytics.update(_frame(10 + k, (1280, 960), (x - 40, 400, x + 40, 520)))
    counts = analytics.counts(0)
    assert counts["door"]["in"] + counts["door"]["out"] == 1
    assert counts["door"]["points"] == [[640.0, 0.0], [640.0, 960.0]]
    assert counts["fixed"]["points"] == [[100.0, 0.0], [100.0, 240.0]]  # pixels stay, said once
    assert caplog.text.count("changed size from 320x240 to 1280x960") == 1
    assert "fixed given in pixels stays where it was" in caplog.text


def _star(n: int, r: float = 1000.0, c: float = 1100.0) -> list[tuple[float, float]]:
    """A simple polygon of ``n`` points: a star whose radius alternates (no edge crosses)."""
    return [
        (
            c + (r if k % 2 else 0.8 * r) * math.cos(2 * math.pi * k / n),
            c + (r if k % 2 else 0.8 * r) * math.sin(2 * math.pi * k / n),
        )
        for k in range(n)
    ]


def _brute_force(points) -> tuple[int, int] | None:
    """The check as it was written before (a pair of Python loops), to compare against."""
    n = len(points)

    def orient(p, q, r):
        return (q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0])

    for i in range(n):
        for j in range(i + 1, n):
            if j in (i + 1, (i + n - 1) % n) or (i == 0 and j == n - 1):
                continue
            a, b, c, d = points[i], points[(i + 1) % n], points[j], points[(j + 1) % n]
            if orient(a, b, c) * orient(a, b, d) < 0 and orient(c, d, a) * orient(c, d, b) < 0:
                return i, j
    return None


def test_the_vectorised_self_crossing_check_agrees_with_the_pairwise_one():
    rng = np.random.default_rng(7)
    for n in (3, 4, 5, 8, 13, 40):
        for _ in range(30):
            pts = tuple(map(tuple, rng.uniform(0, 100, (n, 2)).round(1)))
            assert counting.first_self_crossing(pts) == _brute_force(pts), pts
    assert counting.first_self_crossing(tuple(_star(200))) is None
    bow_tie = ((0, 0), (10, 10), (10, 0), (0, 10))
    assert counting.first_self_crossing(bow_tie) == (0, 2)


def test_a_zone_of_ten_thousand_points_is_checked_once_and_one_too_many_is_a_sentence():
    points = _star(10000)
    spec = "big=" + ",".join(f"{x:.3f},{y:.3f}" for x, y in points)
    counting.first_self_crossing.cache_clear()
    geometry = parse_geometry(spec, "zone", 1)
    analytics = Analytics(1, [geometry])
    analytics.update(_frame(0, (2200, 2200)))
    info = counting.first_self_crossing.cache_info()
    assert info.misses == 1 and info.hits >= 2  # parsed, resolved, counted: checked once
    too_many = "huge=" + ",".join(f"{x:.3f},{y:.3f}" for x, y in _star(10002))
    with pytest.raises(GeometryError, match="has 10002 points; at most 10000"):
        parse_geometry(too_many, "zone", 1)


def test_a_line_name_outside_ascii_is_told_what_a_name_may_hold():
    with pytest.raises(GeometryError, match="NAME in ASCII letters, digits, '-' and '_'"):
        parse_geometry("дверь=0.5,0,0.5,1", "line", 1)


def test_a_zone_exit_at_the_end_of_the_run_says_the_run_ended():
    analytics = Analytics(1, parse_all([], ["all=0,0,1,0,1,1,0,1"], 1))
    for i in range(5):
        analytics.update(_frame(i, (320, 240), (100, 100, 160, 160)))
    exits = [e for e in analytics.finish() if e["event"] == "zone_exit"]
    assert len(exits) == 1 and exits[0].get("run_ended") is True and "track_lost" not in exits[0]


@pytest.mark.subprocess
def test_events_and_jsonl_are_appended_to_across_restarts(tmp_path):
    bundle = blob_detector_bundle(tmp_path / "det")
    video = scene_video(tmp_path / "scene.mp4")
    events, frames = tmp_path / "events.jsonl", tmp_path / "frames.jsonl"
    args = (
        "camera",
        bundle,
        "--source",
        video,
        "--headless",
        "--conf",
        "0.75",
        "--line",
        "door=160,0,160,240",
        "--events",
        events,
        "--jsonl",
        frames,
    )
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    n_events, n_frames = len(events.read_text().splitlines()), len(frames.read_text().splitlines())
    with open(events, "ab") as fh:  # a crash cut the last line short
        fh.write(b'{"event": "line_cr')
    second = run_cli(*args)
    assert second.returncode == 0, second.stderr
    lines = events.read_text().splitlines()
    assert len(lines) == 2 * n_events + 1 and lines[n_events] == '{"event": "line_cr'
    starts = [json.loads(x) for x in lines if x.startswith('{"event": "run_start"')]
    assert len(starts) == 2 and starts[0]["time"] < starts[1]["time"]
    rows = frames.read_text().splitlines()
    assert len(rows) == 2 * n_frames and sum('"run_start"' in r for r in rows) == 2


@pytest.mark.subprocess
def test_a_folder_whose_images_change_size_counts_the_real_middle(tmp_path):
    """The review's folder: 10 images at 320x240, then the same scene at 1280x960 with a square
    crossing the middle; a line at half the width counts it (it counted 0)."""
    bundle = blob_detector_bundle(tmp_path / "det")
    folder = tmp_path / "mixed"
    folder.mkdir()
    for i in range(10):
        cv2.imwrite(str(folder / f"a{i:03d}.png"), np.zeros((240, 320, 3), np.uint8))
    for i in range(20):
        img = np.zeros((960, 1280, 3), np.uint8)
        square_at(img, 200 + 50 * i, 480, side=240)
        cv2.imwrite(str(folder / f"b{i:03d}.png"), img)
    proc = run_cli(
        "camera",
        bundle,
        "--source",
        folder,
        "--headless",
        "--conf",
        "0.75",
        "--line",
        "door=0.5,0,0.5,1",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    door = json.loads(proc.stdout)["streams"][0]["counts"]["door"]
    assert door["in"] + door["out"] == 1, door


@pytest.mark.subprocess
def test_a_geometry_error_on_the_command_line_is_still_one_sentence(tmp_path):
    bundle = blob_detector_bundle(tmp_path / "det")
    proc = run_cli("camera", bundle, "--line", "door①=0.5,0,0.5,1")
    assert_user_error(proc, "NAME in ASCII letters")
