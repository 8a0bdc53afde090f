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


def _write_with(path: str | os.PathLike, fill, new: bool = False) -> None:
    """``fill(file)`` writes a temp file in ``path``'s folder; then fsync and rename onto ``path``
    (with ``new``, linked to ``path`` only if nothing has that name: FileExistsError otherwise).
    OSError (a full disk, a read-only folder) becomes OutputError; the temp file never stays."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fill(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
        if new:
            rename_new(tmp, path)  # EEXIST when another run took the name: nothing overwritten
        else:
            os.replace(tmp, path)
        tmp = None
    except FileExistsError:
        raise
    except OSError as exc:
        raise OutputError(describe_os_error(exc, path)) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, fsync, rename)."""
    _write_with(path, lambda fh: fh.write(data))


def write_new(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, only where no file has that name: FileExistsError
    otherwise (another process took it; nothing of its is overwritten)."""
    _write_with(path, lambda fh: fh.write(data), new=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def copy_file(source: str | os.PathLike, path: str | os.PathLike) -> None:
    """Copy ``source`` to ``path`` atomically (a temp copy beside it, fsync, rename)."""

    def fill(out) -> None:
        with open(source, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)

    _write_with(path, fill)


_RENAME_NOREPLACE = 1  # linux/fs.h
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _renameat2(a: Path, b: Path, flags: int) -> bool:
    """Linux ``renameat2(a, b, flags)``; False where the kernel, the C library or the file system
    cannot (OSError for any other failure, FileExistsError with RENAME_NOREPLACE)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (RENAME_EXCHANGE); False where that cannot be done."""
    return _renameat2(a, b, _RENAME_EXCHANGE)


def rename_new(a: str | os.PathLike, b: str | os.PathLike) -> None:
    """Rename ``a`` to ``b`` only if nothing has the name ``b`` (FileExistsError otherwise): a hard
    link then unlink, or RENAME_NOREPLACE where the file system has no links (FAT, exFAT)."""
    try:
        os.link(a, b)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
            raise
        if not _renameat2(Path(a), Path(b), _RENAME_NOREPLACE):
            if os.path.lexists(b):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(b)) from None
            os.replace(a, b)  # neither can be done here: checked, then renamed
        return
    os.unlink(a)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _leftovers(target: Path) -> list[tuple[Path, str]]:
    """Staging (``.partial``) and swapped-out (``.old``) folders of ``target`` whose writer has
    died: ``.<name>.<pid>.<random>.partial|old``."""
    found = []
    for p in target.parent.glob(f".{glob_escape(target.name)}.*"):
        kind = p.suffix[1:]
        if kind not in ("partial", "old"):
            continue
        pid_text = p.name[len(target.name) + 2 :].split(".", 1)[0]
        if pid_text.isdigit() and pid_alive(int(pid_text)):
            continue  # a live process (this one too: another thread) is writing it
        found.append((p, kind))
    return found


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[]" else c for c in name)


def recover(target: str | os.PathLike) -> None:
    """Mend what a crash during :func:`staged_directory` left: when ``target`` is missing but a
    complete swapped-out copy exists, put it back; then delete dead writers' leftovers."""
    target = Path(target).absolute()
    leftovers = _leftovers(target)
    if not target.exists():
        olds = sorted((p for p, kind in leftovers if kind == "old"), key=os.path.getmtime)
        if olds:
            with contextlib.suppress(OSError):
                os.replace(olds[-1], target)
    for p, _ in leftovers:
        if p.is_symlink():  # a link swapped out by an older edgert (rmtree refuses links)
            with contextlib.suppress(OSError):
                p.unlink()
        elif p.exists():
            shutil.rmtree(p, ignore_errors=True)


@contextlib.contextmanager
def staged_directory(target: str | os.PathLike, replace: bool = True) -> Iterator[Path]:
    """Yield an empty staging folder beside ``target`` (where it points, when it is a symbolic link);
    on success it becomes ``target``.

    On any exception the staging folder is removed and ``target`` is left as it was. When
    ``target`` exists and ``replace`` is true, the complete new folder and the old one trade
    places in one atomic step (``renameat2(RENAME_EXCHANGE)`` on Linux), so a crash at any point
    leaves either the old or the new folder at ``target``. Where the file system cannot exchange,
    the old folder is renamed aside first; :func:`recover` (run before every write) puts it back if
    a crash came between the two renames. Leftovers of earlier crashes are deleted.
    """
    target = Path(target).absolute()
    if target.is_symlink():  # write where the link points; the link stays a link
        target = Path(os.path.realpath(target))
    parent = target.parent
    tag = f".{target.name}.{os.getpid()}."
    try:
        parent.mkdir(parents=True, exist_ok=True)
        recover(target)
        stage = Path(tempfile.mkdtemp(prefix=tag, suffix=".partial", dir=parent))
        os.chmod(stage, 0o777 & ~_umask())
    except OSError as exc:
        raise OutputError(describe_os_error(exc, target)) from exc
    try:
        yield stage
        if target.exists() or target.is_symlink():
            if not replace:
                raise OutputError(f"{target} already exists")
            if _exchange(stage, target):
                shutil.rmtree(stage, ignore_errors=True)  # now holds the old folder
            else:
                old = Path(tempfile.mkdtemp(prefix=tag, suffix=".old", dir=parent))
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
