"""The contract every sink keeps (:class:`Sink`), what it is opened with (:class:`SinkContext`),
and what several sinks share (a frame's JSON record, the streams' grid)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from edgert.runtime.errors import OutputError
from edgert.runtime.results import records


class Sink:
    """Where a camera run's results go. What a sink takes is declared, never probed:

    - ``takes_frames``: ``write(frame, image, record)`` for every processed frame it ``wants``
      (all by default; the web viewer: while watched, at its own rate, frames with the camera's
      pixels); ``image`` is the frame with the overlay drawn when ``draws`` (the overlay is
      drawn only if a sink draws), else the clean frame; ``record`` its JSON record
      (:func:`frame_record`);
    - ``takes_events``: ``events(list)`` with each frame's track and counting events, and the
      events of the run's end (tracks still live when it stops);
    - ``takes_stats``: ``stats(dict)`` with the live statistics, about twice a second.

    Every sink may ``close`` (its errors are :class:`~edgert.runtime.errors.OutputError`),
    ``report`` what it did for the run's summary, and offer Prometheus ``metrics`` families.
    A write that fails raises OutputError; the run closes that sink and stops, or goes on
    without it (``--on-output-error``)."""

    takes_frames = True
    draws = True
    takes_events = False
    takes_stats = False

    def wants(self, frame) -> bool:
        """Whether this sink takes ``frame`` (asked only when ``takes_frames``)."""
        return True

    def write(self, frame, image, record: dict) -> None:
        """One processed frame (only when ``takes_frames`` and it ``wants`` it)."""

    def events(self, events: list) -> None:
        """Events (only when ``takes_events``)."""

    def stats(self, stats: dict) -> None:
        """The live statistics (only when ``takes_stats``)."""

    def metrics(self) -> list:
        """Prometheus metric families of this sink's own numbers, read at scrape time."""
        return []

    def close(self) -> None:
        pass

    def report(self):
        """What this sink did, for the summary (a dict, a list of dicts, or None)."""
        return None

    def wrote(self) -> list:
        """What it wrote to disk, for the summary's ``files``: a dict per file or folder, with
        ``output`` (its kind), ``path`` (absolute), what it holds and ``bytes``."""
        return []


@dataclass
class SinkContext:
    """What a sink is opened with: the frame rate of the sources (for video files), each stream
    (its index, its URI with passwords hidden, its description), the run's sink options, where to
    say things, the run's probes (the web viewer serves them), once the pipeline runs its live
    statistics on demand (``live()``: MQTT heartbeats read them on their own clock), and the
    sources themselves (``sources``: clips ask an RTSP camera for its own packets)."""

    fps: float = 30.0
    streams: list = field(default_factory=lambda: [{"stream": 0}])
    options: object = None  # SinkOptions
    say: Callable[[str], None] = lambda s: None
    probes: object = None
    live: Callable[[], dict] | None = None
    sources: list = field(default_factory=list)  # the streams' sources (clips tap RTSP's packets)
    demand: object = None  # media.Demand: held while a viewer watches (full frames then)


def folder_and_query(uri: str, what: str, known: tuple) -> tuple[str, dict]:
    """(folder, options) of ``SCHEME://DIR?k=v&...`` (or a bare ``DIR?k=v``): the options must be
    ``key=value`` pairs of ``known``; OutputError in one sentence otherwise (a ``?`` that is part
    of a folder's name would be taken for options and is refused, never cut off)."""
    from urllib.parse import parse_qs

    rest = uri.split("://", 1)[1] if "://" in uri else uri
    folder, sep, query = rest.partition("?")
    try:
        given = parse_qs(query, True, True) if sep else {}
    except ValueError:
        raise OutputError(
            f"{what}: {rest!r}: after '?' come options as key=value joined by '&' "
            f"({', '.join(known)}); a folder whose name holds '?' cannot be given here"
        ) from None
    twice = sorted(k for k, v in given.items() if len(v) > 1)
    if twice:  # ?a=1&a=2: which one was meant is not ours to guess
        raise OutputError(f"{what}: {twice[0]}= is given twice; give it once")
    q = {k: v[0] for k, v in given.items()}
    unknown = set(q) - set(known)
    if unknown:
        raise OutputError(f"{what}: unknown option {sorted(unknown)[0]!r} ({', '.join(known)})")
    if not folder.strip():
        raise OutputError(f"{what} needs a folder, and it was given an empty one")
    return folder, q


def make_folder(folder, what: str):
    """``folder`` made (with its parents) if missing, as a Path; OutputError in one sentence when
    it cannot be, or is something other than a folder."""
    import os
    from pathlib import Path

    from edgert.runtime.atomic import describe_os_error

    folder = Path(folder)
    if os.path.lexists(folder) and not folder.is_dir():
        raise OutputError(f"{what}: {folder} is not a folder (give a folder to write into)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{what}: {describe_os_error(exc, folder)}") from None
    return folder


def written(kind: str, path, **counts) -> dict:
    """One entry of :meth:`Sink.wrote`: a file's size, or a folder's files' ``bytes`` given."""
    import os

    path = os.path.abspath(path)
    if "bytes" not in counts:
        try:
            counts["bytes"] = os.path.getsize(path)
        except OSError:  # gone (a failed output cleaned up)
            counts["bytes"] = 0
    return {"output": kind, "path": path, **counts}


def sizes_of(paths) -> dict:
    """{path: size} of those of ``paths`` still there (retention may have deleted some)."""
    from pathlib import Path

    out = {}
    for p in paths:
        try:
            out[Path(p)] = Path(p).stat().st_size
        except OSError:
            continue
    return out


def streams_of(q: dict, what: str) -> frozenset | None:
    """A folder sink's ``streams=0+2`` (``none``: no stream): the streams it keeps (None:
    every); OutputError in one sentence."""
    text = q.get("streams")
    if text is None:
        return None
    parts = [p for p in text.split("+") if p] if text != "none" else []
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise OutputError(f"{what}: streams= is streams' numbers joined by + (0+2), or none")
    return frozenset(int(p) for p in parts)


def stream_of(frame) -> int:
    return getattr(frame, "stream", 0)


def grid_columns(streams: int) -> int:
    """Columns of the streams' grid (the web page's and the mosaic's): as square as it gets."""
    return max(1, math.ceil(math.sqrt(streams)))


def frame_record(frame, t0: float) -> dict:
    """A processed frame as a JSON record: its stream, index, time, results and timings; with
    event-gated inference whether it was inferred, and why (``gate``)."""
    record = {
        "stream": frame.stream,
        "frame": frame.index,
        "t": round(frame.t_capture - t0, 4),
        "results": records(frame.results),
        "latency_ms": {k: round(v, 3) for k, v in frame.timings.items()},
    }
    if frame.gate is not None or not frame.inferred:
        record["inferred"] = frame.inferred
        record["gate"] = frame.gate
    return record
