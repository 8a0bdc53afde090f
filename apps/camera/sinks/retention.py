"""What edgert wrote into a folder, and the retention of it (``--keep-days``, ``--clips-max-gb``).

A folder given to ``--clips`` or ``--snapshots`` may be a user's own (``~/Videos``, a shared NVR
folder): retention may only ever remove files edgert itself wrote. Every file a sink writes is
entered in the folder's record, ``DIR/.edgert/files.jsonl`` (a line per file: its name, the file's
device, inode and size when it was finished, the run that wrote it), and retention considers only
the files that record names and that are still the very file it recorded: a regular file (never
a symbolic link, never followed), the same device and inode, the same size. Anything else in the
folder (a user's video, a file of the same name put there since, a folder named like a clip) is
never touched. Records of files gone are dropped when the record is rewritten.

A clip being written is entered too (``writing``, with its run): its ``NAME.part`` counts against
the size budget, and when its run has died (killed mid-clip) the next run that opens the folder
finishes it: it cuts the file after its last complete MP4 fragment, renames it to the name the
events gave it, and says so. Whether a run lives is whether it still holds the lock on its
``.edgert/run-ID.lock`` (an ``flock``, let go by the kernel when the process dies, whatever its
pid namespace), never a pid that another process may have taken since.

Runs sharing a folder take ``.edgert/lock`` around each change of the record. Names carry a run
ID (8 hex digits) and are created exclusively, so two runs never write one name.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
import time
from pathlib import Path

from edgert.runtime import atomic
from edgert.runtime.errors import OutputError

RECORD_DIR = ".edgert"
RECORD = "files.jsonl"
_NAME = re.compile(r"[^/\\\x00]{1,255}")
on_deleted: list = []  # told the paths retention deleted, as it deletes them (a run's store)


def run_id() -> str:
    """A run's tag in the names it writes (8 hex digits)."""
    return secrets.token_hex(4)


def _plain(name: str) -> bool:
    """A bare file name (no folder, no ``..``): all a record may name."""
    return bool(_NAME.fullmatch(name)) and name not in (".", "..")


def _identity(st: os.stat_result) -> list:
    return [st.st_dev, st.st_ino, st.st_size]


def _lock_fd(path: Path, create: bool = True) -> int:
    flags = os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
    return os.open(path, flags, 0o666)


class Ledger:
    """The record of the files one run writes into ``folder`` (see the module's text)."""

    def __init__(self, folder: str | os.PathLike, what: str) -> None:
        import fcntl

        self.folder, self.what = Path(folder), what
        self.dir = self.folder / RECORD_DIR
        self.run = run_id()
        try:
            self.dir.mkdir(exist_ok=True)
            if self.dir.is_symlink() or not self.dir.is_dir():
                raise OutputError(
                    f"{what}: {self.dir} is not a folder edgert made (it keeps the record of its "
                    "own files there); move it away"
                )
            self._run_fd = _lock_fd(self.dir / f"run-{self.run}.lock")
            fcntl.flock(self._run_fd, fcntl.LOCK_EX)
        except OSError as exc:
            raise OutputError(f"{what}: {atomic.describe_os_error(exc, self.dir)}") from None
        self.recovered: list = []  # the clips of dead runs this run finished
        self.discarded: list = []  # dead runs' parts with nothing to finish, removed

    @contextlib.contextmanager
    def _locked(self):
        import fcntl

        fd = _lock_fd(self.dir / "lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _append(self, entry: dict) -> None:
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        try:
            with self._locked():
                fd = os.open(
                    self.dir / RECORD, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666
                )
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
        except OSError as exc:
            why = atomic.describe_os_error(exc, self.dir / RECORD)
            raise OutputError(f"{self.what}: {why}") from None

    def _read(self) -> dict:
        """name -> its latest entry (call with the lock held)."""
        return read_record(self.folder)

    def _rewrite(self, entries: dict) -> None:
        text = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries.values())
        atomic.write_text(self.dir / RECORD, text)

    def _names(self, stem: str, suffix: str, tag: bool = True):
        base = f"{stem}_{self.run}" if tag else stem
        for n in range(1, 1000):
            yield self.folder / f"{base}{'' if n == 1 else f'-{n}'}{suffix}"
        raise OutputError(f"{self.what}: no free name for {stem} in {self.folder}")

    def write_new(self, stem: str, suffix: str, data: bytes, tag: bool = True) -> Path:
        """``data`` written atomically under a name no file has (``STEM_RUN[-N]SUFFIX``; without
        ``tag`` no run ID), created exclusively (nothing is ever overwritten), and recorded."""
        for path in self._names(stem, suffix, tag):
            try:
                atomic.write_new(path, data)
            except FileExistsError:
                continue
            self.done(path)
            return path
        raise AssertionError  # _names raises first

    def new_part(self, stem: str, suffix: str) -> Path:
        """A clip's name (``STEM_RUN[-N]SUFFIX``) with ``NAME.part`` created exclusively and
        recorded as being written by this run; the final name is free. Its final path."""
        for path in self._names(stem, suffix):
            part = path.with_name(path.name + ".part")
            if os.path.lexists(path):
                continue
            try:
                os.close(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666))
            except FileExistsError:
                continue
            except OSError as exc:
                raise OutputError(f"{self.what}: {atomic.describe_os_error(exc, part)}") from None
            self._append({"name": path.name, "run": self.run, "state": "writing"})
            return path
        raise AssertionError  # _names raises first

    def forget(self, path: Path) -> None:
        """``path`` was never finished (its clip abandoned): nothing of it to keep or remove."""
        self._append({"name": path.name, "run": self.run, "state": "gone"})

    def done(self, path: Path) -> None:
        """``path`` is finished: its identity is recorded, the file retention may remove."""
        st = os.lstat(path)
        self._append({"name": path.name, "run": self.run, "id": _identity(st), "t": time.time()})

    def _alive(self, run) -> bool:
        import fcntl

        if run == self.run:
            return True
        if not isinstance(run, str) or not re.fullmatch(r"[0-9a-f]{8}", run):
            return False
        lock = self.dir / f"run-{run}.lock"
        try:
            fd = _lock_fd(lock, create=False)
        except FileNotFoundError:
            return False
        except OSError:
            return True  # cannot tell: leave its files alone
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held (EWOULDBLOCK): its run lives; anything else: cannot tell
            os.close(fd)
            return True
        with contextlib.suppress(OSError):
            lock.unlink()  # its run is gone: its lock file with it
        os.close(fd)
        return False

    def _files(self, entries: dict, recover: bool) -> tuple[list, list, bool]:
        """(finished, being written, changed) of the record: finished as (mtime, size, path) of
        the files that are still what was recorded; being written as the sizes of live runs'
        parts. A dead run's part is finished here when ``recover``."""
        finished, parts, changed = [], [], False
        for name, e in list(entries.items()):
            path = self.folder / name
            if e.get("state") == "gone":
                del entries[name]
                changed = True
                continue
            if e.get("state") == "writing":
                part = path.with_name(name + ".part")
                if self._alive(e.get("run")):
                    with contextlib.suppress(OSError):
                        st = os.lstat(part)
                        if stat.S_ISREG(st.st_mode):
                            parts.append(st.st_size)
                    continue
                if not recover:
                    continue
                changed = True
                done = _finish_part(part, path) or _renamed(part, path)
                if done is None:  # killed before its first whole fragment: edgert's (the
                    del entries[name]  # record says), removed, its rows marked gone
                    if _discard(part):
                        self.discarded.append(str(part))
                        for tell in list(on_deleted):
                            tell([path])
                    continue
                self.recovered.append(str(path))
                entries[name] = {"name": name, "run": e.get("run"), "id": _identity(done)}
                e = entries[name]
            try:
                st = os.lstat(path)
            except OSError:
                del entries[name]
                changed = True
                continue
            if not stat.S_ISREG(st.st_mode) or _identity(st) != e.get("id"):
                del entries[name]  # replaced by something else since: not edgert's any more
                changed = True
                continue
            finished.append((st.st_mtime, st.st_size, path))
        return finished, parts, changed

    def retain(self, max_gb: float | None = None, keep_days: float | None = None) -> list:
        """Delete this folder's files edgert wrote (any run) older than ``keep_days``, then the
        oldest while they and the clips being written take more than ``max_gb``; the newest file
        stays (while nothing is being written). Dead runs' clips are finished first. The paths
        deleted."""
        try:
            with self._locked():
                entries = self._read()
                finished, parts, changed = self._files(entries, recover=True)
                gone = _choose(finished, parts, max_gb, keep_days)
                deleted = []
                for _, _, p in gone:
                    try:
                        p.unlink()
                        deleted.append(p)
                    except FileNotFoundError:
                        pass
                    except OSError:
                        continue  # a read-only file, a folder: never the run's end
                    entries.pop(p.name, None)
                    changed = True
                for tell in list(on_deleted):  # their rows marked in the same step
                    tell(deleted)
                if changed:
                    self._rewrite(entries)
        except OSError as exc:
            raise OutputError(f"{self.what}: {atomic.describe_os_error(exc, self.dir)}") from None
        return deleted

    def close(self) -> None:
        with contextlib.suppress(OSError):
            (self.dir / f"run-{self.run}.lock").unlink()
        with contextlib.suppress(OSError):
            os.close(self._run_fd)


def read_record(folder: Path) -> dict:
    """The record of what edgert wrote into ``folder``: name -> its latest entry (lines a crash
    cut, and names that are not a bare file name, left out)."""
    try:
        fd = os.open(folder / RECORD_DIR / RECORD, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return {}
        text = fh.read(64 << 20).decode("utf-8", "replace")
    entries: dict = {}
    for line in text.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash
        if isinstance(e, dict) and isinstance(e.get("name"), str) and _plain(e["name"]):
            entries[e["name"]] = e
    return entries


def recorded(path: Path, st: os.stat_result) -> bool:
    """Whether ``st`` (of a file opened without following links) is the file the record of
    ``path``'s folder says edgert wrote under that name (``/media`` serves nothing else)."""
    e = read_record(path.parent).get(path.name)
    return e is not None and stat.S_ISREG(st.st_mode) and e.get("id") == _identity(st)


def _choose(finished: list, parts: list, max_gb, keep_days) -> list:
    """The files to delete: older than ``keep_days``, then the oldest over ``max_gb`` (with the
    clips being written counted); the newest finished stays unless a clip is being written."""
    files = sorted(finished, key=lambda f: (f[0], str(f[2])))
    newest = files[-1:] if files and not parts else []
    kept = files[: len(files) - len(newest)]
    gone = []
    if keep_days is not None:
        limit = time.time() - keep_days * 86400
        gone = [f for f in kept if f[0] < limit]
        kept = [f for f in kept if f[0] >= limit]
    if max_gb is not None:
        total = sum(f[1] for f in kept + newest) + sum(parts)
        while kept and total > max_gb * 1e9:
            f = kept.pop(0)
            total -= f[1]
            gone.append(f)
    return gone


def _finish_part(part: Path, path: Path) -> os.stat_result | None:
    """A dead run's ``NAME.part`` as ``NAME``: cut after its last complete MP4 box (what a kill
    mid-write leaves is a fragment cut short), renamed without replacing anything. Its stat, or
    None when there is nothing to finish."""
    try:
        fd = os.open(part, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        end = complete_mp4_length(fd, st.st_size)
        if end == 0:
            return None
        if end < st.st_size:
            os.ftruncate(fd, end)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        atomic.rename_new(part, path)  # never over a file of that name
    except OSError:
        return None
    return os.lstat(path)


def _discard(part: Path) -> bool:
    """A dead run's part that cannot be finished, removed when it is a regular file (never
    through a link); True when it was."""
    try:
        if not stat.S_ISREG(os.lstat(part).st_mode):
            return False
        part.unlink()
    except OSError:
        return False
    return True


def _renamed(part: Path, path: Path) -> os.stat_result | None:
    """The file a run renamed from its part and died before recording (the part gone, the name
    a regular file)."""
    if os.path.lexists(part):
        return None
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode):
            return st
    return None


def complete_mp4_length(fd: int, size: int) -> int:
    """The bytes of the file that are whole top-level MP4 boxes, ending after the last complete
    ``mdat`` (a fragmented MP4: ``ftyp``, ``moov``, then ``moof``/``mdat`` pairs); 0 when none."""
    at, good = 0, 0
    while at + 8 <= size:
        head = os.pread(fd, 16, at)
        length = int.from_bytes(head[:4], "big")
        kind = head[4:8]
        if length == 1 and len(head) >= 16:
            length = int.from_bytes(head[8:16], "big")
        elif length == 0:
            length = size - at
        if length < 8 or at + length > size:
            break
        at += length
        if kind == b"mdat":
            good = at
    return good
