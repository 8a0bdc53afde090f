"""What happens to each processed frame, in the pipeline's output thread, and to the run's sinks:

    frame ─▶ labels counted ─▶ each feature's step (features/: tracking and counting, the second
          stage) ─▶ the features' marks on its events ─▶ its JSON record
          ─▶ live statistics refreshed (every 0.5 s) ─▶ the overlay drawn (only if a sink draws)
          ─▶ every sink, as it declared: the frame, its events, the statistics

A sink whose write fails (a full disk, a broken pipe) is closed and reported; then the run stops
(``stop``) or goes on without it (``continue``)."""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
import types

from edgert.runtime.errors import EdgertError, OutputError

from .overlay import draw, stat_lines
from .sinks import SinkContext, SinkOptions, frame_record, open_sink

log = logging.getLogger(__name__)


class SinkSet:
    """Every sink of a run, and the policy for one that fails."""

    def __init__(self, sinks: list, policy: str = "stop") -> None:
        self.order = list(sinks)  # as given (the summary lists their files so)
        # a sink that adds to events (snapshots: the picture's path) goes before those that
        # write them
        sinks = sorted(sinks, key=lambda s: not getattr(s, "enriches_events", False))
        self.live = list(sinks)
        self.all = list(sinks)
        self.policy = policy
        self.errors: list[str] = []
        self.on_stop = lambda: None

    @property
    def wants_stats(self) -> bool:
        return any(s.takes_stats for s in self.all)

    @property
    def draws(self) -> bool:
        """Whether any sink may take pictures with the overlay drawn (the web viewer only while
        it is watched)."""
        return any(s.takes_frames and s.draws for s in self.live)

    def draws_on(self, frame) -> bool:
        """Whether a sink takes this frame's picture with the overlay drawn (the web viewer only
        while watched, at its own rate, and on a frame that brings the camera's pixels)."""
        return any(s.takes_frames and s.draws and s.wants(frame) for s in self.live)

    def frame(self, frame, drawn, clean, record) -> None:
        """The frame to every sink that wants it; ``record()`` makes its JSON record, once and
        only when one does."""
        for s in list(self.live):
            if s.takes_frames and s.wants(frame):
                self._guarded(s, s.write, frame, drawn if s.draws else clean, record())
            if s.takes_events and frame.events and s in self.live:
                self._guarded(s, s.events, frame.events)

    def events(self, events: list) -> None:
        """Events that belong to no frame (the end of the run)."""
        for s in list(self.live):
            if s.takes_events:
                self._guarded(s, s.events, events)

    def stats(self, stats: dict) -> None:
        for s in list(self.live):
            if s.takes_stats:
                self._guarded(s, s.stats, stats)

    def _guarded(self, s, call, *args) -> None:
        try:
            call(*args)
        except OutputError as exc:
            self._failed(s, exc)

    def _failed(self, s, exc: EdgertError) -> None:
        self.live.remove(s)
        self.errors.append(str(exc))
        with contextlib.suppress(EdgertError, OSError):
            s.close()
        if self.policy == "continue":
            log.warning("%s; going on without that output", exc)
        else:
            self.on_stop()

    def change(self, added: list, removed: list) -> None:
        """Sinks added and removed while the run goes on (a reload; between two frames): a
        removed one is closed (what it wrote stays in the summary), an added one takes the next
        frame."""
        for s in removed:
            if s in self.live:
                self.live.remove(s)
                try:
                    s.close()
                except OutputError as exc:
                    self.errors.append(str(exc))
        self.order += added
        self.all += added
        self.live = sorted(
            self.live + added, key=lambda s: not getattr(s, "enriches_events", False)
        )

    def close(self) -> None:
        while self.live:
            try:
                self.live.pop(0).close()
            except OutputError as exc:
                self.errors.append(str(exc))

    def reports(self) -> list:
        return [r for r in (s.report() for s in self.all) if r is not None]

    def wrote(self) -> list:
        """What every sink wrote to disk (:meth:`Sink.wrote`), in the order they were given."""
        return [entry for s in self.order for entry in s.wrote()]


def open_sinks(run, opts) -> SinkSet:
    """The run's sinks (``features.Run``), with what they may ask of it (probes' routes, live
    numbers, the decoder's full-frame demand), then each camera's own (``--stream-output``);
    ``opts``: the sources' options."""
    cfg = run.cfg
    return _open(
        run.uris,
        list(cfg.stream_sinks),
        [u if isinstance(u, str) else u.description for u in cfg.sources],
        run.sources,
        cfg.sink_options,
        run.stack,
        SinkContext(
            say=run.say,
            probes=run.probes.probes if run.probes is not None else None,
            live=run.handler.numbers,
            demand=opts.fit.demand if opts.fit is not None else None,
        ),
    )


def open_more(run, uris: list, own: list = (), more: list = ()) -> list:
    """Sinks added while the run goes on (a reload), opened as the run's were (the streams as
    they are now, and ``more``: the sources of cameras about to be added, streams after the
    run's) and closed by its stack; ``own``: (stream, URI) of a camera's own; an error closes
    those opened and is raised."""
    ctx = SinkContext(
        say=run.say,
        probes=run.probes.probes if run.probes is not None else None,
        live=run.handler.numbers,
    )
    sources = [*run.sources, *more]
    described = [s.description for s in sources]
    with contextlib.ExitStack() as opening:
        got = _open(uris, own, described, sources, run.cfg.sink_options, opening, ctx).all
        opening.pop_all()  # all opened: the run's from now on
    for sink in got:
        run.stack.callback(_quiet_close, sink, (EdgertError, OSError))
    return got


def _open(
    uris: list[str],
    own: list,
    source_uris: list[str],
    sources: list,
    options: SinkOptions,
    stack,
    ctx: SinkContext,
) -> SinkSet:
    """Every sink, opened with the streams (URIs shown without passwords), their frame rate and
    the sinks' options, then each (stream, URI) of ``own`` for its stream alone; each closed by
    ``stack`` on an error path (a run closes its own). Their order: ``uris``', then ``own``'s."""
    from edgert.apps.uris import redact

    from .sinks.own import OneStream, narrowed

    ctx.streams = [
        {"stream": i, "uri": redact(uri), "source": s.description}
        for i, (uri, s) in enumerate(zip(source_uris, sources))
    ]
    ctx.fps = next((s.fps for s in sources if s.fps), None) or 30.0
    ctx.options = options
    ctx.sources = list(sources)
    opened = []
    for i, uri in [(None, u) for u in uris] + list(own):
        one = ctx if i is None else narrowed(ctx, i, ctx.streams[i], sources[i])
        sink = open_sink(uri, one)
        sink = sink if i is None else OneStream(sink, i)
        stack.callback(_quiet_close, sink, (EdgertError, OSError))
        opened.append(sink)
    for sink in list(opened):  # the store: what publishes events waits for its commits
        if hasattr(sink, "hold_back"):
            opened = sink.hold_back(opened)
    return SinkSet(opened, options.on_error)


def _quiet_close(sink, errors: tuple) -> None:
    with contextlib.suppress(*errors):
        sink.close()


class LabelCounts:
    """What the inferred frames showed, by label: every object of each frame (a detector's
    boxes: ``objects``), and each frame's most confident label (``top``: a classifier's class;
    the JSON summary's ``labels_seen``)."""

    def __init__(self) -> None:
        self.objects: collections.Counter = collections.Counter()
        self.top: collections.Counter = collections.Counter()
        self.frames = 0

    def add(self, results) -> None:
        if results is None:
            return
        self.frames += 1
        for o in results.objects:
            self.objects[o.label] += 1
        top = results.top()
        if top is not None:
            self.top[top[0]] += 1


class FrameHandler:
    """The pipeline's sink: called with every processed frame, in each stream's order."""

    STATS_EVERY_S = 0.5

    def __init__(self, sources: list, power=None, analytics=None, on_result=None) -> None:
        self.sources, self.power, self.analytics = sources, power, analytics
        self.labels = LabelCounts()
        self.sinks = SinkSet([])
        self.pipeline = None
        self.t0 = time.monotonic()
        self._last_stats = 0.0
        self._stats: dict = {}
        self._records: dict = {}
        self._last_results: dict = {}  # stream -> its last inferred results (for skipped frames)
        self._stats_due = False
        self._many = len(sources) > 1
        self.on_result = on_result  # a library caller's own callback, after the sinks
        self.slot = None  # swap.ModelSlot: results and events say which model made them
        self._posted: collections.deque = collections.deque()  # events from other threads
        self.steps: list = []  # each camera feature's step on every frame (features.frame_steps)
        self.stamps: list = []  # what each camera feature adds to every event
        self.marks: dict = {}  # what every event carries (a reloadable run: its config version)
        self.between = threading.Lock()  # held while a frame is delivered (a reload waits)

    def join(self, run, steps: list, stamps: list) -> None:
        """The run's tracker and model slot (what the frames' records and the live numbers
        read), and its features' steps (``features.frame_steps``), once they took the model."""
        self.analytics, self.slot = run.analytics, run.slot
        self.steps, self.stamps = steps, stamps

    def post_event(self, event: dict) -> None:
        """An event from another thread (a model swap): delivered with the next frame, on the
        output thread (sinks are called from it alone)."""
        self._posted.append(event)

    def flush_events(self) -> None:
        """The events posted and not yet delivered (the end of the run)."""
        posted = []
        while self._posted:
            posted.append(self._posted.popleft())
        for e in posted:
            for k, v in self.marks.items():
                e.setdefault(k, v)
        if posted:
            self.sinks.events(posted)

    def labelled(self, events: list, frame=None) -> list:
        """``events`` with what the features add to each (the model that made them, the second
        stage's labels of their tracks)."""
        for stamp in self.stamps:
            stamp(events, frame)
        for e in events if self.marks else ():
            for k, v in self.marks.items():
                e.setdefault(k, v)
        return events

    def attach(self, sinks: SinkSet, pipeline) -> None:
        """The run's sinks and pipeline, once they exist (a failing sink can stop the run)."""
        self.sinks, self.pipeline = sinks, pipeline
        self._stats_due = sinks.draws or sinks.wants_stats  # the overlay shows them too
        sinks.on_stop = pipeline.stop

    def numbers(self) -> dict | None:
        """The live statistics (recent latencies and rates per stream, power), safe to read from
        any thread (MQTT heartbeats read them on their own clock). None before the run."""
        p = self.pipeline
        if p is None:
            return None
        s = p.stats(recent=True)
        if self.slot is not None:  # MQTT heartbeats and the web page say which model runs
            s["model"] = self.slot.current.label
        return self.power.live(s) if self.power is not None else s

    def live(self) -> dict:
        """:meth:`numbers` with each stream's last record and counts, which the output thread
        keeps (called on it): what the web page and the overlay show."""
        s = self.numbers() or {}
        for st in s.get("streams", []):
            last = self._records.get(st["stream"])
            st["last"] = last() if last is not None else None
            if self.analytics is not None:
                st["counts"] = self.analytics.counts(st["stream"])
        return s

    def _record(self, frame, now: float) -> dict:
        record = frame_record(frame, self.t0)
        record["latency_ms"]["end_to_end"] = round((now - frame.t_capture) * 1e3, 3)
        if self.slot is not None:
            record["model"] = frame.model_label
        return record

    def __call__(self, frame) -> None:
        with self.between:
            self._deliver(frame)

    def change_sinks(self, added: list, removed: list) -> None:
        """Sinks added and removed while the run goes on, between two frames."""
        with self.between:
            self.sinks.change(added, removed)
            self._stats_due = self.sinks.draws or self.sinks.wants_stats

    def _deliver(self, frame) -> None:
        if not frame.inferred and self.analytics is None:  # skipped by the gate, no tracker:
            held = self._last_results.get(frame.stream)  # the last results, marked predicted
            frame.results = held.held() if held is not None else None
        elif frame.inferred:
            self._last_results[frame.stream] = frame.results
            self.labels.add(frame.results)
        for step in self.steps:  # the features' (tracking: track IDs and events; ...)
            step(frame)
        if self._posted:
            self.flush_events()
        now = time.monotonic()
        self.labelled(frame.events, frame)
        # the frame's JSON record (results, latencies) is made once, and only if read: by a sink
        # that takes the frame, or the live statistics' last record of its stream; from what
        # the record says as it is now (not the frame: its pictures and tensor are let go)
        made: list = []
        said = types.SimpleNamespace(
            stream=frame.stream,
            index=frame.index,
            t_capture=frame.t_capture,
            results=frame.results,
            timings=dict(frame.timings),
            gate=frame.gate,
            inferred=frame.inferred,
            model_label=self.slot.label_of(frame) if self.slot is not None else None,
        )

        def record() -> dict:
            if not made:
                made.append(self._record(said, now))
            return made[0]

        self._records[frame.stream] = record
        if self._stats_due and now - self._last_stats > self.STATS_EVERY_S:
            self._last_stats, self._stats = now, self.live()
            self.sinks.stats(self._stats)
        # the camera's pixels: the frame itself, or the full picture the decoder gave beside a
        # frame it scaled to the model's size (None: no sink shows this frame)
        picture = frame.picture
        clean = frame.image if picture is None else picture
        drawn = clean
        if picture is not None and self.sinks.draws_on(frame):
            scene = self.analytics.overlay(frame.stream) if self.analytics is not None else None
            lines = stat_lines(self._stats, frame.stream, self.sources, self._many)
            drawn = draw(picture, frame.results, lines, scene)
        self.sinks.frame(frame, drawn, clean, record)
        if self.on_result is not None:
            self.on_result(frame)
