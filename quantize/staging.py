"""Staging and the transactional commit of a build: every file a build makes waits in memory
(``BuildReport.pending``) until the gate has passed, then files and manifest are written as one
change."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from edgert.runtime import atomic
from edgert.runtime.bundle import Manifest, write_manifest
from edgert.runtime.errors import OutputError

# a file system without hard links (FAT, exFAT) answers os.link with one of these
_NO_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EXDEV)


class _CannotStage(Exception):
    """The bundle's folder cannot be staged beside it (no hard links there)."""


def commit(folder: Path, manifest: dict, files: dict[str, bytes | None]) -> None:
    """Write ``files`` (name -> bytes; None: remove it, the manifest no longer records it) and
    the manifest that records them as one change.

    A new bundle folder is staged beside the bundle: a hard link of every file it keeps (no
    copy, no space), the new files and the new manifest; then the two folders trade places in
    one atomic step (:func:`~edgert.runtime.atomic.staged_directory`). A crash or a kill -9 at
    any moment leaves the old bundle or the new one, never a manifest naming a missing file;
    the staging folder a dead build left is removed by the next write. Where that cannot be
    done (no write access to the bundle's parent folder, no hard links on its file system), the
    files are written in place: see :func:`_commit_in_place`."""
    Manifest.from_dict(manifest)  # a manifest the bundle would refuse is never written
    real = Path(os.path.realpath(folder))
    if os.access(real.parent, os.W_OK | os.X_OK):
        try:
            _commit_by_swap(real, manifest, files)
            return
        except _CannotStage:
            pass
    _commit_in_place(Path(folder), manifest, files)


def _commit_by_swap(folder: Path, manifest: dict, files: dict[str, bytes | None]) -> None:
    with atomic.staged_directory(folder) as stage:
        os.chmod(stage, stat.S_IMODE(os.stat(folder).st_mode))
        _link_tree(folder, stage, {Path(name) for name in files}, Path())
        try:
            for name, data in files.items():
                if data is not None:
                    _write(stage / name, data)
            write_manifest(stage, manifest)
        except OSError as exc:
            raise OutputError(atomic.describe_os_error(exc, folder)) from exc


def _link_tree(source: Path, stage: Path, skip: set, rel: Path) -> None:
    """Hard-link every file under ``source`` / ``rel`` into ``stage`` / ``rel`` (folders made,
    links copied as links), but those in ``skip`` and the ``.pending`` files an older edgert's
    killed build left. A lock file stays the same file (the same inode), so a build waiting on
    ``.build.lock`` still waits on the lock this build holds."""
    with os.scandir(source / rel) as entries:
        for entry in entries:
            name = rel / entry.name
            if name in skip or (entry.name.startswith(".") and entry.name.endswith(".pending")):
                continue
            target = stage / name
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), target)
            elif entry.is_dir(follow_symlinks=False):
                os.mkdir(target)
                os.chmod(target, stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode))
                _link_tree(source, stage, skip, name)
            elif entry.is_file(follow_symlinks=False):
                try:
                    os.link(entry.path, target)
                except OSError as exc:
                    if exc.errno in _NO_LINKS:
                        raise _CannotStage from exc
                    raise
            # a FIFO, a socket or a device is no file of a bundle: not carried over


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _commit_in_place(folder: Path, manifest: dict, files: dict[str, bytes | None]) -> None:
    """The files go to hidden temporary names first, then the manifest, then the files move
    into place (and the ones given as None are removed). A failure (a full disk, say) before
    the manifest leaves the bundle as it was; a crash after it leaves files whose hashes the
    manifest does not match, which loading refuses with a sentence, until the next build."""
    temps: dict[str, Path] = {}
    try:
        for name, data in files.items():
            if data is None:
                continue
            final = folder / name
            temps[name] = final.with_name(f".{final.name}.pending")
            atomic.write_bytes(temps[name], data)
        write_manifest(folder, manifest)
        for name, tmp in temps.items():
            os.replace(tmp, folder / name)
        temps.clear()
        for name in (n for n, data in files.items() if data is None):
            with contextlib.suppress(FileNotFoundError):
                (folder / name).unlink()
    except OSError as exc:
        raise OutputError(atomic.describe_os_error(exc, folder)) from exc
    finally:
        for tmp in temps.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
