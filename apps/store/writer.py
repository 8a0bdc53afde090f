"""The store's one writer: a thread that takes rows (:mod:`.records`) and writes them in batched
transactions, so that a busy scene costs a commit per batch window, not per event.

What a kill costs: a transaction is committed (in the WAL) or not there at all; the events of the
batch window being gathered (at most :data:`BATCH_S`) are not in the store yet. Whatever the API
answered was read from committed rows. ``PRAGMA synchronous = FULL``: a commit is on the disk
before it returns, so a power cut loses nothing committed either; a torn write of the commit in
flight is ignored (SQLite's WAL checksums), the file stays whole.

What it writes (the write budget): the bytes the writer thread itself wrote (``wchar`` of
``/proc/thread-self/io``: the commits and the checkpoints, every byte SQLite handed to the
kernel), reported per hour of the run; a quiet camera writes only its heartbeat
(:data:`HEARTBEAT_S`)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path

from edgert.runtime import json_text
from edgert.runtime.errors import OutputError

from . import schema
from .reconcile import mark_gone, reconcile

log = logging.getLogger(__name__)
# the batch window: rows gathered this long after the first, then one commit. A commit rewrites
# the last leaves of each table and index it touches, however few rows it holds: a busy camera
# (9,000 events an hour) wrote 29 MB an hour at 2 s, 13.2 at 10 s, 5.7 at 60 s with 1 KiB pages
# and three indexes of events; 4.7 at 10 s with 512-byte pages and none (schema version 2: the
# events in time order by their ids; benchmarks/event_store.py)
BATCH_S = 10.0
HEARTBEAT_S = 300.0  # a quiet camera's run row says it lives this often
BATCH_MAX = 2000  # rows in one transaction at most
PAGE_SIZE = 512  # small pages: a commit of a few rows rewrites few bytes (the write budget)
# the WAL copied into the file every this many pages (2 MiB): a page a commit rewrites again and
# again (an index's last leaf) is copied once a checkpoint. The WAL's file is cut back to
# WAL_LIMIT after one
CHECKPOINT_PAGES = 4000
WAL_LIMIT = 4 << 20


class StoreWriter:
    """The writer thread of the store at ``path`` for the run ``run`` (its tag) with the
    cameras ``cameras``; ``keep_days``: rows older than that are deleted (at start and hourly)."""

    mark = "?"  # the driver's placeholder (PostgreSQL's is %s)
    # a replaced embedding's new row id (search reads the rows above the last id it read)
    next_id = "(SELECT max(id) FROM embeddings) + 1"

    def __init__(
        self, path, run: str, cameras: list, keep_days=None, batch_s=BATCH_S, folders=()
    ) -> None:
        self.path, self.run, self.keep_days, self.batch_s = Path(path), run, keep_days, batch_s
        self.conn = self._open()
        self.cond = threading.Condition()
        self.pending: list = []  # rows, and ("gone", path) marks
        self.closed = False
        self.error: str | None = None
        self.events = self.commits = self.pruned = 0
        self.tracks: dict = {}  # (stream, track_id) -> the live track's row, as written
        self.tracks_written = 0
        self.ids = schema.EventIds()
        self.seen: set = set()  # this batch's rows of ``seen`` (schema.seen_keys)
        self.embeddings = 0  # embeddings written (a track's later one replaces its earlier)
        self.io = {"wchar": 0, "write_bytes": 0}
        self.on_commit = None  # told each batch once committed (what may then be acknowledged)
        self.t0 = time.monotonic()
        self.beat = time.time()
        self._begin(cameras, folders)
        self.thread = threading.Thread(target=self._loop, name="store", daemon=True)
        self.thread.start()

    def _open(self):
        return open_store(self.path)

    def _begin(self, cameras: list, folders) -> None:
        """The run's row, the rows past ``keep_days`` deleted, the files reconciled."""
        now = self.beat
        with self._transaction():
            self.conn.execute(
                "INSERT INTO runs (run, started, last_seen, pid, streams) VALUES (?, ?, ?, ?, ?)",
                (self.run, now, now, _pid(), json_text.dumps(cameras)),
            )
        self._prune()
        self.found = reconcile(self.conn, folders)  # rows and files agree, before any batch

    @contextlib.contextmanager
    def _transaction(self):
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def put(self, rows: list) -> None:
        with self.cond:
            if self.error is not None:
                raise OutputError(self.error)
            self.pending.extend(rows)
            self.cond.notify_all()

    def gone(self, paths) -> None:
        """Files retention deleted: their rows say so in the next commit."""
        self.put([("gone", str(p)) for p in paths])

    def _take(self) -> tuple[list, bool]:
        """The next batch: rows gathered for one batch window after the first (all of them at
        the end); (batch, closing)."""
        with self.cond:
            self.cond.wait_for(lambda: self.pending or self.closed, self._idle_s())
            if self.pending and not self.closed:
                end = time.monotonic() + self.batch_s
                while not self.closed and time.monotonic() < end:
                    self.cond.wait(end - time.monotonic())
            batch, self.pending = self.pending[:BATCH_MAX], self.pending[BATCH_MAX:]
            return batch, self.closed and not self.pending

    def _idle_s(self) -> float:
        """How long the thread waits for a row before it writes the heartbeat."""
        return HEARTBEAT_S

    def _deliver(self, batch: list) -> None:
        """The batch written (one transaction), then told to :attr:`on_commit`."""
        self._write(batch)
        if self.on_commit is not None:
            self.on_commit(batch)

    def _loop(self) -> None:
        last_prune = time.monotonic()
        io0 = _thread_io()
        while True:
            batch, closing = self._take()
            try:
                self._deliver(batch)
                if time.monotonic() - last_prune > 3600:
                    last_prune = time.monotonic()
                    self._prune()
            except Exception as exc:  # a full disk, a read-only file: said, the run decides
                with self.cond:
                    self.error = f"store {self.shown}: cannot write: {exc}"
                log.warning("%s", self.error)
                return
            finally:
                io = _thread_io()
                self.io = {k: io.get(k, 0) - io0.get(k, 0) for k in self.io}
            if closing:
                self._checkpoint()
                io = _thread_io()
                self.io = {k: io.get(k, 0) - io0.get(k, 0) for k in self.io}
                return

    def _write(self, batch: list) -> None:
        """One transaction: the batch's tracks and events, the marks of deleted files, and the
        run's heartbeat."""
        now = time.time()
        with self._transaction():
            touched: dict = {}
            for row in batch:
                if isinstance(row, tuple):
                    continue  # after the rows: a row of this batch may name the file
                track = self._track(row, touched) if row["track_id"] is not None else None
                self._insert_event(row, track)
                self.events += 1
                if track is not None and (row.get("embedding") or row.get("reid")):
                    self._extra(row, track)
            for key, t in touched.items():
                self._save_track(t)
                if t["ended"]:
                    self.tracks.pop(key, None)
            if self.seen:  # a minute's value already there is no write (OR IGNORE)
                self.conn.executemany("INSERT OR IGNORE INTO seen VALUES (?, ?, ?)", self.seen)
                self.seen = set()
            for row in batch:
                if isinstance(row, tuple):
                    self._mark_gone(row[1])
            if now - self.beat >= HEARTBEAT_S or not batch:  # the run lives: said this often
                self.beat = now
                self._heartbeat(now)
        self.commits += 1

    def _heartbeat(self, now: float) -> None:
        self.conn.execute("UPDATE runs SET last_seen = ? WHERE run = ?", (now, self.run))

    def _mark_gone(self, path: str) -> None:
        mark_gone(self.conn, path)

    def _insert_event(self, row: dict, track) -> None:
        """The event, its id its time's (:class:`~.schema.EventIds`; one a run before took
        is found by the INSERT, and the next one tried)."""
        import sqlite3

        values = event_values(row, track)
        while True:
            try:
                event_id = self.ids.next(row["time"])
                self.conn.execute(
                    "INSERT INTO events (id, kind, time, camera, track, track_id, label, zone, "
                    "line, config_version, clip, snapshot, data) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (event_id, *values),
                )
                self.seen.update(schema.seen_keys(event_id, row))
                return
            except sqlite3.IntegrityError as exc:
                if "events.id" not in str(exc):
                    raise

    def _track(self, row: dict, touched: dict) -> int:
        """The track row's id for ``row``'s track, its state updated by the event."""
        key = (row.get("run", self.run), row["stream"], row["track_id"])
        t = self.tracks.get(key)
        if t is None:
            t = self.tracks[key] = new_track(row)
            t["id"] = self._insert_track(row)
            self.tracks_written += 1
        update_track(t, row)
        touched[key] = t
        return t["id"]

    def _insert_track(self, row: dict) -> int:
        return self.conn.execute(
            "INSERT INTO tracks (run, stream, track_id, camera, first_seen, last_seen) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (self.run, row["stream"], row["track_id"], row["camera"], row["time"], row["time"]),
        ).lastrowid

    def _extra(self, row: dict, track: int) -> None:
        """A track's embedding (one per track and model: the latest replaces the one before)
        or its re-identification link to another stream's track (found by the run's tag)."""
        e = row.get("embedding")
        if e:
            self.conn.execute(  # SQLite's and PostgreSQL's upsert alike
                (
                    "INSERT INTO embeddings (track, model, dim, form, vector, how, crops, time) "
                    "VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (track, model) DO UPDATE SET "
                    f"id = {self.next_id}, "  # a new id: an index that read the old one reads it
                    "dim = excluded.dim, form = excluded.form, vector = excluded.vector, "
                    "how = excluded.how, crops = excluded.crops, time = excluded.time"
                ).replace("?", self.mark),
                (
                    track,
                    e["model"],
                    e["dim"],
                    e["form"],
                    e["vector"],
                    e["how"],
                    e["crops"],
                    row["time"],
                ),
            )
            self.embeddings += 1
        link = row.get("reid")
        if link:
            live = self.tracks.get((link["stream"], link["track_id"]))
            other = live["id"] if live is not None else None
            if other is None:
                found = self.conn.execute(
                    "SELECT id FROM tracks WHERE run = ? AND stream = ? AND track_id = ?".replace(
                        "?", self.mark
                    ),
                    (self.run, link["stream"], link["track_id"]),
                ).fetchone()
                other = found[0] if found else None
            if other is not None and other != track:
                self.conn.execute(
                    (
                        "INSERT INTO reid (track, other, similarity, time) VALUES (?,?,?,?) "
                        "ON CONFLICT (track, other) DO UPDATE SET similarity = excluded.similarity,"
                        " time = excluded.time"
                    ).replace("?", self.mark),
                    (track, other, link["similarity"], row["time"]),
                )

    def _save_track(self, t: dict) -> None:
        self.conn.execute(
            "UPDATE tracks SET label = ?, labels = ?, first_seen = ?, last_seen = ?, snapshot = ?, "
            "secondary = ?, zones = ?, lines = ? WHERE id = ?",
            track_values(t),
        )

    def _checkpoint(self) -> None:
        """At the end: the WAL copied into the file and emptied (on this thread: its bytes
        count in the write budget)."""
        try:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except Exception as exc:  # a reader holds it: the next start's checkpoint does it
            log.debug("store %s: no checkpoint at the end (%s)", self.path, exc)

    def _prune(self) -> None:
        """``keep_days``: the events older than that deleted, and the tracks last seen then."""
        if self.keep_days is None:
            return
        limit = time.time() - self.keep_days * 86400
        with self._transaction():
            gone = self.conn.execute(  # by the id: in time order (schema.EventIds)
                "DELETE FROM events WHERE id < ?", (int(limit * schema.US),)
            ).rowcount
            self.conn.execute(
                "DELETE FROM seen WHERE minute < ?", (int(limit * schema.US) // schema.MINUTE,)
            )
            self.conn.execute("DELETE FROM tracks WHERE last_seen < ?", (limit,))
        self.pruned += gone

    @property
    def shown(self) -> str:
        """The store as printed (a server's without its password)."""
        return str(self.path)

    def per_hour(self) -> float:
        """Bytes the writer wrote per hour of the run so far."""
        return self.io["wchar"] * 3600.0 / max(time.monotonic() - self.t0, 1e-3)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.thread.join()
        with contextlib.suppress(Exception):
            self.conn.close()
        if self.error is not None:
            raise OutputError(self.error)


def open_store(path: Path):
    """The store at ``path`` for writing: made with small pages when new, its tables current."""
    import sqlite3

    new = not path.exists() or path.stat().st_size == 0
    if new:  # the page size is chosen before the first table (and before WAL) or never
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(path))
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            conn.execute("VACUUM")
            conn.close()
        except (OSError, sqlite3.Error) as exc:
            raise OutputError(f"store {path}: cannot make it: {exc}") from None
    conn = schema.connect(path)
    conn.execute(f"PRAGMA wal_autocheckpoint = {CHECKPOINT_PAGES}")
    conn.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT}")
    return conn


def event_values(row: dict, track) -> tuple:
    """An event row's column values, in the order the INSERTs name them."""
    return (
        row["kind"],
        row["time"],
        row["camera"],
        track,
        row["track_id"],
        row["label"],
        row["zone"],
        row["line"],
        row["config_version"],
        row["clip"],
        row["snapshot"],
        json_text.dumps(row["data"], default=str),
    )


def track_values(t: dict) -> tuple:
    """A track's changing values, then its id, in the order the UPDATEs name them."""
    return (
        t["label"],
        json_text.dumps(t["labels"]),
        t["first_seen"],
        t["last_seen"],
        t["snapshot"],
        json_text.dumps(t["secondary"]) if t["secondary"] else None,
        json_text.dumps(t["zones"]),
        json_text.dumps(t["lines"]),
        t["id"],
    )


def new_track(row: dict) -> dict:
    return {
        "id": None,
        "label": None,
        "labels": [],
        "first_seen": row["time"],
        "last_seen": row["time"],
        "snapshot": None,
        "secondary": {},
        "zones": [],
        "lines": [],
        "ended": False,
    }


def update_track(t: dict, row: dict) -> None:
    """A track's row after one of its events: its labels, times, snapshot, second-stage labels,
    zones visited and lines crossed."""
    t["first_seen"] = min(t["first_seen"], row["time"])
    t["last_seen"] = max(t["last_seen"], row["time"])
    if row["label"] is not None and row["kind"] != "track_label":  # a second stage's: secondary
        t["label"] = t["label"] or row["label"]
        if row["label"] not in t["labels"]:
            t["labels"].append(row["label"])
    if row["snapshot"]:
        t["snapshot"] = row["snapshot"]
    if row["secondary"]:
        t["secondary"].update(row["secondary"])
    if row["zone"] and row["kind"] == "zone_enter" and row["zone"] not in t["zones"]:
        t["zones"].append(row["zone"])
    if row["line"] and row["line"] not in t["lines"]:
        t["lines"].append(row["line"])
    t["ended"] = t["ended"] or row["kind"] == "track_end"


def _pid() -> int:
    import os

    return os.getpid()


def _thread_io() -> dict:
    """This thread's I/O counters (``/proc/thread-self/io``); empty where there are none."""
    out = {}
    with contextlib.suppress(OSError), open("/proc/thread-self/io") as fh:
        for line in fh:
            k, _, v = line.partition(":")
            out[k.strip()] = int(v)
    return out
