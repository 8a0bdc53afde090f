"""Clock operating points on Jetson (opt-in: ``--clocks auto`` or a sweep's clock axis): the GPU's
devfreq limits and the memory controller's (EMC) cap, set inside the current power mode's
envelope and put back afterwards.

Where each board exposes them, and which rates are the candidates: :mod:`.clock_domains`.

Every file that may be written is read and recorded in a state file *before* the first write
(``ROOT/run/edgert/clocks.json``: ``/run`` is emptied at boot, when the board's clocks are reset
too). :class:`ClockSession` puts the values back when it ends (normally, on Ctrl-C, SIGTERM and
SIGHUP); after a SIGKILL or a power cut of the process, ``edgert power --restore`` (or the next
``--clocks`` run) puts them back from the state file. Sysfs files are written in place (a rename
does not work there), in the order devfreq needs: a minimum never above the maximum in force.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import threading
import time
from pathlib import Path

from ..atomic import pid_alive
from ..errors import SignalStop
from .clock_domains import ClockError, Controls, Domain, find, hz
from .sensors import sysfs_root

__all__ = [
    "ClockError",
    "ClockSession",
    "Controls",
    "Domain",
    "find",
    "restore_saved",
    "state_path",
]

STATE = "run/edgert/clocks.json"


def state_path(root=None) -> Path:
    return sysfs_root(root) / STATE


def _write(path: Path, value: str) -> None:
    """One write in place (sysfs), to a file that exists (never created) and is not a link."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "w") as fh:
        fh.write(value)


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def _clock_files(root=None) -> set:
    """The files ``--clocks`` may write under ``root``, links resolved."""
    return {os.path.realpath(f) for d in find(root).domains for f in d.files()}


def restore_saved(root=None, say=lambda s: None) -> list:
    """Put back the values a ``--clocks`` run recorded and did not restore (it was killed); the
    files restored. A run still alive holds them: ClockError."""
    path = state_path(root)
    try:
        state = json.loads(path.read_text())
        pid, saved = int(state["pid"]), [(Path(p), str(v)) for p, v in state["files"]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ClockError(f"{path} is not a clock record edgert wrote ({exc})") from None
    if pid != os.getpid() and pid_alive(pid):
        raise ClockError(
            f"edgert process {pid} has the clocks set (recorded in {path}); stop it first, and it "
            "puts them back itself"
        )
    allowed = _clock_files(root)
    stray = next((p for p, _ in saved if os.path.realpath(p) not in allowed), None)
    if stray is not None or any(not v or hz(v.split()[0]) is None for _, v in saved):
        what = f"{stray}, not a clock file" if stray is not None else "a value that is not a clock"
        raise ClockError(
            f"{path} names {what} that --clocks sets under {sysfs_root(root)}: not a record "
            "edgert wrote; nothing was written (remove it if it is stale)"
        )
    failed = _put_back(saved)
    if failed:
        raise ClockError(
            f"could not put back {', '.join(str(p) for p, _ in failed)} "
            f"({failed[0][1]}); the record stays in {path}"
        )
    path.unlink()
    say(f"clocks: put back {len(saved)} files recorded by edgert process {pid}")
    return [str(p) for p, _ in saved]


def _put_back(saved: list) -> list:
    """Write every recorded value; a devfreq minimum refused while the maximum is still lower
    goes through on a second pass. [(file, why)] of those that failed both times."""
    todo = list(saved)
    for _ in range(2):
        failed = []
        for path, value in todo:
            try:
                _write(path, value)
            except OSError as exc:
                failed.append((path, value, exc))
        todo = [(p, v) for p, v, _ in failed]
        if not todo:
            return []
    return [(p, exc.strerror or str(exc)) for p, _, exc in failed]


class ClockSession:
    """Clocks set for one run and put back at its end. ``set(gpu=Hz, emc=Hz)`` writes the
    domains' limits (None: leave it); :meth:`close` (also on ``with`` exit, Ctrl-C, SIGTERM,
    SIGHUP) restores every file recorded before the first write."""

    def __init__(self, controls: Controls, root=None, say=lambda s: None) -> None:
        self.controls, self.root, self.say = controls, root, say
        restore_saved(root, say)  # a killed run's values go back before anything is read
        self.start = {d.name: d.limits() for d in controls.domains}
        self.current: dict = {}  # name -> Hz set
        self.changes = 0
        self._saved: list | None = None
        self._old_hup = None
        self._lock = threading.Lock()

    def __enter__(self) -> ClockSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def candidates(self, name: str) -> list:
        d = self._domain(name)
        return d.candidates(self.start[name]) if d else []

    def _domain(self, name: str) -> Domain | None:
        return getattr(self.controls, name)

    def _record(self) -> None:
        """Check every file can be written, then record its value, before the first write."""
        files = [f for d in self.controls.domains for f in d.files()]
        denied = [f for f in files if not os.access(f, os.W_OK)]
        if denied and _read_only(denied[0]):
            raise ClockError(
                f"--clocks cannot write {denied[0]}: it is on a read-only file system (a "
                "container's /sys is mounted so unless it is given read-write); nothing was changed"
            )
        if denied:
            raise ClockError(
                f"--clocks cannot write {denied[0]} (permission denied): run as root or give the "
                "user write access with a udev rule; nothing was changed"
            )
        path = state_path(self.root)
        # absolute: a restore from another folder (or the next run) writes this very tree
        saved = [(os.path.abspath(f), f.read_text().strip()) for f in files]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps({"pid": os.getpid(), "t": time.time(), "files": saved}))
            os.replace(tmp, path)
        except OSError as exc:
            raise ClockError(
                f"--clocks cannot record the original clocks in {path} "
                f"({exc.strerror or exc}); nothing was changed"
            ) from None
        self._saved = [(Path(p), v) for p, v in saved]
        # a closed terminal ends the run as Ctrl-C does (clocks go back), unless the run gave
        # SIGHUP a meaning of its own (the camera re-reads its bundle): one meaning in any phase
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGHUP) in (signal.SIG_DFL, None):
            self._old_hup = signal.signal(signal.SIGHUP, _hangup)

    def set(self, gpu: int | None = None, emc: int | None = None) -> dict:
        """Limit the GPU and/or the EMC to these rates (each one of its candidates)."""
        with self._lock:
            if self._saved is None:
                self._record()
            for name, rate in (("gpu", gpu), ("emc", emc)):
                d = self._domain(name)
                if rate is None or d is None or self.current.get(name) == rate:
                    continue
                for path, value in d.writes(int(rate), self.start[name]):
                    try:
                        _write(path, value)
                    except OSError as exc:
                        self._restore_locked()
                        why = (
                            "permission denied"
                            if exc.errno in (errno.EACCES, errno.EPERM)
                            else exc.strerror
                        )
                        raise ClockError(
                            f"--clocks could not write {value} to {path} ({why}); the clocks "
                            "were put back"
                        ) from None
                self.current[name] = int(rate)
                self.changes += 1
            return dict(self.current)

    def close(self) -> None:
        with self._lock:
            self._restore_locked()

    def _restore_locked(self) -> None:
        if self._saved is None:
            return
        failed = _put_back(self._saved)
        self._saved = None
        if self._old_hup is not None:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGHUP, self._old_hup)
            self._old_hup = None
        if failed:
            self.say(
                f"clocks: could not put back {failed[0][0]} ({failed[0][1]}); "
                f"`edgert power --restore` retries from {state_path(self.root)}"
            )
            return
        with contextlib.suppress(OSError):
            state_path(self.root).unlink()

    def report(self) -> dict:
        """What edgert set and what was in force before: the run's clocks, told truly."""
        out = {}
        for d in self.controls.domains:
            lo, hi = self.start[d.name]
            out[d.name] = {
                "node": str(d.node),
                "before_max_mhz": round(hi / 1e6, 3),
                "before_min_mhz": None if lo is None else round(lo / 1e6, 3),
                "set_max_mhz": (
                    round(self.current[d.name] / 1e6, 3) if d.name in self.current else None
                ),
            }
        return out


def _hangup(signum, frame):
    raise SignalStop  # a closed terminal ends the run the way Ctrl-C does: clocks go back
