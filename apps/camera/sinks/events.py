"""``--events FILE`` (or ``--output events://FILE``): one JSON line per track and counting event,
written as they happen; appended to, each run beginning with a ``run_start`` event naming its
streams, after the earlier runs' events. Turns tracking on."""

from __future__ import annotations

import os
import time
from pathlib import Path

from edgert.runtime.events import Event

from .base import Sink, SinkContext, written
from .jsonl import JsonlOutput, path_of


class EventsOutput(Sink):
    takes_frames = False
    takes_events = True

    def __init__(self, path: str, streams: list | None = None) -> None:
        start = Event("run_start", time=round(time.time(), 4), fields={"pid": os.getpid()})
        start.fields["streams"] = streams or []
        self.out = JsonlOutput(path, start.to_record())
        self.written = 0

    def events(self, events: list) -> None:
        for event in events:
            self.out.line(event)
            self.written += 1

    def wrote(self) -> list:
        return [written("events", self.out.path, events=self.written)]

    def close(self) -> None:
        self.out.close()


def open_uri(uri: str, ctx: SinkContext) -> EventsOutput:
    return EventsOutput(path_of(uri), ctx.streams)


def paths(uri: str, streams: int, mosaic: bool) -> list[tuple[str, Path]]:
    return [(f"--output {uri}", Path(path_of(uri)))]
