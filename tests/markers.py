"""The suite's markers, and the check that keeps them true (a pytest plugin: tests/conftest.py
loads it with ``pytest_plugins``; an inner pytest run loads it with ``-p tests.markers``).

``subprocess``: the test starts another process (the edgert CLI, a broker, a browser, ffmpeg, a
plant...). ``make test-quick`` and ``-m "not subprocess"`` leave these out, so a test that starts
one without the marker would make the quick run slow and its selection a lie: an audit hook
(``sys.addaudithook``) sees every process Python starts, from any thread, and a test that is not
marked fails with a sentence naming the marker. It counts the test's setup (its fixtures,
session-scoped ones included, even when an earlier test set them up) and its call; teardown is
not counted (a session fixture's finaliser runs in whichever test happens to be last).
``browser``: the test starts Chromium (it is marked ``subprocess`` too). ``gst`` and ``plant``
name what a module needs (GStreamer) or does (a closed loop against a simulated board), checked
from the modules' text by tests/test_markers.py.

A process a test started and left running (it failed before its ``kill``) is killed when the test
ends (``_no_process_outlives_its_test``), so it cannot load the machine for the tests after it.

Processes started outside Python (a C library's own fork/exec, GStreamer's plugin scanner) raise
no audit event and are not seen. Only the standard library and pytest are imported here: the
oldest-dependency venv (``make test-oldest``) runs it as well.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

import pytest

MARKERS = {
    "subprocess": "starts another process: the edgert CLI, a broker, a browser, ffmpeg, a plant "
    "(left out of `make test-quick`; tests/markers.py fails a test that does so unmarked)",
    "browser": "starts Chromium (marked subprocess too)",
    "gst": "uses GStreamer (python3-gi's Gst: the gstreamer decoder, the RTSP server, the "
    're-stream): -m "not gst" where it is not installed (tests/test_markers.py keeps it true)',
    "plant": "runs a closed loop against a simulated board (tests/*_plant.py's "
    "bench_in_the_loop): the slow power, temperature and clock tests",
}

# Python's audit events for starting a process (https://docs.python.org/3/library/audit_events.html);
# subprocess.Popen is raised for every Popen, whichever way it then forks.
_EVENTS = frozenset(
    {
        "subprocess.Popen",
        "os.system",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.exec",
    }
)
_BROWSERS = ("chromium", "chromium-browser", "chrome", "google-chrome", "headless_shell")

# One audit hook per interpreter (they cannot be removed); it reports to the innermost pytest
# session that is running, so an in-process inner run (pytester) owns the processes it starts.
_trackers: list = []
_installed = False


def _audit(event: str, args: tuple) -> None:
    if event not in _EVENTS or not _trackers:
        return
    with contextlib.suppress(Exception):  # a hook that raises would abort the Popen
        _trackers[-1].started(event, args)


def _command(event: str, args: tuple) -> list[str]:
    """The command line of a process-starting event, as a list of words ([] for a bare fork)."""
    if event == "os.system":
        return [os.fsdecode(args[0])] if args and args[0] is not None else []
    if event in ("subprocess.Popen", "os.posix_spawn", "os.exec"):  # (executable, args, ...)
        argv = args[1] if len(args) > 1 else None
    elif event == "os.spawn":  # (mode, path, args, env)
        argv = args[2] if len(args) > 2 else None
    else:
        return []
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    try:
        return [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv]
    except TypeError:
        return []


def _describe(event: str, words: list[str]) -> str:
    if not words:
        return f"{event} (a fork)" if event.startswith("os.fork") else event
    text = " ".join(words)
    return text if len(text) <= 160 else text[:157] + "..."


class _Tracker:
    """Which test (and which fixture) is running when a process starts."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.item = None
        self.phase = None
        self.fixtures: list = []  # the fixture definitions being set up, innermost last
        self.seen: dict = {}  # item nodeid -> [(phase, description, words)]
        self.spawning_fixtures: dict = {}  # FixtureDef -> (description, words) of its first process

    def started(self, event: str, args: tuple) -> None:
        words = _command(event, args)
        with self.lock:
            item, phase = self.item, self.phase
            if item is None or phase not in ("setup", "call"):
                return
            entry = (phase, _describe(event, words), words)
            self.seen.setdefault(item.nodeid, []).append(entry)
            if phase == "setup" and self.fixtures:
                self.spawning_fixtures.setdefault(self.fixtures[-1], entry[1:])

    # pytest hooks (the tracker is registered as a plugin)

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        self.fixtures.append(fixturedef)
        try:
            return (yield)
        finally:
            self.fixtures.pop()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item):
        return (yield from self._phase(item, "setup"))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item):
        return (yield from self._phase(item, "call"))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item, nextitem):
        self.item, self.phase = item, "teardown"
        try:
            return (yield)
        finally:
            self.item = self.phase = None
            self.seen.pop(item.nodeid, None)

    def _phase(self, item, phase: str):
        self.item, self.phase = item, phase
        raised = None
        try:
            result = yield
        except (KeyboardInterrupt, SystemExit):
            self.phase = None
            raise
        except BaseException as e:  # the test's own failure, skip or xfail
            raised = e
        self.phase = None
        problem = self._problem(item, phase)
        if problem:
            if raised is not None and not isinstance(raised, pytest.skip.Exception):
                problem += f"\n(the test also raised {type(raised).__name__}: {raised})"
            pytest.fail(problem, pytrace=False)
        if raised is not None:
            raise raised
        return result

    def _problem(self, item, phase: str) -> str | None:
        own = [e for e in self.seen.get(item.nodeid, ()) if e[0] == phase]
        if phase == "setup":  # its fixtures' processes, also those started for an earlier test
            defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
            for name, fixturedefs in defs.items():
                for fixturedef in fixturedefs:
                    if fixturedef in self.spawning_fixtures:
                        d, words = self.spawning_fixtures[fixturedef]
                        own = [e for e in own if e[1] != d]
                        own.append(("setup", f"{d} (fixture {name!r})", words))
        if not own:
            return None
        lines = []
        if item.get_closest_marker("subprocess") is None:
            lines.append(
                f"this test started a process in its {phase} but is not marked "
                "@pytest.mark.subprocess (tests/markers.py): mark it, or its module with "
                "pytestmark = pytest.mark.subprocess, so that `make test-quick` and "
                '-m "not subprocess" leave it out'
            )
        browsers = [d for _, d, words in own if words and os.path.basename(words[0]) in _BROWSERS]
        if browsers and item.get_closest_marker("browser") is None:
            lines.append(
                f"this test started a browser in its {phase} but is not marked "
                "@pytest.mark.browser (tests/markers.py)"
            )
        if not lines:
            return None
        started = sorted({d for _, d, _ in own})
        shown = "\n".join(f"  started: {d}" for d in started[:5])
        more = f"\n  ... and {len(started) - 5} more" if len(started) > 5 else ""
        return "\n".join(lines) + "\n" + shown + more


_KEY = pytest.StashKey()


def pytest_configure(config) -> None:
    global _installed
    known = {line.split(":")[0].split("(")[0].strip() for line in config.getini("markers")}
    for name, text in MARKERS.items():
        if name not in known:  # pyproject.toml registers them for the suite; an inner run here
            config.addinivalue_line("markers", f"{name}: {text}")
    if not _installed:
        sys.addaudithook(_audit)
        _installed = True
    tracker = _Tracker()
    _trackers.append(tracker)
    config.pluginmanager.register(tracker, "edgert-subprocess-check")
    config.stash[_KEY] = tracker


def pytest_unconfigure(config) -> None:
    tracker = config.stash.get(_KEY, None)
    if tracker is not None and tracker in _trackers:
        _trackers.remove(tracker)


def _children() -> set[int]:
    """This process's live children (Linux /proc; empty elsewhere)."""
    found: set[int] = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                found.update(int(pid) for pid in f.read().split())
        except OSError:
            continue
    return found


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test():
    """A process a test started and did not stop (a failed assertion, a timeout before its
    ``kill``) is killed when the test ends, so it cannot load the machine for the tests after it.
    Servers of module- and session-scoped fixtures start before this and are left alone."""
    before = _children()
    yield
    for pid in _children() - before:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, os.WNOHANG)
