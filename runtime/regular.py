"""Reading a file a user or another process named, safely: only a regular file (where a link
leads), and at most a bound of it. A FIFO would block the read for ever, a device such as
``/dev/zero`` would never end, and a huge file would fill memory before anything is checked; each
is refused at once, before a byte is read (the bundle manifest, ``--calib-labels``, the plan
cache's sidecars and plans read through here)."""

from __future__ import annotations

import os
import stat


class NotRegular(ValueError):
    """The path is not a regular file, or it is over the bound; the message is a phrase to put
    after the path ("is not a regular file (a FIFO)", "is over 64 MiB")."""


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def kind(mode: int) -> str:
    """What a file of ``mode`` is, in words ("a FIFO", "a character device", ...)."""
    return next((words for test, words in _KINDS if test(mode)), "not a plain file")


def size_words(limit: int) -> str:
    """A byte bound in words: "64 MiB", "1 GiB", "4096 bytes"."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if limit >= 1 << shift and limit % (1 << shift) == 0:
            return f"{limit >> shift} {unit}"
    return f"{limit} bytes"


def open_regular(path: str | os.PathLike):
    """``path`` opened for reading in binary when it is a regular file (a link is followed);
    :class:`NotRegular` for anything else (a FIFO, a device, a socket, a folder), checked on the
    opened file (opened non-blocking, so a FIFO without a writer does not wait); OSError when it
    cannot be opened. For a file read to its end (hashed): :func:`read_regular` bounds it too."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    fh = os.fdopen(fd, "rb")
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        fh.close()
        raise NotRegular(f"is not a regular file ({kind(mode)})")
    return fh


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of ``path`` when it is a regular file (:func:`open_regular`) of at most
    ``limit`` bytes; :class:`NotRegular` for anything else or a file over the bound; OSError when
    it cannot be opened or read."""
    with open_regular(path) as fh:
        if os.fstat(fh.fileno()).st_size > limit:
            raise NotRegular(f"is over {size_words(limit)}")
        data = fh.read(limit + 1)  # a file that grew since fstat stops at the bound too
    if len(data) > limit:
        raise NotRegular(f"is over {size_words(limit)}")
    return data
