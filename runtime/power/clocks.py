"""Clock operating points on Jetson (opt-in: ``--clocks auto`` or a sweep's clock axis): the GPU's
devfreq limits and the memory controller's (EMC) cap, set inside the current power mode's
envelope and put back afterwards.

Where each board exposes them (the GPU node is found through ``/sys/class/devfreq`` by its known
names, as :func:`.thermal.gpu_clock` does):

==================  =============================================  ==========================================
board / release     GPU (devfreq, Hz)                              EMC cap (Hz)
==================  =============================================  ==========================================
Orin, JetPack 5     ``17000000.ga10b``: min_freq, max_freq,        ``/sys/kernel/nvpmodel_emc_cap/emc_iso_cap``
                    available_frequencies                          (``drivers/nvpmodel/nvpmodel_emc_cap.c``)
Orin, JetPack 6     ``17000000.gpu`` (the nvpmodel confs' path     ``/sys/kernel/nvpmodel_clk_cap/emc``
                    ``.../17000000.gpu/devfreq_dev/``)             (``nvpmodel-clk-cap.c``: a write is rounded
                                                                   to a rate the clock has; reading gives it)
Thor, JetPack 7     ``gpu-gpc-0``                                  devfreq ``bwmgr``: max_freq,
                                                                   available_frequencies
==================  =============================================  ==========================================

The GPU's candidates are its ``available_frequencies`` at or under the ``max_freq`` in force (and
at or over ``min_freq`` unless jetson_clocks pinned min = max, in which case the minimum follows
the maximum: the clock is pinned at each candidate, as NVIDIA's MLPerf "MaxQ" confs do). The EMC's
candidates under a cap file are the rates NVIDIA's own nvpmodel modes cap it at (``EMC MAX_FREQ``
in ``/etc/nvpmodel.conf``, which are rates of the memory's table) and its maximum (BPMP's
``max_rate`` in debugfs), at or under the cap in force; on Thor the devfreq table.

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
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..atomic import pid_alive
from ..errors import SensorError, SignalStop
from .sensors import sysfs_root

STATE = "run/edgert/clocks.json"
EMC_CAPS = (
    "sys/kernel/nvpmodel_clk_cap/emc",  # Orin, JetPack 6 (r36)
    "sys/kernel/nvpmodel_emc_cap/emc_iso_cap",  # Orin, JetPack 5 (r35)
)
EMC_DEVFREQ = "sys/class/devfreq/bwmgr"  # Thor (r38)
EMC_MAX_RATE = "sys/kernel/debug/bpmp/debug/clk/emc/max_rate"  # BPMP's clock (debugfs, root)
_EMC_CONF = re.compile(r"^\s*EMC\s+MAX_FREQ\s+(-?\d+)\s*$", re.MULTILINE)


class ClockError(SensorError):
    """The clocks cannot be set here (no node, no permission, another process holds them)."""


@dataclass(frozen=True)
class Domain:
    """One clock edgert may limit: ``kind`` "devfreq" (a folder with min_freq / max_freq) or
    "cap" (one file holding a maximum)."""

    name: str  # "gpu" or "emc"
    kind: str
    node: Path
    available: tuple  # Hz, ascending
    source: str  # where the table came from

    def files(self) -> list:
        if self.kind == "devfreq":
            return [self.node / "min_freq", self.node / "max_freq"]
        return [self.node]

    def limits(self) -> tuple:
        """(minimum, maximum) in force, Hz (a cap's minimum is None; a cap of 0 or less: none)."""
        if self.kind == "devfreq":
            return _read_int(self.node / "min_freq"), _read_int(self.node / "max_freq")
        cap = _read_int(self.node)
        return None, (cap if cap > 0 else max(self.available))

    def candidates(self, start: tuple) -> list:
        """The table's rates inside the envelope in force at ``start`` (its (min, max)),
        descending: at or under the maximum, and at or over the minimum unless pinned."""
        lo, hi = start
        pinned = lo is not None and lo == hi
        return sorted(
            (f for f in self.available if f <= hi and (pinned or lo is None or f >= lo)),
            reverse=True,
        )

    def writes(self, hz: int, start: tuple) -> list:
        """[(file, value)] that set this clock's maximum to ``hz``, in an order devfreq takes."""
        if self.kind != "devfreq":
            return [(self.node, str(hz))]
        lo0, hi0 = start
        new_min = hz if lo0 == hi0 else min(lo0, hz)  # pinned: follow; else only never above
        cur_min, _ = self.limits()
        mn, mx = (self.node / "min_freq", str(new_min)), (self.node / "max_freq", str(hz))
        return [mn, mx] if hz < cur_min else [mx, mn]

    def to_dict(self, start: tuple | None = None) -> dict:
        lo, hi = self.limits() if start is None else start
        return {
            "name": self.name,
            "node": str(self.node),
            "available_mhz": [round(f / 1e6, 3) for f in self.available],
            "min_mhz": None if lo is None else round(lo / 1e6, 3),
            "max_mhz": round(hi / 1e6, 3),
            "table_from": self.source,
        }


MAX_HZ = 10_000_000_000  # no Jetson clock runs near 10 GHz (EMC: 3.2 GHz Orin, 4.3 GHz Thor)


def _hz(text: str) -> int | None:
    """A frequency a driver writes (Hz, an integer, maybe as a float), None for anything else:
    not a number, not finite, or outside what a board's clock can be (0 or less: "no cap",
    kept as the drivers mean it; over MAX_HZ: junk)."""
    try:
        value = float(text)
    except ValueError:
        return None
    if value != value or abs(value) > MAX_HZ:  # NaN, inf, 1e17
        return None
    return int(value)


def _read_int(path: Path) -> int:
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise ClockError(f"cannot read {path}: {exc.strerror or exc}") from None
    value = _hz(text.split()[0]) if text else None
    if value is None:
        raise ClockError(f"{path} does not hold a frequency ({text[:40]!r})")
    return value


def _table(path: Path) -> tuple:
    """``available_frequencies``: one line of Hz values (sorted here: drivers list their own way;
    what cannot be a clock's rate is left out)."""
    try:
        values = {_hz(v) for v in path.read_text().split()}
    except OSError:
        return ()
    return tuple(sorted(v for v in values if v is not None and v > 0))


@dataclass(frozen=True)
class Controls:
    """The clocks this board lets edgert limit (either may be None), and why one is absent."""

    gpu: Domain | None
    emc: Domain | None
    reasons: tuple = ()

    @property
    def domains(self) -> list:
        return [d for d in (self.gpu, self.emc) if d is not None]


def find(root=None) -> Controls:
    """The GPU's devfreq node and the EMC cap under ``root`` (``/`` or ``--sysfs-root``)."""
    from .thermal import gpu_devfreq_node

    base = sysfs_root(root)
    reasons = []
    gpu = None
    node = gpu_devfreq_node(root)
    if node is None:
        reasons.append("no GPU devfreq node (not a Jetson, or its GPU driver is not loaded)")
    else:
        table = _table(node / "available_frequencies")
        if len(table) < 2:
            reasons.append(f"{node}/available_frequencies lists no frequencies to choose from")
        else:
            gpu = Domain("gpu", "devfreq", node, table, f"{node}/available_frequencies")
    emc = None
    bwmgr = base / EMC_DEVFREQ
    if bwmgr.is_dir():
        table = _table(bwmgr / "available_frequencies")
        if len(table) >= 2:
            emc = Domain("emc", "devfreq", bwmgr, table, f"{bwmgr}/available_frequencies")
    else:
        for rel in EMC_CAPS:
            cap = base / rel
            if cap.is_file():
                rates = _emc_rates(base, cap)
                if len(rates) >= 2:
                    emc = Domain(
                        "emc", "cap", cap, rates, "the EMC caps of /etc/nvpmodel.conf's modes"
                    )
                break
    if emc is None:
        reasons.append("no EMC cap with rates to choose from")
    return Controls(gpu, emc, tuple(reasons))


def _emc_rates(base: Path, cap: Path) -> tuple:
    """The rates NVIDIA's modes cap the EMC at (``EMC MAX_FREQ`` in nvpmodel.conf; -1 / 0 mean
    none), BPMP's maximum, and the cap in force."""
    rates = set()
    with contextlib.suppress(OSError):
        conf = (base / "etc/nvpmodel.conf").read_text(errors="replace")
        rates.update(int(v) for v in _EMC_CONF.findall(conf) if 0 < int(v) <= MAX_HZ)
    for path in (base / EMC_MAX_RATE, cap):
        with contextlib.suppress(ClockError):
            value = _read_int(path)
            if value > 0:
                rates.add(value)
    return tuple(sorted(rates))


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
    if stray is not None or any(not v or _hz(v.split()[0]) is None for _, v in saved):
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
            for name, hz in (("gpu", gpu), ("emc", emc)):
                d = self._domain(name)
                if hz is None or d is None or self.current.get(name) == hz:
                    continue
                for path, value in d.writes(int(hz), self.start[name]):
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
                self.current[name] = int(hz)
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
