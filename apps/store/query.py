"""Reading the store: the page's filters (camera, label, zone, line, since, until), newest
first, a page at a time (``limit`` rows and a ``cursor`` for the next page: the last row's time
and id, so a page never repeats or skips a row while new events come in); one track with its
events. Times are ISO 8601 (``2026-12-06T14:00``, local time unless it says its zone), seconds
since the epoch, or relative to now (``-1h``, ``-30m``, ``-2d``, ``-45s``, ``now``)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from edgert.runtime.errors import EdgertError, OutputError

from . import schema

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
_RELATIVE = re.compile(r"-(\d+(?:\.\d+)?)([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_COLUMNS = (
    "id, kind, time, camera, track, track_id, label, zone, line, config_version, clip, "
    "snapshot, media_gone, data"
)


class QueryError(EdgertError):
    """A filter that is not one (exit code 2: the command line's usage errors)."""

    exit_code = 2


def parse_time(text: str, what: str, now: float | None = None) -> float:
    """Seconds since the epoch of ``text`` (see the module's text); QueryError in one sentence."""
    now = time.time() if now is None else now
    s = text.strip()
    if s == "now":
        return now
    m = _RELATIVE.fullmatch(s)
    if m:
        return now - float(m.group(1)) * _UNIT[m.group(2)]
    try:
        return float(s)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise QueryError(
            f"{what} {text!r} is not a time: give ISO 8601 (2026-12-06T14:00), seconds since "
            "the epoch, or a time before now (-1h, -30m, -2d)"
        ) from None
    return when.timestamp()


@dataclass(frozen=True)
class Filters:
    camera: str | None = None
    label: str | None = None
    zone: str | None = None
    line: str | None = None
    since: float | None = None
    until: float | None = None
    limit: int = DEFAULT_LIMIT
    cursor: tuple | None = None  # (time, id) of the last row of the page before

    @classmethod
    def parse(cls, given: dict, now: float | None = None) -> Filters:
        """Filters from text values (a query string's, the command line's); QueryError in one
        sentence for one that is not."""
        limit = given.get("limit")
        if limit is None:
            n = DEFAULT_LIMIT
        elif not (str(limit).isdigit() and 1 <= int(limit) <= MAX_LIMIT):
            raise QueryError(f"limit {limit!r}: give a whole number from 1 to {MAX_LIMIT}")
        else:
            n = int(limit)
        times = {}
        for key in ("since", "until"):
            if given.get(key) is not None:
                times[key] = parse_time(str(given[key]), key, now)
        if "since" in times and "until" in times and times["since"] > times["until"]:
            raise QueryError("since is after until: no event can be between them")
        texts = {k: given.get(k) or None for k in ("camera", "label", "zone", "line")}
        return cls(**texts, **times, limit=n, cursor=parse_cursor(given.get("cursor")))


def parse_cursor(text) -> tuple | None:
    if not text:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)_(\d+)", str(text))
    if not m:
        raise QueryError(f"cursor {text!r} is not one this store gave (pass next_cursor as is)")
    return float(m.group(1)), int(m.group(2))


def where(f: Filters, clustered: bool = False) -> tuple[str, list]:
    """The WHERE clause of ``f`` and its parameters (``?`` placeholders). ``clustered``: the
    events' ids are their times' (SQLite's store, :class:`~.schema.EventIds`): a time range is
    read as a range of ids (exact by the times), the cursor is the last id."""
    from .schema import ID_SLACK, US

    clauses, params = [], []
    if clustered and f.since is not None:
        clauses.append("id >= ?")
        params.append(int(f.since * US) - 1)
    if clustered and f.until is not None:
        clauses.append("id <= ?")
        params.append(int(f.until * US) + ID_SLACK)
    if clustered and f.cursor is not None:
        clauses.append("id < ?")
        params.append(f.cursor[1])
    for column in ("camera", "label", "zone", "line"):
        value = getattr(f, column)
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if f.since is not None:
        clauses.append("time >= ?")
        params.append(f.since)
    if f.until is not None:
        clauses.append("time <= ?")
        params.append(f.until)
    if f.cursor is not None and not clustered:
        clauses.append("(time < ? OR (time = ? AND id < ?))")
        params += [f.cursor[0], f.cursor[0], f.cursor[1]]
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def events(conn, f: Filters, placeholder: str = "?") -> dict:
    """A page of events: ``{"events": [...], "next_cursor": ...}`` (None on the last page).
    SQLite's (``?``) are in time order by their ids, and a camera, label, zone or line is read
    only in the minutes ``seen`` says have it; a server's by its index of time."""
    clustered = placeholder == "?"
    clause, params = where(f, clustered)
    order = "id DESC" if clustered else "time DESC, id DESC"
    sql = f"SELECT {_columns(placeholder)} FROM events{clause} ORDER BY {order} LIMIT ?"
    spans = _spans(conn, f) if clustered else None
    if spans is None:
        rows = conn.execute(sql.replace("?", placeholder), [*params, f.limit + 1]).fetchall()
    else:  # the minutes with every value asked for, newest first, until the page is full
        rows = []
        ranged = sql.replace(
            " ORDER BY", (" AND" if clause else " WHERE") + " id BETWEEN ? AND ? ORDER BY"
        )
        for lo, hi in spans:
            rows += conn.execute(ranged, [*params, lo, hi, f.limit + 1 - len(rows)]).fetchall()
            if len(rows) > f.limit:
                break
    shown = [event_of(r) for r in rows[: f.limit]]
    more = len(rows) > f.limit and shown
    return {
        "events": shown,
        "next_cursor": f"{shown[-1]['time']!r}_{shown[-1]['id']}" if more else None,
    }


def _spans(conn, f: Filters):
    """Newest first, the id range of each minute that saw every camera, label, zone and line
    ``f`` asks for (``seen``, read backwards as the pages need it); None when it asks for none.
    """
    MINUTE, SEEN, US = schema.MINUTE, schema.SEEN, schema.US  # noqa: N806
    asked = [(what, str(getattr(f, what))) for what in SEEN if getattr(f, what) is not None]
    if not asked:
        return None
    first = (int(f.since * US) - 1) // MINUTE if f.since is not None else -(1 << 62)
    last = (int(f.until * US) + schema.ID_SLACK) // MINUTE if f.until is not None else 1 << 62
    if f.cursor is not None:
        last = min(last, f.cursor[1] // MINUTE)
    return _minutes(conn, asked, first, last, MINUTE)


def _minutes(conn, asked: list, first: int, last: int, size: int):
    (what, value), more = asked[0], asked[1:]
    rows = conn.execute(
        "SELECT minute FROM seen WHERE minute BETWEEN ? AND ? AND what = ? AND value = ? "
        "ORDER BY minute DESC",
        (first, last, what, value),
    )
    for (m,) in rows:
        if all(
            conn.execute(
                "SELECT 1 FROM seen WHERE minute = ? AND what = ? AND value = ?", (m, *other)
            ).fetchone()
            for other in more
        ):
            yield m * size, (m + 1) * size - 1


def _columns(placeholder: str) -> str:
    """The events' columns read: a PostgreSQL server's (``%s``) say which device wrote each."""
    return _COLUMNS if placeholder == "?" else _COLUMNS + ", device"


def event_of(row) -> dict:
    names = [c.strip() for c in _COLUMNS.split(",")] + ["device"]
    out = dict(zip(names, row))
    out["data"] = json.loads(out["data"]) if out["data"] else {}
    out["media_gone"] = bool(out["media_gone"])
    out["time_iso"] = (
        datetime.fromtimestamp(out["time"]).astimezone().isoformat(timespec="milliseconds")
    )
    return out


_TRACK = (
    "id, run, stream, track_id, camera, label, labels, first_seen, last_seen, snapshot, "
    "snapshot_gone, secondary, zones, lines"
)


def track(conn, track_id: int, placeholder: str = "?") -> dict | None:
    """One track with its events (oldest first); None when no track has that id."""
    columns = _TRACK if placeholder == "?" else _TRACK + ", device"  # a server's: which device
    row = conn.execute(
        f"SELECT {columns} FROM tracks WHERE id = ?".replace("?", placeholder), [track_id]
    ).fetchone()
    if row is None:
        return None
    out = dict(zip([c.strip() for c in columns.split(",")], row))
    for key in ("labels", "secondary", "zones", "lines"):
        out[key] = json.loads(out[key]) if out[key] else ([] if key != "secondary" else {})
    out["snapshot_gone"] = bool(out["snapshot_gone"])
    # within the track's first and last seen (no index of tracks): SQLite's by their ids
    f = Filters(since=out["first_seen"], until=out["last_seen"])
    clause, params = where(f, clustered=placeholder == "?")
    clause += " AND track = ?" if clause else " WHERE track = ?"  # a track never seen: all
    sql = f"SELECT {_columns(placeholder)} FROM events{clause} ORDER BY time, id"
    params.append(track_id)
    out["events"] = [event_of(r) for r in conn.execute(sql.replace("?", placeholder), params)]
    out["reid"] = links(conn, track_id, placeholder)
    return out


def links(conn, track_id: int, placeholder: str = "?") -> list:
    """The track's re-identification links, both ways: ``[{"track": ID, "camera": C,
    "similarity": S, "time": T}]`` (the other track's); empty in a store older than them."""
    sql = (
        "SELECT r.other, t.camera, r.similarity, r.time FROM reid r JOIN tracks t ON t.id = "
        "r.other WHERE r.track = ? UNION ALL SELECT r.track, t.camera, r.similarity, r.time "
        "FROM reid r JOIN tracks t ON t.id = r.track WHERE r.other = ? ORDER BY 4"
    )
    try:
        rows = conn.execute(sql.replace("?", placeholder), [track_id, track_id]).fetchall()
    except Exception as exc:  # noqa: BLE001 - a store of version 1 has no reid table
        if "reid" not in str(exc):
            raise
        return []
    return [{"track": a, "camera": c, "similarity": s, "time": t} for a, c, s, t in rows]


def read(store: str, reader):
    """``reader(conn, placeholder)`` on the store ``store`` (a SQLite file or a PostgreSQL
    server's URI, read only);
    QueryError in one sentence when it is not one."""
    import sqlite3

    from .postgres import is_server

    if is_server(store):  # a PostgreSQL server many devices write (postgresql://...)
        from . import postgres

        try:
            return postgres.read(store, reader)
        except OutputError as exc:
            raise QueryError(str(exc)) from None
    path = Path(store)
    if not path.is_file():
        why = "is a folder" if path.is_dir() else "does not exist"
        raise QueryError(f"store {store} {why}; give the file a camera's --store wrote")
    try:
        conn = open_read(path)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                raise QueryError(f"{store} is not a store edgert wrote (it has no events table)")
            if version < schema.VERSION:  # an older edgert's, no camera on it since: brought
                conn.close()  # forward once (its ids in time order), as a camera would
                try:
                    schema.connect(path).close()
                except OutputError as exc:
                    raise QueryError(f"{exc} (an older edgert's store, to bring forward)") from None
                conn = open_read(path)
            return reader(conn, "?")
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise QueryError(f"{store} is not a store edgert can read ({exc})") from None


def open_read(path):
    """A read-only connection to the SQLite store at ``path``. SQLite reads a ``file:`` name as a
    URI, so the path goes in percent-encoded (``Path.as_uri``): a ``#``, ``?`` or ``%`` in a
    folder's name would otherwise cut the name or change the mode."""
    import sqlite3

    return sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True, timeout=5.0)
