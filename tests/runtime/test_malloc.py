"""glibc's malloc kept from giving a frame's memory back to the kernel each frame (issue 71,
runtime/malloc.py): counted in page faults, which a frame's arrays cost when their memory comes
fresh from the kernel, not in time. Each case runs in its own process (the setting is the
process')."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.subprocess
glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.confstr("CS_GNU_LIBC_VERSION"),
    reason="glibc's malloc only",
)

LETTERBOX = """
import hashlib, json, resource, sys
import cv2
import numpy as np
from edgert.runtime.images.preprocess import Preprocessing
from edgert.runtime.malloc import keep_freed_memory

said = keep_freed_memory() if sys.argv[1] == "keep" else None
# a YOLO bundle taking uint8 pixels (edgert export --uint8-input), a decoder-scaled 1080p frame,
# and a frame's work that takes fresh planes from OpenCV each frame (its split: what the
# letterbox itself did until it split into the tensor's planes; a user's sink may do the same)
pre = Preprocessing(size=(640, 640), resize="letterbox", scale=1.0, dtype="uint8")
frame = np.random.default_rng(0).integers(0, 256, (360, 640, 3), np.uint8)

def one():
    tensor, _ = pre.apply(frame, source_hw=(1080, 1920))
    cv2.split(frame)
    return tensor

for _ in range(20):
    one()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):
    tensor = one()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 200
digest = hashlib.sha256(tensor.tobytes()).hexdigest()
print(json.dumps({"said": said, "faults": faults, "tensor": digest}))
"""


def _letterbox(mode: str, **env) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", LETTERBOX, mode],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@glibc
def test_a_frame_s_fresh_planes_stop_costing_page_faults():
    plain = _letterbox("plain")
    kept = _letterbox("keep")
    assert kept["said"] == "kept"
    # glibc's own thresholds: ~300 faults a frame (OpenCV's planes fresh from the kernel)
    assert plain["faults"] > 100, plain
    assert kept["faults"] < 5, kept
    assert kept["tensor"] == plain["tensor"]


@glibc
def test_the_user_s_own_settings_and_the_opt_out_are_left_alone():
    own = _letterbox("keep", MALLOC_TRIM_THRESHOLD_="131072")
    assert own["said"].startswith("the user's own"), own
    out = _letterbox("keep", EDGERT_MALLOC="system")
    assert out["said"] == "EDGERT_MALLOC=system"
    assert out["faults"] > 100, out  # nothing was changed: the faults as before


@glibc
def test_the_camera_command_keeps_it_and_says_so(tmp_path):
    """``edgert camera`` sets it before it opens anything (its debug line); the opt-out is
    honoured there too."""
    from tests.apps.test_camera_said import THREE, video
    from tests.conftest import run_cli
    from tests.const_heads import const_bundle, meta

    bundle = const_bundle(tmp_path, "three", meta("detect", 2), THREE)
    clip = video(tmp_path / "in.mp4", frames=3)
    proc = run_cli("camera", bundle, "--source", clip, "--headless", "-vv")
    assert proc.returncode == 0, proc.stderr
    assert "malloc: kept" in proc.stderr, proc.stderr
    proc = run_cli(
        "camera", bundle, "--source", clip, "--headless", "-vv", env={"EDGERT_MALLOC": "system"}
    )
    assert proc.returncode == 0, proc.stderr
    assert "malloc: EDGERT_MALLOC=system" in proc.stderr, proc.stderr
