"""The store's answers on the camera's HTTP port: ``GET /api/events`` (the filters of
:mod:`.query`, a page at a time), ``GET /api/tracks/ID``, ``GET /api/search?similar_to=TRACK``,
``GET /api/search?text=WORDS`` (:mod:`.text`: the embedder's text tower) and
``POST /api/search`` with a JPEG or PNG picture as the body (:mod:`.search`; the body's bound
is the port's, 64 KiB), ``GET /api/counts`` (tracks per zone, and the people they are
once re-identified across cameras), and the files rows name,
``GET /api/media/events/ID/snapshot|clip`` and ``GET /api/media/tracks/ID/snapshot`` (the
track's best snapshot). Each request reads the store on a connection of its own (WAL: readers
never wait for the writer), only what is committed.

A file is served only when a row names it, the row does not say retention deleted it, and the
web viewer finds it to be a regular file (opened without following a link) that its folder's
record says edgert wrote (:func:`~edgert.apps.camera.sinks.retention.recorded`): a snapshots or
clips folder of edgert's; nothing else of the disk, whatever a row says."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from edgert.apps.telemetry.http import json_answer

from . import query, search, text

KNOWN = ("camera", "label", "zone", "line", "since", "until", "limit", "cursor")
# the /api routes the page may use beside these: said in /api/events' "features"
OPTIONAL = (("search", "/api/search"),)
_MEDIA = re.compile(r"/api/media/(events|tracks)/(\d{1,18})/(snapshot|clip)")
_MEDIA_SQL = {
    ("events", "snapshot"): "SELECT snapshot, media_gone FROM events WHERE id = ?",
    ("events", "clip"): "SELECT clip, media_gone FROM events WHERE id = ?",
    ("tracks", "snapshot"): "SELECT snapshot, snapshot_gone FROM tracks WHERE id = ?",
}


class Routes:
    def __init__(self, path) -> None:  # a Path, or a PostgreSQL server's Target
        self.path = path
        self.index = search.Index()  # the vectors, read once and then what was added
        self.probes = None

    def attach(self, probes) -> None:
        self.probes = probes
        probes.targets[("GET", "/api/events")] = self.events
        probes.targets[("GET", "/api/tracks/")] = self.track
        probes.files["/api/media/"] = self.media
        probes.targets[("GET", "/api/search")] = self.search
        probes.targets[("POST", "/api/search")] = self.search
        probes.targets[("GET", "/api/counts")] = self.counts

    def _read(self):
        """A connection of this request's own: the SQLite file's, or the server's (read only)."""
        if not isinstance(self.path, Path):
            from .postgres import connect

            return connect(self.path, read_only=True)
        conn = query.open_read(self.path)
        conn.execute("PRAGMA query_only = ON")
        return conn

    def features(self, conn) -> list:
        """The optional routes the camera's server has and can answer now (the page shows what
        they do): search when the camera runs an embedder or the store holds vectors, text
        when an embedder it runs has a text tower."""
        targets = self.probes.targets if self.probes is not None else {}
        found = [
            name
            for name, path in OPTIONAL
            if ("GET", path) in targets and (name != "search" or self._searchable(conn))
        ]
        towers = getattr(self.probes, "text_embedders", None) or {}
        if "search" in found and any(e.has_text for e in towers.values()):
            found.append("text")  # an embedder with a text tower: GET /api/search?text=
        return found

    def _searchable(self, conn) -> bool:
        if getattr(self.probes, "embedders", None):
            return True
        if not isinstance(self.path, Path):  # a server's: the table may be an older edgert's
            (found,) = conn.execute("SELECT to_regclass('embeddings')").fetchone()
            if found is None:
                return False
        try:
            return conn.execute("SELECT 1 FROM embeddings LIMIT 1").fetchone() is not None
        except sqlite3.OperationalError:  # a store older than the embeddings
            return False

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
            return json_answer(
                200, {**query.events(conn, f, self.mark), "features": self.features(conn)}
            )
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

    def media(self, target: str):
        """The file ``/api/media/events/ID/snapshot|clip`` or ``/api/media/tracks/ID/snapshot``
        names (a Path, checked by the web viewer before it is sent), or (status, body, type)."""
        m = _MEDIA.fullmatch(urlparse(target).path)
        sql = _MEDIA_SQL.get((m.group(1), m.group(3))) if m else None
        if sql is None:
            return (
                404,
                b"not a file of the store (/api/media/events/ID/snapshot|clip)\n",
                "text/plain",
            )
        conn = self._read()
        try:
            row = conn.execute(sql.replace("?", self.mark), (int(m.group(2)),)).fetchone()
        finally:
            conn.close()
        if row is None or not row[0]:
            return 404, f"no {m.group(3)} for {m.group(1)} {m.group(2)}\n".encode(), "text/plain"
        if row[1]:
            return 404, b"deleted by retention\n", "text/plain"
        return Path(row[0])

    def search(self, target: str, body: bytes = b""):
        """``similar_to=TRACK`` (GET), or the picture of the body (POST) through the camera's
        embedder, under the history's filters."""
        parsed = urlparse(target)
        if parsed.path != "/api/search":
            return json_answer(404, {"error": "not found"})
        given, why = _given(parsed.query)
        if why:
            return json_answer(400, {"error": why})
        if "text" in given:
            return self.search_text(given, body)

        def find():
            f, own = search.parse(given)
            vector = None
            if body:
                if own.get("similar_to") is not None:
                    raise query.QueryError("give similar_to= or a picture, not both")
                own["model"], vector = self._embed(body, own.get("model"))
            elif own.get("similar_to") is None:
                raise query.QueryError(
                    "give similar_to=TRACK, or POST a JPEG or PNG picture (at most 64 KiB)"
                )
            conn = self._read()
            try:
                return search.search(
                    conn, self.index, f, vector, own.get("similar_to"), own["model"], self.mark
                )
            finally:
                conn.close()

        return _searched(find, query.QueryError)

    def search_text(self, given: dict, body: bytes = b""):
        """``text=...``: the tracks ranked by the cosine of their vectors to the text's, made
        by the text tower of the camera's embedder (:mod:`.text`)."""
        from edgert.runtime.errors import EdgertError

        def find():
            if body:
                raise query.QueryError("give text= or a picture, not both")
            f, model, words = text.parse_text(given)
            embedders = getattr(self.probes, "text_embedders", None) or {}
            model, embedder = text.chosen(embedders, model)
            vector = embedder.embed_text(words)
            conn = self._read()
            try:
                return text.text_search(conn, self.index, f, vector, model, self.mark)
            finally:
                conn.close()

        return _searched(find, (query.QueryError, EdgertError))

    def _embed(self, body: bytes, model):
        """(model, unit vector) of the uploaded picture; QueryError in one sentence."""
        embedders = getattr(self.probes, "embedders", None) or {}
        if not embedders:
            raise search.NoEmbeddings(
                "this camera runs no embedder: searching by picture needs --secondary "
                "EMBEDDER.edgert"
            )
        if model is not None and model not in embedders:
            raise query.QueryError(f"model {model!r} is not an embedder of this camera")
        if not (body[:3] == b"\xff\xd8\xff" or body[:8] == b"\x89PNG\r\n\x1a\n"):
            raise query.QueryError("the body is not a JPEG or PNG picture")
        import cv2
        import numpy as np

        image = cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR)
        if image is None or min(image.shape[:2]) < 2:
            raise query.QueryError("the body is not a picture OpenCV can decode")
        name = model or next(iter(embedders))
        return name, embedders[name](image)

    def counts(self, target: str, body: bytes = b""):
        parsed = urlparse(target)
        if parsed.path != "/api/counts":
            return json_answer(404, {"error": "not found"})
        given, why = _given(parsed.query)
        if not why:
            extra = sorted(set(given) - {"camera", "label", "since", "until"})
            why = (
                f"unknown filter {extra[0]!r} (filters: camera, label, since, until)"
                if extra
                else ""
            )
        if why:
            return json_answer(400, {"error": why})
        try:
            f = query.Filters.parse(given)
        except query.QueryError as exc:
            return json_answer(400, {"error": str(exc)})
        conn = self._read()
        try:
            return json_answer(200, search.counts(conn, f, self.mark))
        finally:
            conn.close()


def _searched(find, refused):
    """``find()``'s answer: 200; 404 when there is nothing to search (no embeddings, or a store of
    version 1 without their table), 400 for ``refused`` (the query's own sentence)."""
    try:
        return json_answer(200, find())
    except search.NoEmbeddings as exc:
        return json_answer(404, {"error": str(exc)})
    except refused as exc:
        return json_answer(400, {"error": str(exc)})
    except Exception as exc:  # noqa: BLE001 - a store of version 1 (SQLite's, a server's)
        if "embeddings" not in str(exc):
            raise
        return json_answer(404, {"error": "the store holds no embeddings"})


def _given(text: str) -> tuple[dict, str]:
    """A query string's values (one each), or the sentence why not."""
    try:
        given = parse_qs(text, keep_blank_values=True, strict_parsing=False)
    except ValueError:
        given = {}
    twice = sorted(k for k, v in given.items() if len(v) > 1)
    if twice:
        return {}, f"{twice[0]}= is given twice"
    return {k: v[0] for k, v in given.items()}, ""
