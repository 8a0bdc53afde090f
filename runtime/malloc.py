"""glibc's malloc told to keep the memory a frame's arrays give back (issue 71).

A camera allocates the same few large arrays every frame (the decoder's frame copy, the model's
tensor, OpenCV's planes, the engine's outputs: 0.2-5 MB each) in several threads. glibc serves
a large allocation with a fresh ``mmap`` (128 kB or more at first, a threshold it raises as such
blocks are freed) and gives a heap's top back to the kernel once more than its trim threshold
lies free there (128 kB at first, then twice the other); so, frame after frame, the same memory
went back to the kernel and came again, zeroed, a page fault every 4 kB. Measured on a 2-core
x86 VM: a bundle's uint8 letterbox of a 640x360 frame in a loop, as it was before it split into
the tensor's planes, 605 faults and 0.61-1.22 ms a call, none and 0.20-0.25 ms with the thresholds
below (the same tensor; the faulting arrays were OpenCV's split's planes, ~300 a frame, which the
float path still takes); the camera at 8 and 16 streams (benchmarks/streams.py), 12-46 faults a
frame, under 1 with them.

:func:`keep_freed_memory` sets both thresholds once (``mallopt``): blocks under 32 MB come from
the heap (a 4K BGR frame is 25 MB), and up to 64 MB free at a heap's top is kept for the next
frame. What a process holds then stays near its high-water mark, as a camera's does anyway.
``edgert camera`` calls it before it opens anything; a library caller's process is its
own to tune: call it, or set ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_``. Nothing
is changed where the process' C library is not glibc (musl, macOS), where one of glibc's own
variables is set (the user tuned malloc already), or with ``EDGERT_MALLOC=system``. Device side:
ctypes only, Python 3.8."""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD = 32 << 20  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit; 512 kB on 32-bit)
TRIM_THRESHOLD = 64 << 20
OWN_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

_done: str | None = None  # what the first call decided, said again by later calls


def keep_freed_memory() -> str:
    """Set glibc's thresholds (once a process); what was done, in words: ``"kept"``, or why
    not (``"not glibc"``, ``"the user's own"`` and so on)."""
    global _done
    if _done is None:
        _done = _decide()
    return _done


def glibc_mallopt():
    """glibc's ``mallopt(param, value)`` (1 when it took the value), or None where the process'
    C library is not glibc (musl has a ``mallopt`` that does nothing; macOS none)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc's own symbol: musl has none
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt


def _decide() -> str:
    if os.environ.get("EDGERT_MALLOC", "").strip().lower() == "system":
        return "EDGERT_MALLOC=system"
    if any(os.environ.get(name) for name in OWN_SETTINGS):
        return "the user's own (MALLOC_*_ in the environment)"
    mallopt = glibc_mallopt()
    if mallopt is None:
        return "not glibc"
    largest = MMAP_THRESHOLD if ctypes.sizeof(ctypes.c_void_p) == 8 else 512 << 10
    if mallopt(M_MMAP_THRESHOLD, largest) != 1 or mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        return "glibc refused the thresholds"
    return "kept"
