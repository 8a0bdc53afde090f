"""The store's tables, versioned by ``PRAGMA user_version``: :data:`MIGRATIONS` holds each
version's statements, and :func:`migrate` applies those after the file's version in one
transaction (a store an older edgert made is brought forward; one a newer edgert made is refused
in one sentence)."""

from __future__ import annotations

import sqlite3

from edgert.runtime.errors import OutputError

# version N is MIGRATIONS[N - 1]; a change to the tables is a new entry, never an edit
MIGRATIONS: tuple = (
    (
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            run TEXT NOT NULL UNIQUE,
            started REAL NOT NULL,
            last_seen REAL NOT NULL,
            pid INTEGER,
            streams TEXT
        )""",
        """CREATE TABLE tracks (
            id INTEGER PRIMARY KEY,
            run TEXT NOT NULL,
            stream INTEGER NOT NULL,
            track_id INTEGER NOT NULL,
            camera TEXT,
            label TEXT,
            labels TEXT,
            first_seen REAL,
            last_seen REAL,
            snapshot TEXT,
            snapshot_gone INTEGER NOT NULL DEFAULT 0,
            secondary TEXT,
            zones TEXT,
            lines TEXT,
            UNIQUE (run, stream, track_id)
        )""",
        """CREATE TABLE events (
            id INTEGER PRIMARY KEY,
            kind TEXT NOT NULL,
            time REAL NOT NULL,
            camera TEXT,
            track INTEGER REFERENCES tracks (id),
            track_id INTEGER,
            label TEXT,
            zone TEXT,
            line TEXT,
            config_version TEXT,
            clip TEXT,
            snapshot TEXT,
            media_gone INTEGER NOT NULL DEFAULT 0,
            data TEXT
        )""",
        "CREATE INDEX events_time ON events (time)",
        "CREATE INDEX events_label_time ON events (label, time)",
        "CREATE INDEX events_track ON events (track)",
    ),
    (  # 2: one embedding per track and model (search), and the links of re-identification
        """CREATE TABLE embeddings (
            id INTEGER PRIMARY KEY,
            track INTEGER NOT NULL REFERENCES tracks (id) ON DELETE CASCADE,
            model TEXT NOT NULL,
            dim INTEGER NOT NULL,
            form TEXT NOT NULL,
            vector BLOB NOT NULL,
            how TEXT,
            crops INTEGER,
            time REAL NOT NULL,
            UNIQUE (track, model)
        )""",
        """CREATE TABLE reid (
            id INTEGER PRIMARY KEY,
            track INTEGER NOT NULL REFERENCES tracks (id) ON DELETE CASCADE,
            other INTEGER NOT NULL REFERENCES tracks (id) ON DELETE CASCADE,
            similarity REAL NOT NULL,
            time REAL NOT NULL,
            UNIQUE (track, other)
        )""",
        "CREATE INDEX reid_other ON reid (other)",
    ),
)
VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection, path) -> int:
    """The tables brought to :data:`VERSION`; the version the file had. OutputError when a
    newer edgert made it."""
    have = conn.execute("PRAGMA user_version").fetchone()[0]
    if have > VERSION:
        raise OutputError(
            f"store {path}: its tables are version {have}, newer than this edgert's {VERSION}; "
            "use the edgert that made it, or another store"
        )
    if have == VERSION:
        return have
    conn.execute("BEGIN IMMEDIATE")  # one transaction: a kill mid-way leaves the old version
    try:
        for statements in MIGRATIONS[have:]:
            for sql in statements:
                conn.execute(sql)
        conn.execute(f"PRAGMA user_version = {VERSION}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return have


def connect(path, what: str = "store") -> sqlite3.Connection:
    """The store at ``path`` opened (made if missing) in WAL mode, its tables current, in
    autocommit mode (the writer begins and commits its own transactions). OutputError in one
    sentence when it cannot be (not a database, a folder, no permission)."""
    try:
        conn = sqlite3.connect(
            str(path), timeout=10.0, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL: a commit is in the WAL on the disk before it returns (a power cut loses nothing
        # committed; NORMAL would lose the commits since the last checkpoint: 5,278 of 6,954 in
        # benchmarks/store_kill.py's WAL cuts anywhere). The same bytes: one fsync a batch window
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        migrate(conn, path)
    except sqlite3.DatabaseError as exc:
        raise OutputError(f"{what} {path}: not a store edgert can use ({exc})") from None
    return conn
