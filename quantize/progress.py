"""Progress of a build's long steps for the person waiting: what it is doing, how far (n of N)
and about how long is left, written whenever nothing else was written for a while.

A build opens :func:`reporting` with where the lines go (the CLI: standard error; nowhere with
``--quiet``); its steps, however deep, open a :func:`step` and advance it. A watcher thread
writes a line after ``EDGERT_PROGRESS_SECONDS`` (default 10) seconds without output: the chain
of steps under way, the innermost one's n/N, and the time left for it and for the outermost one,
estimated from the rate so far. Outside :func:`reporting` a step costs nothing and says nothing.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

DEFAULT_SECONDS = 10.0
ENV = "EDGERT_PROGRESS_SECONDS"


@dataclass
class Step:
    """One long step: ``what`` it does, ``done`` of ``total`` ``unit``, the item under way."""

    what: str
    total: int
    unit: str = ""
    done: int = 0
    item: str = ""
    started: float = field(default_factory=time.monotonic)
    last: float = 0.0  # when the last of ``done`` was done

    def advance(self, n: int = 1, item: str = "") -> None:
        self.done = min(self.total, self.done + n)
        self.item = item
        self.last = time.monotonic()

    def at(self, item: str | None) -> None:
        """Name the item under way (a preparation, a method, a node)."""
        self.item = item

    def left(self, now: float) -> float | None:
        """Seconds left at the rate so far, less the time the one under way has had; None
        before the first of N is done."""
        if self.done <= 0:
            return None
        each = (self.last - self.started) / self.done
        return max(0.0, each * (self.total - self.done) - (now - self.last))

    def describe(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        item = f" ({self.item})" if self.item else ""
        return f"{self.what} {self.done}/{self.total}{unit}{item}"


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Reporter:
    """The steps under way and a thread that writes where they are after ``every`` seconds of
    silence (:meth:`heard` resets the silence: the build's own lines count as output)."""

    def __init__(self, write: Callable[[str], None], every: float) -> None:
        self.write = write
        self.every = every
        self.steps: list[Step] = []
        self.started = time.monotonic()
        self.quiet_since = self.started
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="edgert-progress", daemon=True)

    def heard(self) -> None:
        self.quiet_since = time.monotonic()

    def push(self, step: Step) -> None:
        with self._lock:
            self.steps.append(step)

    def pop(self, step: Step) -> None:
        with self._lock:
            if step in self.steps:
                self.steps.remove(step)

    def line(self, now: float | None = None) -> str | None:
        """Where the build is, or None when no step is under way."""
        now = time.monotonic() if now is None else now
        with self._lock:
            steps = list(self.steps)
        if not steps:
            return None
        inner, outer = steps[-1], steps[0]
        left = inner.left(now)
        text = (
            f"progress: {' > '.join(s.describe() for s in steps)}; "
            f"{duration(now - inner.started)} in this step, "
            + (
                f"about {duration(left)} left"
                if left is not None
                else "no estimate before the first"
            )
        )
        outer_left = outer.left(now) if outer is not inner else None
        if outer_left is not None:
            text += f", about {duration(outer_left)} left for {outer.what}"
        return text + f" ({duration(now - self.started)} since the start)"

    def _watch(self) -> None:
        tick = max(0.05, min(1.0, self.every / 5))
        while not self._stop.wait(tick):
            if time.monotonic() - self.quiet_since < self.every:
                continue
            text = self.line()
            if text is None:
                continue
            self.heard()
            try:
                self.write(text)
            except Exception:  # noqa: BLE001 - a closed stream ends the reports, never the build
                return

    def __enter__(self) -> Reporter:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


_current: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar(
    "edgert_progress", default=None
)


def interval() -> float:
    """``EDGERT_PROGRESS_SECONDS`` when it is a positive number, else 10."""
    try:
        value = float(os.environ.get(ENV, ""))
    except ValueError:
        return DEFAULT_SECONDS
    return value if value > 0 else DEFAULT_SECONDS


@contextmanager
def reporting(write: Callable[[str], None] | None, every: float | None = None) -> Iterator[None]:
    """Progress lines to ``write`` while the block runs (None: no lines)."""
    if write is None or _current.get() is not None:  # nested builds report once
        yield
        return
    reporter = Reporter(write, interval() if every is None else every)
    token = _current.set(reporter)
    try:
        with reporter:
            yield
    finally:
        _current.reset(token)


def heard() -> None:
    """Something was written: the silence the reports wait for starts again."""
    reporter = _current.get()
    if reporter is not None:
        reporter.heard()


def said(say: Callable[[str], None]) -> Callable[[str], None]:
    """``say`` that also counts as output for the reports."""

    def say_and_mark(line: str) -> None:
        say(line)
        heard()

    return say_and_mark


@contextmanager
def step(what: str, total: int, unit: str = "") -> Iterator[Step]:
    """A long step of ``total`` ``unit``: advance it as they are done."""
    s = Step(what, max(1, int(total)), unit)
    reporter = _current.get()
    if reporter is None:
        yield s
        return
    reporter.push(s)
    try:
        yield s
    finally:
        reporter.pop(s)


def _name(item) -> str | None:
    """A short name of an item: a string, a path or a number as it is; anything else (an image)
    is counted, never named (``str()`` of an array is the whole array)."""
    if isinstance(item, (str, os.PathLike, int, float)):
        return str(item)
    return None


def each(items: Iterable, what: str, total: int, unit: str = "", name=_name) -> Iterator:
    """The ``items`` one by one inside a :func:`step`, each named (``name(item)``) while under way
    and counted once done."""
    with step(what, total, unit) as s:
        for item in items:
            s.at(name(item))
            yield item
            s.advance(1)
