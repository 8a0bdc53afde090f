"""The PostgreSQL store's spool: while the server is away, each batch the writer could not commit
is appended to a file on the device (one JSON line per row, flushed to the disk before the batch
counts as kept), and replayed in order once the server is back; the server keeps each event once
(its ``uid``: ``ON CONFLICT DO NOTHING``), so a batch replayed twice (a commit whose answer was
lost, a kill during the replay) is not doubled. Bounded: past ``max_bytes`` the oldest rows are
dropped (counted), as MQTT's buffer drops its oldest events. One run holds it at a time (a lock):
a run killed while the server was away leaves it for the next run to replay."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
from pathlib import Path

from edgert.runtime import json_text
from edgert.runtime.errors import OutputError

MAX_BYTES = 256 * 1024 * 1024  # the spool's bound; about a week of a busy camera's events
_NOT_KEPT = ("source",)  # a row's reference to its event (the sinks that wait for the commit)


class Spool:
    def __init__(self, path, max_bytes: int = MAX_BYTES) -> None:
        self.path, self.max_bytes = Path(path), max_bytes
        self.dropped = 0  # rows dropped from a full spool
        self.spooled = 0  # rows appended, all told
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fh = open(self.path, "ab")  # noqa: SIM115 (held for the run: its lock)
        except OSError as exc:
            raise OutputError(f"store spool {self.path}: cannot open it: {exc.strerror}") from None
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.fh.close()
            raise OutputError(
                f"store spool {self.path} is held by another run; give each run its own "
                "(?spool=FILE or ?device=NAME)"
            ) from None

    @property
    def size(self) -> int:
        """The bytes kept (after :meth:`close`: what the file still holds)."""
        if not self.fh.closed:
            return self.fh.tell()
        return self.path.stat().st_size if self.path.exists() else 0

    def append(self, batch: list) -> None:
        """``batch`` (rows, and ("gone", path) marks) on the disk, in order, before this
        returns; the oldest rows dropped first when the spool would pass its bound."""
        lines = b"".join(_line(r) for r in batch)
        if self.size + len(lines) > self.max_bytes:
            self._drop(len(lines))
        self.fh.write(lines)
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.spooled += len(batch)

    def rows(self) -> list:
        """Every row kept, oldest first (a line a kill cut short is left out)."""
        out = []
        with open(self.path, "rb") as fh:
            for line in fh:
                with contextlib.suppress(ValueError):
                    row = json.loads(line, object_hook=_unpacked)
                    out.append(("gone", row["gone"]) if "gone" in row else row)
        return out

    def clear(self) -> None:
        """Every row replayed: the file emptied."""
        self.fh.truncate(0)
        self.fh.seek(0)
        os.fsync(self.fh.fileno())

    def _drop(self, room: int) -> None:
        """The oldest rows dropped until ``room`` more bytes fit under three quarters of the
        bound (the file rewritten beside, then moved over it)."""
        with open(self.path, "rb") as fh:
            lines = fh.readlines()
        keep, total = [], room
        for line in reversed(lines):
            if total + len(line) > self.max_bytes * 3 // 4:
                break
            keep.append(line)
            total += len(line)
        self.dropped += len(lines) - len(keep)
        self.fh.truncate(0)
        self.fh.seek(0)
        self.fh.write(b"".join(reversed(keep)))

    def close(self) -> None:
        """The lock let go; an empty spool removed."""
        with contextlib.suppress(OSError):
            if self.size == 0:
                self.path.unlink()
        self.fh.close()


def _line(row) -> bytes:
    if isinstance(row, tuple):
        return (json_text.dumps({"gone": row[1]}) + "\n").encode()
    kept = {k: v for k, v in row.items() if k not in _NOT_KEPT}
    return (json_text.dumps(kept, default=_packed) + "\n").encode()


_BYTES = "$bytes"  # a value that is bytes (a track's embedding): {"$bytes": base64}


def _packed(value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {_BYTES: base64.b64encode(bytes(value)).decode("ascii")}
    return str(value)


def _unpacked(obj: dict):
    if len(obj) == 1 and _BYTES in obj and isinstance(obj[_BYTES], str):
        return base64.b64decode(obj[_BYTES])
    return obj
