"""The processes a command starts and must leave nothing of (``edgert serve``'s tritonserver and
its Python backend stubs), read from Linux's /proc; the signals that stop a command, noted, and held
off while a shutdown runs."""

from __future__ import annotations

import contextlib
import os
import signal
import threading

from edgert.runtime.errors import SignalStop

_REASONS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}
_asked: list[str] = []  # the stops asked for since stop_on_signals()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def descendants(pid: int) -> list[int]:
    """Live processes below pid (Linux /proc): tritonserver's Python backend stubs, and their
    resource trackers and tensor store processes."""
    children, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = []
        try:  # every thread's children: Triton starts its stubs from its model-loading threads
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids += [int(k) for k in f.read().split()]
            except OSError:
                continue
        children += [k for k in kids if alive(k)]
        todo += kids
    return children


def _note(signum: int) -> None:
    _asked.append(_REASONS.get(signum, "interrupted"))


def stop_on_signals():
    """From now on Ctrl-C (SIGINT) and SIGTERM (docker stop, systemd) raise KeyboardInterrupt
    (SIGTERM as ``SignalStop``) and are noted first, so that an interrupt that lands in code which
    turns it into something else still ends the command as one: an extension's import says
    ImportError ("onnxruntime is not installed"), a GLib callback or a finaliser swallows it.
    Long loops call ``raise_if_stop_asked()``. SIGINT stays ignored where it was (a background job).
    Returns what puts the handlers before back; main thread only."""
    _asked.clear()
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_int(signum, frame):
        _note(signum)
        raise KeyboardInterrupt

    def on_term(signum, frame):
        _note(signum)
        raise SignalStop

    old = {signal.SIGTERM: signal.signal(signal.SIGTERM, on_term)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        old[signal.SIGINT] = signal.signal(signal.SIGINT, on_int)

    def restore() -> None:
        while old:
            sig, handler = old.popitem()
            signal.signal(sig, handler)

    return restore


def stop_asked() -> str | None:
    """ "terminated" or "interrupted" once SIGTERM or Ctrl-C asked the command to stop (SIGTERM
    wins), else None."""
    if not _asked:
        return None
    return "terminated" if "terminated" in _asked else "interrupted"


def raise_if_stop_asked() -> None:
    """For a long loop: a stop was asked (maybe swallowed where it landed): stop here as Ctrl-C
    would."""
    if _asked:
        raise SignalStop


def uninterrupted(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with Ctrl-C and SIGTERM held until it returns, then acted on (what
    it made is closed first). For loading a model: the first import of onnx runs its C++ module
    set-up (nanobind), and an interrupt raised inside that aborts the process ("terminate called
    after throwing an instance of 'nanobind::python_error'", measured at ~1 in 60 Ctrl-Cs in the
    camera's start-up) where one after it is a clean stop. Nothing is lost by holding it: a long
    native call (a TensorRT build) takes no interrupt before it returns anyway."""
    pending, restore = defer_signals()
    try:
        got = fn(*args, **kwargs)
    finally:
        restore()
    if pending:
        close = getattr(got, "close", None)
        if close is not None:
            close()
        raise SignalStop if signal.SIGTERM in pending else KeyboardInterrupt
    return got


def defer_signals():
    """(pending, restore): from now on SIGINT and SIGTERM are noted in ``pending``, not acted on,
    until ``restore()`` (main thread only; restoring twice is harmless)."""
    pending: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        return pending, lambda: None
    old = {
        s: signal.signal(s, lambda signum, frame: (pending.append(signum), _note(signum)))
        for s in (signal.SIGINT, signal.SIGTERM)
    }

    def restore() -> None:
        while old:
            sig, handler = old.popitem()
            signal.signal(sig, handler)

    return pending, restore
