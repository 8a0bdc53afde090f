"""A real camera killed (issue 69): benchmarks/store_kill.py's ``--camera`` variant with a few
kills: ``edgert camera`` on a busy rendered scene with ``--store``, ``--clips`` and ``--mqtt``
(a real Mosquitto, a QoS 1 subscriber with a persistent session) SIGKILLed at random moments;
after each, the store is whole, every event the subscriber received is in it, every finished clip
it names plays (ffprobe), and what the kill lost is at most one batch window."""

from __future__ import annotations

import pytest

from tests.apps.test_clip_folders import needs_clips
from tests.apps.test_telemetry import needs
from tests.conftest import benchmark


def _harness():
    return benchmark("store_kill_camera")


def test_the_busy_scene_loops_without_a_seam(tmp_path):
    import cv2
    import numpy as np

    video = cv2.VideoCapture(str(_harness().busy_scene(tmp_path / "s.mp4")))
    frames = []
    while True:
        ok, img = video.read()
        if not ok:
            break
        frames.append(img[..., 0] > 127)
    assert len(frames) == 200
    # the frame after the last is the first: each square one step on, none appearing from nothing
    last = frames[-1]
    after = np.vstack([np.roll(last[:115], 8, axis=1), np.roll(last[115:], -8, axis=1)])
    assert (frames[0][:, 60:260] == after[:, 60:260]).mean() > 0.99
    assert all(f.any() for f in frames)  # never an empty frame: the scene is busy throughout


@pytest.mark.subprocess
@needs["mosquitto"]
@needs_clips
def test_a_camera_killed_at_random_moments_keeps_its_store_events_and_clips(tmp_path):
    batch_s = 2.0
    report = _harness().run(3, batch_s=batch_s, seed=3)
    assert report["corrupt"] == 0, report
    assert report["events_published"] > 0 and report["published_lost"] == 0, report
    assert report["clips_checked"] > 0 and report["clips_bad"] == [], report
    assert report["max_lost_s_per_kill"] <= batch_s + 1.0, report  # the window, and the frame's
