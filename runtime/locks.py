"""An inter-process file lock (fcntl.flock), for builds that two processes may start at once."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import OutputError


@contextlib.contextmanager
def file_lock(path: str | Path, timeout: float = 3600.0) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if needed) for the block.

    Waits for another holder (polling, so a stuck holder gives a clear error after ``timeout``).
    The lock file itself is left in place: deleting it would race with a waiting process.
    """
    import fcntl

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise OutputError(f"cannot create lock file {path}: {exc.strerror}") from exc
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OutputError(
                        f"gave up waiting for {path} after {timeout:.0f} s (another build holds it)"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
