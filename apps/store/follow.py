"""MQTT after the store: with a store on, an event is published (MQTT, QoS 1) only once the store
committed it, so that every event a subscriber was sent is in the store, even after a SIGKILL
(the batch being gathered dies with the run on both sides). The events file (``--events``) is
not held back: it is the run's own record, a line as each event happens (a killed run's file
names the clip it was writing), and a store is on by default beside the clips; holding it back
would delay it by the batch window (10 s) and lose that window to a kill. The store's writer thread hands each committed batch's events to
:class:`AfterCommit`, which passes them to the sink it wraps; a write that fails there is raised
on the output thread at its next call (the run's ``--on-output-error`` decides). A store that
failed holds nothing back: its followers publish at once again."""

from __future__ import annotations

import threading

from edgert.apps.camera.sinks.base import Sink
from edgert.runtime.errors import OutputError

FOLLOWERS = ("MqttOutput",)  # the sinks that tell others of an event


def follows(sink) -> bool:
    """Whether ``sink`` tells others of an event (a camera's own, ``sinks.own.OneStream``: the
    sink within; named, not imported: the sinks' package imports the store)."""
    if type(sink).__name__ == "OneStream":
        return follows(sink.inner)
    return type(sink).__name__ in FOLLOWERS


class AfterCommit(Sink):
    """``inner``'s events, as the store ``store`` commits them."""

    takes_frames = False
    takes_events = True

    def __init__(self, inner, store) -> None:
        self.inner, self.store = inner, store
        self.takes_stats = inner.takes_stats
        self.lock = threading.Lock()
        self.error: OutputError | None = None
        self.closed = False

    def deliver(self, events: list) -> None:
        """The writer thread: events committed, to the sink."""
        with self.lock:
            if self.closed or self.error is not None:
                return
            try:
                self.inner.events(events)
            except OutputError as exc:
                self.error = exc

    def events(self, events: list) -> None:
        """The output thread: nothing to do until the store commits (a failed store: at once)."""
        if self.error is not None:
            raise self.error
        if self.store.broken:
            with self.lock:
                self.inner.events(events)

    def stats(self, stats: dict) -> None:
        self.inner.stats(stats)

    def metrics(self) -> list:
        return self.inner.metrics()

    def report(self):
        return self.inner.report()

    def wrote(self) -> list:
        return self.inner.wrote()

    def close(self) -> None:
        """The store's last batch committed and published first, then the sink closed."""
        self.store.finish()
        with self.lock:
            self.closed = True
            self.inner.close()
