"""tests/markers.py: a test that starts a process unmarked fails with a sentence naming the
marker, from its call, a thread or a fixture (one set up for an earlier test too); marked, it
passes. Inner pytest sessions (pytester) load only the plugin, not this suite's conftest."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# an audit event exactly as subprocess.Popen raises it, without starting anything
FAKE = 'sys.audit("subprocess.Popen", "ffmpeg", ["ffmpeg", "-i", "x"], None, None)'
CHROMIUM = 'sys.audit("subprocess.Popen", "/usr/bin/chromium", ["/usr/bin/chromium"], None, None)'
UNMARKED = "this test started a process in its {} but is not marked @pytest.mark.subprocess"


def _run(pytester, source: str) -> dict:
    """{test name: (outcome, message)} of an inner session over ``source``; the outcome of its
    setup when that did not pass, else of its call."""
    pytester.makepyfile(test_inner="import subprocess, sys, threading\nimport pytest\n\n" + source)
    rec = pytester.inline_run("-p", "tests.markers", "-p", "no:cacheprovider")
    out = {}
    for r in rec.getreports("pytest_runtest_logreport"):
        name = r.nodeid.split("::")[-1]
        if r.when == "call" or (r.when == "setup" and not r.passed):
            out[name] = (r.when + " " + r.outcome, r.longreprtext)
    return out


@pytest.mark.subprocess
def test_a_real_process_needs_the_marker_from_the_test_or_a_thread(pytester):
    out = _run(
        pytester,
        """
def test_unmarked():
    subprocess.run(["true"], check=True)

def test_unmarked_thread():
    t = threading.Thread(target=subprocess.run, args=(["true"],))
    t.start()
    t.join()

@pytest.mark.subprocess
def test_marked():
    subprocess.run(["true"], check=True)

def test_no_process():
    assert sum([1, 2]) == 3
""",
    )
    for name in ("test_unmarked", "test_unmarked_thread"):
        outcome, text = out[name]
        assert outcome == "call failed", out
        assert text.startswith(UNMARKED.format("call")) and "\n  started: true" in text, text
    assert out["test_marked"][0] == out["test_no_process"][0] == "call passed", out


def test_the_marker_is_named_and_the_test_s_own_failure_kept(pytester):
    out = _run(
        pytester,
        f"""
def test_unmarked():
    {FAKE}

def test_unmarked_and_failing():
    {FAKE}
    assert 1 == 2, "its own failure"

def test_skipped_after_starting():
    {FAKE}
    pytest.skip("no ffmpeg")

@pytest.mark.subprocess
def test_marked():
    {FAKE}
""",
    )
    for name in ("test_unmarked", "test_unmarked_and_failing", "test_skipped_after_starting"):
        outcome, text = out[name]
        assert outcome == "call failed" and text.startswith(UNMARKED.format("call")), out
        assert "pytestmark = pytest.mark.subprocess" in text and "started: ffmpeg -i x" in text
    assert (
        "the test also raised AssertionError: its own failure"
        in out["test_unmarked_and_failing"][1]
    )
    assert out["test_marked"][0] == "call passed", out


def test_a_fixture_s_process_counts_for_every_test_that_uses_it(pytester):
    out = _run(
        pytester,
        f"""
@pytest.fixture(scope="module")
def server():
    {FAKE}
    yield "url"

@pytest.mark.subprocess
def test_first_marked(server):
    pass

def test_then_unmarked(server):
    pass

def test_without_it():
    pass
""",
    )
    outcome, text = out["test_then_unmarked"]  # the server was already up: set up for the first
    assert outcome == "setup failed" and text.startswith(UNMARKED.format("setup")), out
    assert "started: ffmpeg -i x (fixture 'server')" in text
    assert out["test_first_marked"][0] == out["test_without_it"][0] == "call passed", out


def test_chromium_needs_the_browser_marker_too(pytester):
    out = _run(
        pytester,
        f"""
@pytest.mark.subprocess
def test_subprocess_only():
    {CHROMIUM}

@pytest.mark.subprocess
@pytest.mark.browser
def test_both():
    {CHROMIUM}
""",
    )
    outcome, text = out["test_subprocess_only"]
    assert outcome == "call failed", out
    assert text.startswith(
        "this test started a browser in its call but is not marked @pytest.mark.browser"
    )
    assert "pytest.mark.subprocess" not in text
    assert out["test_both"][0] == "call passed", out


@pytest.mark.subprocess
def test_a_process_left_running_by_its_test_is_killed_when_the_test_ends(pytester, tmp_path):
    """A test that fails before it stops its process (here: a `sleep 60` it never waits for)
    does not leave it running to load the machine for the tests after it."""
    pid_file = tmp_path / "pid"
    out = _run(
        pytester,
        f"""
@pytest.mark.subprocess
def test_leaves_one():
    proc = subprocess.Popen(["sleep", "60"])
    open({str(pid_file)!r}, "w").write(str(proc.pid))
    assert False, "failed before its kill"
""",
    )
    assert out["test_leaves_one"][0] == "call failed", out
    pid = int(pid_file.read_text())
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("Z", "X", "gone"), state  # killed (a zombie until its Popen is collected)


# what makes a test module need GStreamer, and what makes it a closed loop with a plant
GST_SIGNS = re.compile(
    r"media\.gst\(\)|GstFileSource|GstConnection|tests\.rtsp_server|needs_server"
    r"|decoder=\"gstreamer\"|\"--decoder\", \"gstreamer\"|h264_file"
)
PLANT_SIGNS = re.compile(r"bench_in_the_loop")


@pytest.mark.parametrize(("mark", "signs"), [("gst", GST_SIGNS), ("plant", PLANT_SIGNS)])
def test_modules_that_need_gstreamer_or_run_a_plant_say_so(mark, signs):
    """``-m "not gst"`` and ``-m "not plant"`` leave out what they say: every test module whose
    text uses GStreamer (its decoder, the RTSP server of tests/rtsp_server.py) or a plant's
    closed loop carries the marker, and no module carries it without a reason."""
    tests = Path(__file__).resolve().parent
    wrong = []
    for path in sorted(tests.rglob("test_*.py")):
        if path.name == "test_markers.py":
            continue
        text = path.read_text()
        uses, marked = bool(signs.search(text)), f"pytest.mark.{mark}" in text
        if uses != marked:
            wrong.append(f"{path.relative_to(tests)} ({'unmarked' if uses else 'marked, no use'})")
    assert not wrong, f"pytest.mark.{mark}: {', '.join(wrong)}"
