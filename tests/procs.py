"""What tests and benchmarks that start edgert in its own process share: the command line of an
``edgert`` command, one started in the background, and a process's resident memory (Linux
/proc)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCENE = ("--conf", "0.75", "--line", "door=160,0,160,240")  # test_gate.quiet_scene's door


def edgert(command: str, *args) -> list[str]:
    """``python -m edgert.apps COMMAND ARGS...``, with this interpreter."""
    return [sys.executable, "-m", "edgert.apps", command, *map(str, args)]


def rss_mb(pid: int | str = "self") -> float:
    """VmRSS of ``pid`` in MiB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def running(command: str, *args, **popen) -> subprocess.Popen:
    """``edgert COMMAND ARGS...`` started in the repository's folder, its output let go, its
    errors kept (``app.communicate()`` reads them when the test stops it); ``popen`` changes
    those (``stdout=subprocess.PIPE`` to read its output too)."""
    given = {"cwd": ROOT, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "text": True}
    return subprocess.Popen(edgert(command, *args), **{**given, **popen})
