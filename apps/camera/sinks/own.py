"""A camera's own outputs (issue 68): ``--stream-output STREAM:URI`` (a camera's ``outputs:`` in a
site file) is a sink of that camera alone: its video file, its RTSP mount, its MQTT topics, its
events or JSONL file. The sink is opened as if the run had that one camera (its context narrowed
to the stream, :func:`narrowed`) and sees only that stream's frames, events and statistics
(:class:`OneStream`); the records keep the stream's own number. What the run keeps whole (the web
viewer and its probes, the store, clips and snapshots, which a camera turns off with its own
``clips: false``) is not one camera's."""

from __future__ import annotations

import dataclasses

from edgert.apps.uris import redact
from edgert.runtime.errors import OutputError

from .base import Sink, SinkContext, stream_of

# the schemes a camera may have of its own (the others serve or keep every camera's)
OWN = ("file", "rtsp", "mqtt", "mqtts", "jsonl", "events", "display")
FLAG = "--stream-output"


def add_arguments(parser) -> None:
    parser.add_argument(
        FLAG,
        action="append",
        default=[],
        metavar="STREAM:URI",
        help="an output of one stream alone (a camera's outputs: in a site file): a video "
        "file, rtsp://, mqtt[s]://, jsonl:// or events://, which sees only that stream's "
        "frames, events and heartbeats; repeatable",
    )


def why_not_own(uri: str) -> str | None:
    """Why ``uri`` cannot be one camera's output (None: it can), in one sentence's end."""
    from . import resolve

    scheme = resolve(uri)[0]
    if scheme in OWN:
        return None
    if scheme in ("clips", "snapshots"):
        return (
            f"{scheme}:// keeps every camera's; give it to the run and turn a camera's off "
            f"(--stream-{scheme} STREAM:off, a camera's {scheme}: false)"
        )
    if scheme in ("http", "store"):
        return f"{scheme}:// serves every camera; give it to the run (--output)"
    return None  # not a scheme at all: the table's own check says which there are


def parse(forms: list, streams: int) -> tuple:
    """((stream, URI), ...) of ``--stream-output STREAM:URI`` forms; OutputError in one sentence
    for a form that is not one, a stream the run lacks, or an output of every camera."""
    out = []
    for form in forms:
        head, colon, uri = str(form).partition(":")
        if not (colon and head.isascii() and head.isdigit() and uri):
            raise OutputError(f"{FLAG} {redact(str(form))}: give STREAM:URI (0:out.mp4)")
        if int(head) >= streams:
            raise OutputError(f"{FLAG} {redact(str(form))}: there is no stream {head}")
        why = why_not_own(uri)
        if why:
            raise OutputError(f"{FLAG} {redact(str(form))}: {why}")
        if (int(head), uri) in out:
            raise OutputError(f"{FLAG} {redact(str(form))} is given twice; give it once")
        out.append((int(head), uri))
    return tuple(out)


def narrowed(ctx: SinkContext, index: int, described: dict, source) -> SinkContext:
    """``ctx`` as a sink of stream ``index`` alone sees it: that stream, its source, its rate,
    and live statistics of that stream only (an MQTT sink's heartbeats)."""
    live = ctx.live

    def own_live():
        s = live() if live is not None else None
        if not s:
            return s
        return {**s, "streams": [st for st in s.get("streams", []) if st["stream"] == index]}

    fps = getattr(source, "fps", None) or ctx.fps
    return dataclasses.replace(
        ctx, streams=[described], sources=[source], fps=fps, live=own_live if live else None
    )


class OneStream(Sink):
    """A sink of one stream: the frames, events and statistics of stream ``index`` (an event of
    no stream, such as a model swap or a configuration applied, is every camera's) to ``inner``,
    opened for that stream alone."""

    def __init__(self, inner: Sink, index: int) -> None:
        self.inner, self.index = inner, index
        self.takes_frames, self.draws = inner.takes_frames, inner.draws
        self.takes_events, self.takes_stats = inner.takes_events, inner.takes_stats

    def wants(self, frame) -> bool:
        return stream_of(frame) == self.index and self.inner.wants(frame)

    def write(self, frame, image, record: dict) -> None:
        self.inner.write(frame, image, record)

    def events(self, events: list) -> None:
        own = [e for e in events if e.get("stream", self.index) == self.index]
        if own:
            self.inner.events(own)

    def stats(self, stats: dict) -> None:
        streams = [st for st in stats.get("streams", []) if st.get("stream") == self.index]
        self.inner.stats({**stats, "streams": streams})

    def metrics(self) -> list:
        return self.inner.metrics()

    def close(self) -> None:
        self.inner.close()

    def report(self):
        said = self.inner.report()
        if isinstance(said, dict):
            return {**said, "stream": self.index}
        if isinstance(said, list):
            return [{**r, "stream": self.index} if isinstance(r, dict) else r for r in said]
        return said

    def wrote(self) -> list:
        return [{**w, "stream": self.index} for w in self.inner.wrote()]
