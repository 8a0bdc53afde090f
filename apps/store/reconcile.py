"""Rows and files agree: at a store's start, the rows naming a clip or snapshot that is no longer
there are marked gone, and the files edgert wrote into those folders (the folders' own record,
``DIR/.edgert/files.jsonl``, says which are edgert's) that no row names are counted and named
(written while the store was off, or by a run killed before its batch was committed). Nothing is
deleted here: retention alone deletes files, and marks their rows in the same step."""

from __future__ import annotations

import os
from pathlib import Path

from edgert.apps.camera.sinks.retention import read_record

SHOWN = 5  # unknown files named in the report; the rest counted


def reconcile(conn, folders=()) -> dict:
    """Mark the rows of missing files, count the unknown files of ``folders`` and of every folder
    a row names; what was found."""
    named: set = set()
    missing = []
    sql = (
        "SELECT clip FROM events WHERE clip IS NOT NULL AND media_gone = 0 "
        "UNION SELECT snapshot FROM events WHERE snapshot IS NOT NULL AND media_gone = 0 "
        "UNION SELECT snapshot FROM tracks WHERE snapshot IS NOT NULL AND snapshot_gone = 0"
    )
    for (path,) in conn.execute(sql).fetchall():
        named.add(path)
        if not os.path.lexists(path) and not os.path.lexists(path + ".part"):
            missing.append(path)
    for (path,) in conn.execute(
        "SELECT clip FROM events WHERE clip IS NOT NULL AND media_gone = 1"
    ):
        named.add(path)  # gone and said so: known
    named |= _crops(conn)
    if missing:
        conn.execute("BEGIN IMMEDIATE")
        for path in missing:
            mark_gone(conn, path)
        conn.execute("COMMIT")
    unknown = []
    for folder in sorted({Path(p).parent for p in named} | {Path(f) for f in folders}):
        for name, entry in read_record(folder).items():
            path = folder / name
            if "id" in entry and str(path) not in named and os.path.lexists(path):
                unknown.append(str(path))
    return {
        "rows_of_missing_files": len(missing),
        "unknown_files": len(unknown),
        "unknown_shown": sorted(unknown)[:SHOWN],
    }


def _crops(conn) -> set:
    """The snapshots' crops the events name (kept in their JSON)."""
    import json

    out = set()
    for (data,) in conn.execute("SELECT data FROM events WHERE data LIKE '%snapshot_crop%'"):
        crop = json.loads(data).get("snapshot_crop")
        if crop:
            out.add(str(crop))
    return out


def mark_gone(conn, path: str) -> None:
    """The rows naming ``path`` (a clip or a snapshot retention deleted) say it is gone."""
    conn.execute("UPDATE events SET media_gone = 1 WHERE clip = ? OR snapshot = ?", (path, path))
    conn.execute("UPDATE tracks SET snapshot_gone = 1 WHERE snapshot = ?", (path,))
