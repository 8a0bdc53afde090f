"""``--jsonl FILE`` (or ``--output jsonl://FILE``): a header line naming the streams, then one
JSON line per processed frame, appended to as a log is."""

from __future__ import annotations

import os
import time
from pathlib import Path

from edgert.runtime import atomic, json_text
from edgert.runtime.errors import OutputError

from .base import Sink, SinkContext, written


def path_of(uri: str) -> str:
    """The file of ``jsonl://FILE`` or ``events://FILE`` (``jsonl:///abs/FILE``)."""
    return uri.split("://", 1)[1]


class JsonlOutput(Sink):
    """A JSON-lines log, appended to as a log is: a restart (a crash, systemd, a reboot) adds a
    run after the earlier ones, each beginning with its ``header`` line, and never erases them.
    A last line cut short by a crash is ended first, so the next line stays whole."""

    draws = False  # the record, not the picture

    def __init__(self, path: str, header: dict | None = None) -> None:
        self.path = Path(path)
        self.failed = False
        self.lines = 0  # this run's, after its header
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fh = open(self.path, "a+b")  # noqa: SIM115 - closed in close()
            if self.fh.tell() > 0:
                self.fh.seek(-1, os.SEEK_END)
                if self.fh.read(1) != b"\n":
                    self.fh.write(b"\n")
        except OSError as exc:
            raise OutputError(atomic.describe_os_error(exc, self.path)) from exc
        if header is not None:
            self.line(header)

    def write(self, frame, image, record: dict) -> None:
        self.line(record)
        self.lines += 1

    def line(self, record: dict) -> None:
        """One JSON line, flushed."""
        try:
            self.fh.write((json_text.dumps(record) + "\n").encode())
            self.fh.flush()
        except OSError as exc:
            self.failed = True
            raise OutputError(atomic.describe_os_error(exc, self.path)) from exc

    def close(self) -> None:
        try:
            self.fh.close()
        except OSError as exc:  # what was still buffered: said once, not over the first error
            if not self.failed:
                self.failed = True
                raise OutputError(atomic.describe_os_error(exc, self.path)) from exc

    def wrote(self) -> list:
        return [written("jsonl", self.path, frames=self.lines)]


def open_uri(uri: str, ctx: SinkContext) -> JsonlOutput:
    return JsonlOutput(path_of(uri), {"run_start": round(time.time(), 4), "streams": ctx.streams})


def paths(uri: str, streams: int, mosaic: bool) -> list[tuple[str, Path]]:
    return [(f"--output {uri}", Path(path_of(uri)))]
