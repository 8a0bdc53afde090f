"""scripts/rooms_moves.py (issue 67, step 5): code written before runtime/'s modules moved into
rooms is rewritten to their new places, and the tree as it is now needs no rewriting."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "rooms_moves.py"
_spec = importlib.util.spec_from_file_location("rooms_moves", SCRIPT)
moves = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(moves)

# names and paths are built, so that this file's own text holds no old name (the script leaves
# it as it is after a merge, and the tree test reads it too)
OLD = "edgert" + ".runtime."
PATH = "runtime" + "/"
HELPERS = "tests" + ".runtime."


def test_absolute_names_strings_and_paths_go_to_their_rooms():
    before = "\n".join(
        [
            f"from {OLD}heads import Head",
            f"from {OLD[:-1]} import detection, kalman as k, Tracker",
            f"import {OLD}plan_cache",
            f'MODEL = "{OLD}faces"',
            f'monkeypatch.setattr("{OLD}preprocess.cv2.resize", resize)',
            f"from {OLD}tracking import Tracker  # the package it became: stays",
            f'"{PATH}plan_check.py::build_checked_plan", "{PATH}tracking.py::update"',
            f"from {HELPERS}preprocess_reference import reference_apply",
            "",
        ]
    )
    after = moves.rewrite(before, None)
    assert after.splitlines() == [
        f"from {OLD}tasks.heads import Head",
        f"from {OLD}tasks import detection",
        f"from {OLD}tracking import kalman as k",
        f"from {OLD[:-1]} import Tracker",
        f"import {OLD}backends.plan_cache",
        f'MODEL = "{OLD}tasks.faces"',
        f'monkeypatch.setattr("{OLD}images.preprocess.cv2.resize", resize)',
        f"from {OLD}tracking import Tracker  # the package it became: stays",
        f'"{PATH}backends/plan_check.py::build_checked_plan", "{PATH}tracking/__init__.py::update"',
        f"from {HELPERS}images.preprocess_reference import reference_apply",
    ]
    assert moves.rewrite(after, None) == after  # a second run changes nothing


def test_relative_imports_follow_the_importer_and_the_imported():
    # a moved module whose imports were written from its old place (the heads module of runtime/)
    heads = ("edgert.runtime.tasks.heads", False)
    text = "from .detection import nms\nfrom .errors import ShapeError\nfrom . import atomic\n"
    assert moves.rewrite(text, heads) == (
        "from .detection import nms\nfrom ..errors import ShapeError\nfrom .. import atomic\n"
    )
    # the tracking module became the tracking package: its siblings are one level up
    tracking = ("edgert.runtime.tracking", True)
    text = "from .detection import Detection\nfrom .kalman import KalmanBoxes\n"
    assert moves.rewrite(text, tracking) == (
        "from ..tasks.detection import Detection\nfrom .kalman import KalmanBoxes\n"
    )
    # a module that stayed imports a moved one; inside a function, indented
    engine = ("edgert.runtime.engine", False)
    text = "def f():\n    from .plan_check import (\n        build_checked_plan,\n    )\n"
    assert moves.rewrite(text, engine) == (
        "def f():\n    from .backends.plan_check import build_checked_plan\n"
    )
    for where, text in [(heads, "from ..errors import X\n"), (engine, "from .tracking import T\n")]:
        assert moves.rewrite(text, where) == text  # already right


def test_the_tree_needs_no_rewriting():
    """Every import, importlib name and path in the tree is at its module's new place (what the
    script would do after a merge is only what a branch from before the moves brought)."""
    stale = []
    for folder in ("runtime", "apps", "quantize", "export", "tests", "benchmarks", "scripts"):
        for path in moves.files([str(ROOT / folder)]):
            text = path.read_text(encoding="utf-8")
            if moves.rewrite(text, moves.module_of(path)) != text:
                stale.append(str(path.relative_to(ROOT)))
    assert stale == []


@pytest.mark.subprocess
def test_the_command_rewrites_files_in_place(tmp_path: Path):
    old = tmp_path / "old.py"
    old.write_text(f"from {OLD}counting import LineCounter\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "1 file(s) rewritten" in proc.stdout
    assert old.read_text(encoding="utf-8") == f"from {OLD}tracking.counting import LineCounter\n"
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 2 and "rooms_moves.py" in proc.stderr
