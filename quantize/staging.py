"""Staging and the transactional commit of a build: every file a build makes waits in memory
(``BuildReport.pending``) until the gate has passed, then files and manifest are written as one
change."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from edgert.runtime import atomic
from edgert.runtime.bundle import write_manifest
from edgert.runtime.errors import OutputError


def commit(folder: Path, manifest: dict, files: dict[str, bytes | None]) -> None:
    """Write ``files`` and the manifest that records them as one change: the files go to hidden
    temporary names first, then the manifest, then the files move into place (and the ones given
    as None, which the manifest no longer records, are removed). A failure (a full disk, say)
    before the manifest leaves the bundle as it was; a crash after it leaves files whose hashes
    the manifest does not match, which loading refuses with a sentence."""
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
