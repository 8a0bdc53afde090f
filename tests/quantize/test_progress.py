"""Progress of a build's long steps: n of N and the time left on standard error after a silence,
none with --quiet; the reporter itself; the vectorised entropy threshold against the loop it
replaced."""

from __future__ import annotations

import json
import re
import threading
import time

import numpy as np
import pytest

from edgert.export import export_model
from edgert.quantize import progress, ranges
from tests.conftest import run_cli

# "progress: preparations 1/2 (bias) > calibration statistics 64/80 samples; 1 s in this step,
# about 2 s left, ..."
LINE = re.compile(r"^progress: .*\b\d+/\d+\b.*; .* in this step, (about \d.* left|no estimate)")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return export_model("zoo:digits_cnn", tmp_path_factory.mktemp("progress") / "d.edgert").bundle


def _build(bundle, *more):
    return run_cli(
        "build",
        bundle,
        "--precision",
        "int8",
        "--prepare",
        "none,bias",
        *more,
        env={progress.ENV: "0.05"},  # the digits' steps take a fraction of a second
    )


@pytest.mark.subprocess
def test_build_reports_progress_on_stderr_with_n_of_n_and_time_left(digits):
    proc = _build(digits)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("progress:")]
    assert lines, proc.stderr
    assert all(LINE.match(ln) for ln in lines), lines
    assert any(re.search(r"about \d+ s left", ln) for ln in lines), lines
    assert any("preparations" in ln for ln in lines), lines  # the candidate search says where it is
    assert "progress:" not in proc.stdout  # the step results stay on standard output
    assert "gate passed" in proc.stdout


@pytest.mark.subprocess
def test_build_quiet_has_no_progress_and_json_keeps_stdout_json(digits):
    quiet = _build(digits, "--quiet")
    assert quiet.returncode == 0, quiet.stderr
    assert "progress:" not in quiet.stderr + quiet.stdout
    as_json = _build(digits, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["quantization"]["passed"] is True
    assert "progress:" in as_json.stderr


def test_reporter_estimates_from_the_rate_and_waits_for_silence():
    lines: list[str] = []
    with progress.reporting(lines.append, every=0.3), progress.step("outer", 4, "parts") as outer:
        outer.advance(1)
        with progress.step("inner", 10, "samples") as inner:
            time.sleep(1.0)
            first = list(lines)
            inner.advance(5)
            for _ in range(20):  # output every 30 ms: nothing to add
                progress.heard()
                time.sleep(0.03)
            busy = len(lines)
            time.sleep(1.0)
    assert first and all("inner 0/10 samples" in ln and "no estimate" in ln for ln in first)
    assert all(ln.startswith("progress: outer 1/4 parts > inner") for ln in lines)
    assert len(lines) - busy >= 1 and "inner 5/10 samples" in lines[-1]
    assert re.search(r"about \d+ s left, about \d+ s left for outer", lines[-1])
    assert busy <= len(first) + 1  # none while output kept coming
    assert not [t for t in threading.enumerate() if t.name == "edgert-progress"]


def test_time_left_shrinks_while_a_part_is_under_way():
    s = progress.Step("preparations", 4, started=100.0)
    assert s.left(105.0) is None  # nothing done yet: no rate
    s.advance(1)
    s.last = 130.0  # the first of 4 took 30 s
    assert s.left(130.0) == 90.0 and s.left(150.0) == 70.0
    assert s.left(300.0) == 0.0  # overdue: never negative


def test_steps_cost_nothing_outside_a_report():
    with progress.step("alone", 3) as s:
        s.advance(2)
    assert s.done == 2 and s.describe() == "alone 2/3"
    assert list(progress.each([1, 2], "items", 2)) == [1, 2]
    assert progress.duration(42) == "42 s" and progress.duration(185) == "3 min 05 s"


def _entropy_loop(hist: np.ndarray, top: float, levels: int = 128, stride: int = 16) -> float:
    """The loop :func:`ranges._entropy` replaced (TensorRT's entropy calibration)."""
    hist = hist.astype(np.float64)
    hist[0] = 0.0
    if hist.sum() == 0:
        return max(top, 1e-8)
    best_i, best_kl = len(hist), np.inf
    for i in range(levels, len(hist) + 1, stride):
        kept = hist[:i]
        p = kept.copy()
        p[-1] += hist[i:].sum()
        nonzero = kept > 0
        q = np.zeros(i)
        edges = np.linspace(0, i, levels + 1).astype(int)
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            nz = nonzero[lo:hi]
            if nz.any():
                q[lo:hi][nz] = kept[lo:hi].sum() / nz.sum()
        if q.sum() == 0:
            continue
        ps, qs = p / p.sum(), q / q.sum()
        mask = ps > 0
        kl = float(np.sum(ps[mask] * np.log(ps[mask] / np.maximum(qs[mask], 1e-12))))
        if kl < best_kl:
            best_i, best_kl = i, kl
    return max(best_i / len(hist) * top, 1e-8)


def test_entropy_threshold_is_the_loops():
    rng = np.random.default_rng(0)
    for k in range(6):
        x = np.abs(rng.standard_normal(50_000) * rng.uniform(0.1, 3)) ** rng.uniform(0.5, 2)
        hist = np.histogram(x, bins=ranges.BINS)[0]
        if k % 2:
            hist[rng.integers(0, ranges.BINS, 800)] = 0  # empty bins inside levels
        top = float(rng.uniform(1, 10))
        assert ranges._entropy(hist, top) == _entropy_loop(hist, top)
    assert ranges._entropy(np.zeros(ranges.BINS, np.int64), 3.0) == 3.0


def test_an_item_that_is_no_name_is_never_printed_whole():
    """Images (arrays) under way are counted, not named: ``str()`` of an image printed the whole
    array in the progress line (the zoo's array images) and cost a formatting per image."""
    image = np.zeros((224, 224, 3), np.uint8)
    lines = []
    with progress.reporting(lines.append, every=3600):
        reporter = progress._current.get()
        for items, what in (([image], "preprocessing"), (["a.jpg"], "reading"), ([3], "numbers")):
            for _ in progress.each(items, what, 1, "images"):
                lines.append(reporter.line())
    assert lines[0].startswith("progress: preprocessing 0/1 images;"), lines[0]
    assert "(a.jpg)" in lines[1] and "(3)" in lines[2]
    assert all(len(line) < 200 for line in lines)
