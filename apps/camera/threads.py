"""The camera's threads under their own names where the operating system shows them (Linux: ``top
-H``, htop, ``ps -L``, ``/proc/PID/task/TID/comm``), so a device's CPU can be read by stage:
``capture-0``, ``prepare-0``, ``batcher``, ``finish``, ``output`` beside GStreamer's own."""

from __future__ import annotations

import functools
import sys
import threading

PR_SET_NAME = 15  # linux/prctl.h
NAME_BYTES = 15  # the kernel keeps 16 bytes, the last one the terminating zero


@functools.lru_cache(maxsize=1)
def _prctl():
    """libc's prctl, or None where there is none (not Linux, no libc found)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` (its first 15 bytes) in the operating system's view; a
    system without thread names is left as it is."""
    prctl = _prctl()
    if prctl is not None:
        prctl(PR_SET_NAME, name.encode("utf-8", "replace")[:NAME_BYTES], 0, 0, 0)


def named(target):
    """``target`` run under its thread's own name (the ``name`` given to its Thread)."""

    @functools.wraps(target)
    def run(*args, **kwargs):
        name_os_thread(threading.current_thread().name)
        return target(*args, **kwargs)

    return run
