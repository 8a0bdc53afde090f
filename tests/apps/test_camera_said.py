"""What a camera run tells its user (issue 73, "misleading or missing output"): the labels it
saw counted per object, where every file it wrote went and how many, a video a browser plays
(H.264), and a stream that never delivered a frame named with a non-zero exit. A real detector
with constant boxes (tests.const_heads) on ONNX Runtime, rendered videos, the real command line,
ffprobe on the files."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from tests.conftest import run_cli
from tests.const_heads import const_bundle, meta

pytestmark = pytest.mark.subprocess

# three people a frame: two "a" (scores 0.9, 0.8), one "b" (0.7), far apart (NMS keeps them all)
THREE = [
    [
        [100, 320, 540],
        [100, 320, 400],
        [60, 60, 60],
        [120, 120, 120],
        [0.9, 0.8, 0],
        [0, 0, 0.7],
    ]
]


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    folder = tmp_path_factory.mktemp("said")
    return const_bundle(folder, "three", meta("detect", 2), THREE)


def video(path, frames=10, size=(640, 480), fps=10):
    w, h = size
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
    for i in range(frames):
        writer.write(np.full((h, w, 3), 20 * (i % 10), np.uint8))
    writer.release()
    return path


def test_every_object_is_counted_by_its_label_not_the_top_one_a_frame(three, tmp_path):
    """Ten frames of three objects: 20 "a" and 10 "b" (the summary said "a (10)": the top label
    of each frame, which reads as ten people)."""
    clip = video(tmp_path / "in.mp4")
    proc = run_cli("camera", three, "--source", clip, "--headless", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["objects_by_label"] == {"a": 20, "b": 10}
    assert summary["labels_seen"] == {"a": 10}  # kept: frames by their top label
    proc = run_cli("camera", three, "--source", clip, "--headless")
    assert proc.returncode == 0, proc.stderr
    assert "objects by label: a 20, b 10 (in 10 frames inferred)" in proc.stdout, proc.stdout
    assert "labels seen" not in proc.stdout
