"""Retention of a folder of finished files (``--keep-days``, ``--clips-max-gb``): the oldest go
first, never a file being written (those end in ``.part`` and match no pattern here) nor the newest
one, as NVRs keep the latest recording whatever the limit."""

from __future__ import annotations

import time
from pathlib import Path


def retain(
    folder: Path, patterns: tuple, max_gb: float | None = None, keep_days: float | None = None
) -> list:
    """Delete the files of ``folder`` matching ``patterns`` older than ``keep_days``, then the
    oldest while they take more than ``max_gb``; the newest always stays. The paths deleted."""
    if max_gb is None and keep_days is None:
        return []
    files = []
    for pattern in patterns:
        for p in folder.glob(pattern):
            try:
                st = p.stat()
            except OSError:  # deleted meanwhile (another run's retention)
                continue
            files.append((st.st_mtime, st.st_size, p))
    files.sort()
    gone, newest = [], files[-1:] if files else []
    kept = files[:-1]
    if keep_days is not None:
        limit = time.time() - keep_days * 86400
        gone = [f for f in kept if f[0] < limit]
        kept = [f for f in kept if f[0] >= limit]
    if max_gb is not None:
        total = sum(size for _, size, _ in kept + newest)
        while kept and total > max_gb * 1e9:
            f = kept.pop(0)
            total -= f[1]
            gone.append(f)
    deleted = []
    for _, _, p in gone:
        try:
            p.unlink()
            deleted.append(p)
        except FileNotFoundError:
            continue
    return deleted
