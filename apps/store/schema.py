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
    (  # 2: the write budget (schema.cluster_by_time)
        "DROP INDEX events_time",
        "DROP INDEX events_label_time",
        "DROP INDEX events_track",
        "cluster_by_time",
        # what each minute saw: the page's filters read only the minutes that have their value
        """CREATE TABLE seen (
            minute INTEGER NOT NULL,
            what TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (minute, what, value)
        ) WITHOUT ROWID""",
        *(
            f"INSERT OR IGNORE INTO seen SELECT id / {60 * 1_000_000}, '{c}', {c} FROM events "
            f"WHERE {c} IS NOT NULL"
            for c in ("camera", "label", "zone", "line")
        ),
    ),
    (  # 3: one embedding per track and model (search), and the links of re-identification
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
# versions that change only the SQLite file's layout (its indexes, the ids in time order, the
# minutes seen): a server keeps its own indexes and skips them
LAYOUT_ONLY = frozenset({2})
SEEN = ("camera", "label", "zone", "line")  # the filters :func:`seen_keys` records
MINUTE = 60 * 1_000_000  # ids per minute of ``seen``


def seen_keys(event_id: int, row: dict) -> list:
    """The ``seen`` rows of one event: (its id's minute, filter, value) per filter it has."""
    minute = event_id // MINUTE
    return [(minute, what, str(row[what])) for what in SEEN if row.get(what) is not None]


US = 1_000_000  # an event's id: its time in microseconds (the next free one: EventIds)
# an id may be this far past its time's (events of one microsecond): the range a filter reads
ID_SLACK = US


class EventIds:
    """The ids of events: each its time in microseconds, the next free one when an event of
    that microsecond has it. The events table is then in time order by its own key (SQLite's
    rowid): no index of time to rewrite, newest first and a time range read straight from the
    table. ``taken``: the ids given lately (older ones are found taken by the INSERT)."""

    def __init__(self) -> None:
        self.taken: set = set()

    def next(self, t: float) -> int:
        t = min(max(t, 0.0), 9e12) if t == t else 0.0  # a time that is none: an id still
        i = int(round(t * US))
        while i in self.taken:
            i += 1
        self.taken.add(i)
        if len(self.taken) > 20000:  # the newest half kept
            self.taken = set(sorted(self.taken)[10000:])
        return i


_EVENTS = MIGRATIONS[0][2]  # the events table's statement


def cluster_by_time(conn: sqlite3.Connection) -> None:
    """Version 2, the write budget: an index's append rewrites 3-5 of its 512-byte pages a
    commit (SQLite balances an index's last leaf with its siblings; a table's last leaf is
    appended to alone): the time index rewrote 5 a commit, the label index's four labels 10,
    the track index 4. The events are kept in time order by their id (:class:`EventIds`)
    instead, renumbered here; a label, zone or line is found newest first from the table (a
    label of 1 event in 6: 300 rows for a page of 50), a track's events within its first and
    last seen."""
    conn.execute(_EVENTS.replace("CREATE TABLE events", "CREATE TABLE events_by_time", 1))
    ids = EventIds()
    pairs = [
        (ids.next(t), i) for i, t in conn.execute("SELECT id, time FROM events ORDER BY time, id")
    ]
    conn.executemany(
        "INSERT INTO events_by_time SELECT ?, kind, time, camera, track, track_id, label, zone, "
        "line, config_version, clip, snapshot, media_gone, data FROM events WHERE id = ?",
        pairs,
    )
    conn.execute("DROP TABLE events")
    conn.execute("ALTER TABLE events_by_time RENAME TO events")


_STEPS = {"cluster_by_time": cluster_by_time}  # a migration's step that is Python, by name


def _version(conn: sqlite3.Connection, path) -> int:
    have = conn.execute("PRAGMA user_version").fetchone()[0]
    if have > VERSION:
        raise OutputError(
            f"store {path}: its tables are version {have}, newer than this edgert's {VERSION}; "
            "use the edgert that made it, or another store"
        )
    return have


def migrate(conn: sqlite3.Connection, path) -> int:
    """The tables brought to :data:`VERSION`; the version the file had. OutputError when a
    newer edgert made it."""
    have = _version(conn, path)
    if have == VERSION:
        return have
    conn.execute("BEGIN IMMEDIATE")  # one transaction: a kill mid-way leaves the old version
    try:
        # read again under the lock: another run opening the same new store may have made the
        # tables between the first read and the lock (two cameras sharing a folder, started at once)
        have = _version(conn, path)
        if have == VERSION:
            conn.execute("ROLLBACK")
            return have
        for statements in MIGRATIONS[have:]:
            for sql in statements:
                _STEPS[sql](conn) if sql in _STEPS else conn.execute(sql)
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
