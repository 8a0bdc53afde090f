"""The store's answers on the camera's HTTP port: ``GET /api/events`` (the filters of
:mod:`.query`, a page at a time) and ``GET /api/tracks/ID``; each request reads the store on a
connection of its own (WAL: readers never wait for the writer), only what is committed."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlparse

from edgert.apps.telemetry.http import json_answer

from . import query

KNOWN = ("camera", "label", "zone", "line", "since", "until", "limit", "cursor")


class Routes:
    def __init__(self, path) -> None:  # a Path, or a PostgreSQL server's Target
        self.path = path

    def attach(self, probes) -> None:
        probes.targets[("GET", "/api/events")] = self.events
        probes.targets[("GET", "/api/tracks/")] = self.track

    def _read(self):
        """A connection of this request's own: the SQLite file's, or the server's (read only)."""
        if not isinstance(self.path, Path):
            from .postgres import connect

            return connect(self.path, read_only=True)
        conn = query.open_read(self.path)
        conn.execute("PRAGMA query_only = ON")
        return conn

    @property
    def mark(self) -> str:
        return "?" if isinstance(self.path, Path) else "%s"

    def events(self, target: str, body: bytes = b""):
        parsed = urlparse(target)
        if parsed.path != "/api/events":
            return json_answer(404, {"error": "not found"})
        try:
            given = parse_qs(parsed.query, keep_blank_values=True, strict_parsing=False)
        except ValueError:
            given = {}
        unknown = sorted(set(given) - set(KNOWN))
        twice = sorted(k for k, v in given.items() if len(v) > 1)
        if unknown or twice:
            why = f"unknown filter {unknown[0]!r}" if unknown else f"{twice[0]}= is given twice"
            return json_answer(400, {"error": f"{why} (filters: {', '.join(KNOWN)})"})
        try:
            f = query.Filters.parse({k: v[0] for k, v in given.items()})
        except query.QueryError as exc:
            return json_answer(400, {"error": str(exc)})
        conn = self._read()
        try:
            return json_answer(200, query.events(conn, f, self.mark))
        finally:
            conn.close()

    def track(self, target: str, body: bytes = b""):
        rest = urlparse(target).path[len("/api/tracks/") :]
        if not (rest.isascii() and rest.isdigit() and len(rest) < 19):
            return json_answer(404, {"error": "a track's id is a whole number (/api/tracks/ID)"})
        conn = self._read()
        try:
            found = query.track(conn, int(rest), self.mark)
        finally:
            conn.close()
        if found is None:
            return json_answer(404, {"error": f"no track has id {rest}"})
        return json_answer(200, found)
