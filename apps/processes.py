"""The processes a command starts and must leave nothing of (``edgert serve``'s tritonserver and
its Python backend stubs), read from Linux's /proc, and signals held off while a shutdown runs."""

from __future__ import annotations

import contextlib
import os
import signal
import threading


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


def defer_signals():
    """(pending, restore): from now on SIGINT and SIGTERM are noted in ``pending``, not acted on,
    until ``restore()`` (main thread only; restoring twice is harmless)."""
    pending: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        return pending, lambda: None
    old = {
        s: signal.signal(s, lambda signum, frame: pending.append(signum))
        for s in (signal.SIGINT, signal.SIGTERM)
    }

    def restore() -> None:
        while old:
            sig, handler = old.popitem()
            signal.signal(sig, handler)

    return pending, restore
