"""The camera's threads carry their stage's name where Linux shows thread names (``top -H``, ``ps
-L``, ``/proc/PID/task/TID/comm``): a device's CPU read by stage, as ``benchmarks/streams.py``
does. ``comm`` is the name the kernel keeps for each task (proc(5): /proc/pid/task/tid/comm)."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

from edgert.apps.camera.pipeline import Pipeline, Steps
from edgert.apps.camera.threads import name_os_thread

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="thread names are read from Linux's /proc"
)


def _comm() -> str:
    with open(f"/proc/self/task/{threading.get_native_id()}/comm") as fh:
        return fh.read().rstrip("\n")


def test_a_thread_is_named_and_a_long_name_is_cut_to_the_kernel_s_15_bytes():
    got = {}

    def run():
        got["before"] = _comm()
        name_os_thread("prepare-12")
        got["short"] = _comm()
        name_os_thread("a-name-longer-than-fifteen")
        got["long"] = _comm()

    t = threading.Thread(target=run)
    t.start()
    t.join(5)
    assert got["before"] != "prepare-12"  # the interpreter's own name until named
    assert got["short"] == "prepare-12"
    assert got["long"] == "a-name-longer-t"
    assert _comm() != "prepare-12"  # the calling thread alone is renamed


class Frames:
    """Three 2x2 frames, each read noting the thread that read it."""

    live = False
    description = "frames"
    fps = None

    def __init__(self, seen: dict) -> None:
        self.left, self.seen = 3, seen

    def read(self):
        self.seen.setdefault("capture", _comm())
        if not self.left:
            return None
        self.left -= 1
        return np.zeros((2, 2, 3), np.uint8), time.monotonic()

    def cancel(self):
        pass


def test_each_pipeline_stage_runs_under_its_own_name():
    seen: dict = {}

    def prepare(frame):
        seen.setdefault(f"prepare-{frame.stream}", _comm())

    def infer(frames):
        seen.setdefault("infer", _comm())

    def finish(frames, out):
        seen.setdefault("finish", _comm())

    def sink(frame):
        seen.setdefault("sink", _comm())

    Pipeline([Frames(seen), Frames({})], Steps(prepare, infer, finish), sink).run()
    assert seen == {
        "capture": "capture-0",
        "prepare-0": "prepare-0",
        "prepare-1": "prepare-1",
        "infer": "batcher",
        "finish": "finish",
        "sink": "output",
    }
