"""``--store PATH`` (or ``--output store://PATH``): the camera's tracks and events kept in a
SQLite store (:mod:`.writer`), and read back on the camera's HTTP port (the web viewer's, or
``--metrics``'; the same binding rules) as ``GET /api/events?camera=&label=&zone=&line=&since=
&until=&limit=&cursor=`` and ``GET /api/tracks/ID``.

Where it is: ``--store PATH``; without it, beside the clips (``DIR/.edgert/events.db`` of
``--clips DIR``, else of ``--snapshots DIR``): a run that keeps clips has a history of what they
show, and nothing else is written where the user did not ask. ``--store none``: no store.
Options: ``store://PATH?keep_days=D`` (rows older than D days deleted; ``--keep-days`` sets it
too) and ``batch_s=S`` (the batch window, :data:`~.writer.BATCH_S` by default)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from edgert.apps.camera.sinks import retention
from edgert.apps.camera.sinks.base import Sink, SinkContext, folder_and_query, written
from edgert.runtime.errors import OutputError

from .writer import BATCH_S

OPTIONS = ("keep_days", "batch_s")
DEFAULT_NAME = "events.db"


class StoreOptions:
    """The store's flag (its value becomes a sink of the table: :func:`with_store`)."""

    @staticmethod
    def add_arguments(parser) -> None:
        parser.add_argument(
            "--store",
            metavar="PATH",
            help="keep the tracks and events in a SQLite store at PATH, read by `edgert events "
            "query` and GET /api/events, /api/tracks/ID on the camera's HTTP port (default: "
            "DIR/.edgert/events.db of --clips DIR or --snapshots DIR; none: no store); "
            "?keep_days=D&batch_s=S; implies --track",
        )


def with_store(sinks: list, value: str | None) -> list:
    """The sinks with the store's: ``value`` (a path or ``store://`` URI), or beside the clips
    (or snapshots) when not given; ``none``: without one."""

    def resolve(uri: str) -> tuple:  # the table's own (apps.camera.sinks.resolve), for schemes
        return (uri.partition("://")[0].lower(), uri)

    if value is not None and value.strip().lower() == "none":
        return [s for s in sinks if resolve(s)[0] != "store"]
    if any(resolve(s)[0] == "store" for s in sinks):
        if value is not None:
            raise OutputError("--store is given twice (--store and --output store://); give one")
        return sinks
    if value is not None:
        if not value.strip():
            raise OutputError("--store needs a file name, and it was given an empty one")
        if server(f"store://{value}"):
            return [*sinks, f"store://{value}"]
        return [*sinks, value if "://" in value else f"store://{value}"]
    for scheme in ("clips", "snapshots"):
        folder = next((s for s in sinks if resolve(s)[0] == scheme), None)
        if folder is not None:
            where = folder.split("://", 1)[1].partition("?")[0]  # its sink checks the rest
            return [*sinks, f"store://{Path(where) / retention.RECORD_DIR / DEFAULT_NAME}"]
    return sinks


def server(uri: str) -> str | None:
    """The PostgreSQL URI of ``store://postgresql://...``, or None (a SQLite file)."""
    from .postgres import is_server

    rest = uri.split("://", 1)[1] if "://" in uri else uri
    return rest if is_server(rest) else None


def parse(uri: str) -> tuple[Path, dict]:
    """(path, options) of ``store://PATH?keep_days=D&batch_s=S``; OutputError in one sentence."""
    path, q = folder_and_query(uri, "--store", OPTIONS)
    options = {}
    for key in OPTIONS:
        if key in q:
            try:
                options[key] = float(q[key])
            except ValueError:
                options[key] = -1.0
            if not 0 < options[key] < float("inf"):
                unit = "seconds" if key == "batch_s" else "days"
                raise OutputError(f"--store: {key}= is a number of {unit} above 0, not {q[key]!r}")
    return Path(path), options


def check(uri: str, options) -> None:
    if server(uri):
        from . import postgres

        postgres.parse(server(uri))
        postgres.require()
        return
    path, _ = parse(uri)
    if path.is_dir():
        raise OutputError(
            f"--store {path} is a folder; give the store's file (e.g. {path / DEFAULT_NAME})"
        )


def paths(uri: str, streams: int, mosaic: bool) -> list:
    if server(uri):
        return []  # the server's, and the spool (its own lock)
    return [(f"--store {uri}", parse(uri)[0])]


class StoreOutput(Sink):
    takes_frames = False
    draws = False
    takes_events = True

    def __init__(self, path, options: dict, ctx: SinkContext) -> None:
        from .writer import StoreWriter

        self.path = path  # a Path, or a PostgreSQL server's Target
        cameras = [
            s.get("uri") or f"stream {s.get('stream', i)}" for i, s in enumerate(ctx.streams)
        ]
        self.cameras = cameras
        self.followers: list = []  # the sinks that publish an event once it is committed
        self.finished = False
        keep, batch_s = options.get("keep_days"), options.get("batch_s", BATCH_S)
        if isinstance(path, Path):
            beside = [path.parent.parent] if path.parent.name == retention.RECORD_DIR else []
            self.writer = StoreWriter(path, retention.run_id(), cameras, keep, batch_s, beside)
        else:
            from .postgres import PgWriter

            self.writer = PgWriter(path, retention.run_id(), cameras, keep, batch_s)
        self.writer.on_commit = self._committed
        self.shown = self.writer.shown
        self.found = self.writer.found
        retention.on_deleted.append(self.writer.gone)
        self.probes = ctx.probes
        if self.probes is not None:
            from .routes import Routes

            Routes(path).attach(self.probes)
        found = self.found
        if found["rows_of_missing_files"] or found["unknown_files"]:
            ctx.say(
                f"store {self.shown}: {found['rows_of_missing_files']} row(s) name files no longer "
                f"there (marked gone); {found['unknown_files']} file(s) edgert wrote are in no row"
            )

    def events(self, events: list) -> None:
        from .records import row_of

        rows = [row_of(e, self.cameras) for e in events]
        for row, event in zip(rows, events):
            row["source"] = event  # told to the followers once committed
        self.writer.put(rows)

    def hold_back(self, sinks: list) -> list:
        """``sinks`` with MQTT's held back: it publishes an event only once the store committed
        it (every event published is in the store)."""
        from .follow import AfterCommit, follows

        out = []
        for s in sinks:
            if follows(s):
                s = AfterCommit(s, self)
                self.followers.append(s)
            out.append(s)
        return out

    def _committed(self, batch: list) -> None:
        """The writer thread, after a commit: its events to the followers."""
        events = [r["source"] for r in batch if isinstance(r, dict) and "source" in r]
        if events:
            for f in self.followers:
                f.deliver(events)

    def finish(self) -> None:
        """The writer closed once (its last batch committed and told); its error kept."""
        if self.finished:
            return
        self.finished = True
        if self.writer.gone in retention.on_deleted:
            retention.on_deleted.remove(self.writer.gone)
        try:
            self.writer.close()
        except OutputError as exc:
            self.error = exc

    @property
    def broken(self) -> bool:
        """The writer failed: the followers publish without waiting."""
        return self.writer.error is not None

    def close(self) -> None:
        self.finish()
        if getattr(self, "error", None) is not None:
            raise self.error

    def _sizes(self) -> int:
        if not isinstance(self.path, Path):
            return 0
        total = 0
        for p in (self.path, Path(f"{self.path}-wal")):
            with contextlib.suppress(OSError):
                total += p.stat().st_size
        return total

    def report(self):
        w = self.writer
        return {
            "output": "store",
            "path": self.shown,
            "events": w.events,
            "tracks": w.tracks_written,
            "embeddings": w.embeddings,
            "commits": w.commits,
            "batch_s": w.batch_s,
            "bytes_written": w.io["wchar"],
            "bytes_written_per_hour": round(w.per_hour()),
            "rows_pruned": w.pruned,
            "reconcile": self.found,
            **self._server_report(),
        }

    def _server_report(self) -> dict:
        """A server's: the device, its outages, what the spool kept, replayed and dropped."""
        w = self.writer
        if isinstance(self.path, Path):
            return {}
        return {
            "device": w.device,
            "outages": w.outages,
            "spooled": w.spool.spooled,
            "replayed": w.replayed,
            "spool_dropped": w.spool.dropped,
            "spool_bytes_left": w.spool.size,
            "duplicates_skipped": w.duplicates,
        }

    def wrote(self) -> list:
        w = self.writer
        if not isinstance(self.path, Path):  # a server's: only what waits in its spool
            spool = w.spool.path
            return [written("store spool", spool)] if spool.exists() else []
        return [
            written(
                "store",
                self.path,
                events=w.events,
                tracks=w.tracks_written,
                written=w.io["wchar"],
                per_hour=round(w.per_hour()),
                seconds=round(time.monotonic() - w.t0, 1),
                bytes=self._sizes(),
            )
        ]


def open_uri(uri: str, ctx: SinkContext) -> StoreOutput:
    if server(uri):
        from . import postgres

        target = postgres.parse(server(uri))
        out = StoreOutput(target, target.options, ctx)
        where = f"device {target.device}, spool {out.writer.spool.path}"
    else:
        path, options = parse(uri)
        out = StoreOutput(path, options, ctx)
        where = ""
    ctx.say(
        f"store: {out.shown} (events committed every {out.writer.batch_s:g} s"
        + (f"; {where})" if where else ")")
    )
    return out
