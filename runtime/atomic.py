"""Atomic file and folder writes: a temp file (or folder) beside the target, then a rename.

Nothing half-written survives an error or a crash, and errors such as a full disk or a read-only
folder become one-sentence :class:`OutputError`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import OutputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def describe_os_error(exc: OSError, path: Path) -> str:
    """One sentence for an OSError met while writing ``path``."""
    if exc.errno == errno.ENOSPC:
        return f"no space left on the device while writing {path}"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write {path}: permission denied (or read-only file system)"
    return f"cannot write {path}: {exc.strerror or exc}"


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, fsync, rename)."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise OutputError(describe_os_error(exc, path)) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def write_text(path: str | os.PathLike, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def staged_directory(target: str | os.PathLike, replace: bool = True) -> Iterator[Path]:
    """Yield an empty staging folder beside ``target``; on success it becomes ``target``.

    On any exception the staging folder is removed and ``target`` is left as it was. When
    ``target`` exists and ``replace`` is true it is swapped out only after the new folder is
    complete (rename aside, rename in, delete the old one).
    """
    target = Path(target).absolute()
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=parent))
        os.chmod(stage, 0o777 & ~_umask())
    except OSError as exc:
        raise OutputError(describe_os_error(exc, target)) from exc
    try:
        yield stage
        if target.exists():
            if not replace:
                raise OutputError(f"{target} already exists")
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=parent))
            os.rmdir(old)
            os.replace(target, old)
            os.replace(stage, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(stage, target)
    except OSError as exc:
        shutil.rmtree(stage, ignore_errors=True)
        raise OutputError(describe_os_error(exc, target)) from exc
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
