"""A threaded multi-stream pipeline: N sources, one model, frames of all streams batched.

    stream i:  capture ─▶ raw queue ─▶ prepare (preprocess) ─▶ ready queue ─┐
    stream j:  capture ─▶ raw queue ─▶ prepare (preprocess) ─▶ ready queue ─┤
                                                                            ▼
               batcher (freshest frame of each ready stream, round robin,
               until the batch is full, every delivering stream gave one,
               or the batch deadline) ─▶ infer (one call) ─▶ finish (postprocess) ─▶ sink

Each stream has its own capture and preprocessing threads, so a slow or dead stream holds up only
itself: the batcher waits for a stream at most ``batch_timeout`` seconds per batch, and not at all
once the stream has delivered nothing for a while (``STALLED_S``). It starts each batch after the
stream that came last in the previous one, so with more streams than the batch holds none starves.

Frames are dropped only at the streams' own queues (live sources: the oldest is dropped and
counted per stream, so latency stays bounded; files and folders are lossless, put waits): after
the batcher the queues are lossless, so a slow output holds the batcher back and the drops happen,
counted, where the frames enter. A stream that ends or fails is reported; the others go on. The
run fails only when a processing step fails or every stream failed.
"""

from __future__ import annotations

import collections
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence

from edgert.apps import processes
from edgert.runtime.latency import LatencyRecorder

from .frame import Frame, Steps
from .pipeline_stats import describe, report
from .queues import END, DropOldestQueue
from .stream import STALLED_S, Stream
from .threads import named

log = logging.getLogger(__name__)
__all__ = ["STALLED_S", "Frame", "Pipeline", "Steps", "Stream"]


class Pipeline:
    def __init__(
        self,
        sources,
        steps: Steps,
        sink: Callable[[Frame], None],
        batch: int | None = None,
        batch_timeout: float = 0.02,
        queue_size: int = 1,
        duration: float | None = None,
        max_frames: int | None = None,
        gates: list | None = None,
    ) -> None:
        """``sources``: one FrameSource or a list; ``batch``: frames per inference (default: one
        per stream); ``batch_timeout``: the longest the batcher waits for more frames once it has
        one; ``max_frames``: per stream; ``gates``: one :class:`~.gate.StreamGate` per stream
        (event-gated inference), or None to infer every frame."""
        if not isinstance(sources, Sequence):
            sources = [sources]
        if not sources:
            raise ValueError("a pipeline needs at least one source")
        self.steps = steps
        self.sink = sink
        self.gates = gates
        self.batch = max(1, batch or len(sources))
        self.batch_timeout = max(0.0, batch_timeout)
        self.duration = duration
        self.max_frames = max_frames
        self._ready = threading.Condition()  # shared by the streams' ready queues
        self._depth, self._queue_size = math.ceil(self.batch / len(sources)), queue_size
        self.streams = [
            Stream(i, s, queue_size, self._depth, self._ready, steps.discard)
            for i, s in enumerate(sources)
        ]
        self._captures: list[threading.Thread] = []  # each stream's, by index
        # gated, a frame the gate skipped goes from its stream's thread straight to ``post``:
        # room for one of each stream, or the streams' threads wait on each other (and on one
        # shared condition: at 16 gated streams they dropped 3-5 % with a third of the CPU
        # idle); ungated, only the batcher puts there, and the tight queues keep files' streams
        # in step (the same files give their events in the same order, run after run)
        room = len(sources) if gates is not None else 0
        self.post = DropOldestQueue(2 + room, lossless=True)  # batches
        self.out = DropOldestQueue(2 * self.batch + room, lossless=True)  # frames
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        # bounded: a camera left on for days keeps a fixed-size reservoir and window per stage
        names = ["capture_age", steps.names[0], "batch_wait", *steps.names[1:], "output"]
        self.timings: dict[str, LatencyRecorder] = {n: LatencyRecorder() for n in names}
        self.timings["end_to_end"] = LatencyRecorder()
        self.batch_sizes: collections.Counter = collections.Counter()
        self.interrupted = False
        self.processed = 0
        self.started = 0.0
        self.finished = 0.0
        self.heartbeat: float | None = None  # the run loop's last turn (the liveness probe)
        self.observers: list[Callable[[Frame], None]] = []  # called with each finished frame
        self._outputs_at: collections.deque = collections.deque(maxlen=8192)  # recent frame times
        self._lock = threading.Lock()

    @property
    def source(self):
        """The first stream's source (a single-stream pipeline's only one)."""
        return self.streams[0].source

    @property
    def captured(self) -> int:
        return sum(s.captured for s in self.streams)

    @property
    def dropped(self) -> int:
        return sum(s.dropped for s in self.streams)

    def _queues(self) -> list[DropOldestQueue]:
        return [q for s in self.streams for q in (s.raw, s.ready)] + [self.post, self.out]

    def stop(self) -> None:
        """End the run as its end would (from any thread): what is in flight is dropped, the
        streams stop, and ``run`` returns without an error."""
        self._stop()

    def _stop(self) -> None:
        self.stop_event.set()
        for q in self._queues():
            q.close()

    def _fail(self, exc: BaseException) -> None:
        if self.interrupted:  # e.g. a source told to stop while connecting: not a failure
            return
        if self.error is None:
            self.error = exc
        self._stop()

    # -- threads ----------------------------------------------------------------------------
    def _capture(self, s: Stream) -> None:
        try:
            i = 0
            while not self.stop_event.is_set() and not s.removed.is_set():
                if self.max_frames is not None and i >= self.max_frames:
                    break
                if self.duration is not None and time.monotonic() - self.started >= self.duration:
                    break
                got = s.source.read()
                if got is None:
                    break
                image, t = got
                scaled = getattr(s.source, "scaled_from", None)
                media = getattr(s.source, "media_time", None)
                view = getattr(s.source, "view", None) if scaled is not None else None
                s.raw.put(Frame(i, t, image, s.index, t_media=media, source_hw=scaled, view=view))
                i += 1
                s.captured = i
                s.scaled += scaled is not None
                s.viewed += view is not None
        except BaseException as exc:  # noqa: BLE001 - this stream ends; the others go on
            if not self.interrupted and not s.cut:
                s.error = exc
                if len(self.streams) > 1:
                    log.warning("stream %d (%s) stopped: %s", s.index, describe(s.source), exc)
        finally:
            s.raw.put(END)

    def _frames(self, q_in: DropOldestQueue):
        """Items from ``q_in`` until the end marker, or until the pipeline stops."""
        while True:
            try:
                item = q_in.get(timeout=0.1)
            except queue.Empty:
                if self.stop_event.is_set():  # a failure or Ctrl-C: what was queued is done
                    return
                continue
            if item is END:
                return
            yield item

    def _prepare(self, s: Stream) -> None:
        name = self.steps.names[0]
        try:
            for frame in self._frames(s.raw):
                # read at each frame: a reload may give the stream a new gate (its masks)
                gate = self.gates[s.index] if self.gates is not None else None
                t0 = time.monotonic()
                frame.timings["capture_age"] = (t0 - frame.t_capture) * 1e3
                s.scene = [frame.t_scene if s.scene[0] is None else s.scene[0], frame.t_scene]
                if gate is not None:
                    frame.gate = gate.decide(frame)
                    frame.inferred = frame.gate is not None
                if not frame.inferred:  # skipped: it keeps its place in the stream's order
                    frame.t_ready = time.monotonic()
                    if self._nothing_before(s):  # straight on: not held by others' batches
                        self.post.put(([frame], [], None))
                    else:
                        s.ready.put(frame)
                    continue
                self.steps.prepare(frame)
                frame.t_ready = time.monotonic()
                frame.timings[name] = (frame.t_ready - t0) * 1e3
                s.ready.put(frame)
        except BaseException as exc:  # noqa: BLE001 - reported by run()
            self._fail(exc)
        finally:
            s.ready.put(END)

    def _nothing_before(self, s: Stream) -> bool:
        """Whether none of the stream's frames waits for or is in inference: then a frame the
        gate skipped goes straight to the finishing thread, its order kept, and a quiet stream's
        frames are neither held up nor dropped while other streams' batches run."""
        with self._ready:
            return s.in_flight == 0 and s.ready.empty()

    def _collect(self, start: int) -> list[Frame] | None:
        """The next batch: passes over the streams from ``start``, one frame per stream and pass,
        until the batch is full, or every stream still delivering has given a frame and nothing
        more is waiting, or ``batch_timeout`` after the first frame. None when all streams ended."""
        n = len(self.streams)
        frames: list[Frame] = []
        work = 0  # frames that go to inference (a skipped one only keeps its stream's order)
        deadline = None
        with self._ready:
            while True:
                took = False
                for k in range(n):
                    s = self.streams[(start + k) % n]
                    if s.ended or work >= self.batch:
                        continue
                    item = s.ready.poll()
                    if item is END:
                        s.ended = True
                    elif item is not None:
                        s.last_ready = time.monotonic()
                        s.in_flight += 1
                        frames.append(item)
                        took = True
                        if item.inferred:
                            work += 1
                            s.last_work = s.last_ready
                if work >= self.batch:
                    return frames
                now = time.monotonic()
                if all(s.ended for s in self.streams) or self.stop_event.is_set():
                    return frames or None
                if took:
                    continue  # another pass: lossless streams may have more queued
                if frames and not work:
                    return frames  # only skipped frames: nothing to wait for
                if frames:
                    if deadline is None:
                        deadline = now + self.batch_timeout
                    given = {f.stream for f in frames}
                    # streams with work lately: a gated quiet stream is not waited for
                    awaited = [
                        s
                        for s in self.streams
                        if not s.ended
                        and s.index not in given
                        and now - s.last_ready < STALLED_S
                        and now - s.last_work < STALLED_S
                    ]
                    if not awaited or now >= deadline:
                        return frames
                    self._ready.wait(deadline - now)
                else:
                    self._ready.wait(0.1)

    def _batcher(self) -> None:
        infer_name = self.steps.names[1]
        start = seq = 0
        try:
            while True:
                frames = self._collect(start)
                if not frames:
                    break
                start = (frames[-1].stream + 1) % len(self.streams)
                seq += 1
                for f in frames:  # what a second stage batches by (its crops per batch)
                    f.batch, f.batch_frames = seq, len(frames)
                work = [f for f in frames if f.inferred]
                outputs = None
                if work:
                    t0 = time.monotonic()
                    outputs = self.steps.infer(work)
                    ms = (time.monotonic() - t0) * 1e3
                    for f in work:
                        f.timings["batch_wait"] = (t0 - f.t_ready) * 1e3
                        f.timings[infer_name] = ms
                    with self._lock:
                        self.batch_sizes[len(work)] += 1
                self.post.put((frames, work, outputs))
                with self._ready:
                    for f in frames:
                        self.streams[f.stream].in_flight -= 1
        except BaseException as exc:  # noqa: BLE001 - reported by run()
            self._fail(exc)
        finally:
            self.post.put(END)

    def _finish(self) -> None:
        name = self.steps.names[2]
        try:
            for frames, work, outputs in self._frames(self.post):
                if work:
                    t0 = time.monotonic()
                    self.steps.finish(work, outputs)
                    ms = (time.monotonic() - t0) * 1e3
                    for f in work:
                        f.timings[name] = ms
                for f in frames:  # in the order they came: each stream's stays
                    self.out.put(f)
        except BaseException as exc:  # noqa: BLE001 - reported by run()
            self._fail(exc)
        finally:
            self.out.put(END)

    def _output(self) -> None:
        try:
            for frame in self._frames(self.out):
                t0 = time.monotonic()
                self.sink(frame)
                now = time.monotonic()
                frame.timings["output"] = (now - t0) * 1e3
                frame.timings["end_to_end"] = (now - frame.t_capture) * 1e3
                s = self.streams[frame.stream]
                with self._lock:
                    for name, ms in frame.timings.items():
                        rec = self.timings.get(name)
                        if rec is None:  # made once: a recorder seeds its own random sampler
                            rec = self.timings[name] = LatencyRecorder()
                        rec.add(ms)
                    for name, rec in s.timings.items():
                        rec.add(frame.timings[name])
                    s.processed += 1
                    self.processed += 1
                    s.last_output = now
                    self._outputs_at.append((now, frame.stream))
                for observe in self.observers:  # its timings complete (metrics)
                    observe(frame)
        except BaseException as exc:  # noqa: BLE001 - reported by run()
            self._fail(exc)

    def run(self, started=None) -> None:
        """Run until every stream ends, ``duration`` or ``max_frames``, Ctrl-C or an error.
        ``started()`` is called first thing inside the loop's ``try`` (the caller's held signals
        let go: a stop held until then ends this run as interrupted)."""
        self.started = time.monotonic()
        for s in self.streams:
            s.last_ready = self.started
        captures = self._captures = [self._thread(self._capture, s) for s in self.streams]
        workers = [self._thread(self._prepare, s) for s in self.streams]
        workers += [
            threading.Thread(target=named(self._batcher), name="batcher", daemon=True),
            threading.Thread(target=named(self._finish), name="finish", daemon=True),
            threading.Thread(target=named(self._output), name="output", daemon=True),
        ]
        try:
            if started is not None:
                started()
            for t in captures + workers:
                t.start()
            while any(t.is_alive() for t in workers):
                processes.raise_if_stop_asked()  # an interrupt some code swallowed (the CLI noted it)
                self.heartbeat = time.monotonic()
                self._end_of_duration(self._captures)
                workers[-1].join(0.1)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM through the CLI's handler
            log.info("interrupted: finishing the frames in flight")
            self.interrupted = True
            self._stop()
            for s in self.streams:
                s.source.cancel()
            # stages finish their frame and the output closes within a second; a capture thread
            # stuck in a native call (a stream that does not answer) is left behind (daemon)
            deadline = time.monotonic() + 1.0
            started = [t for t in workers if t.ident is not None]  # a stop while starting them
            for t in started:
                t.join(max(0.0, deadline - time.monotonic()))
            # the output thread (not stuck in native code) finishes its frame before the outputs
            # are closed and the trackers ended from this thread
            if workers[-1] in started:
                workers[-1].join(10.0)
        self.finished = time.monotonic()
        if self.error is not None:
            raise self.error
        failed = [s.error for s in self.streams if s.error is not None]
        if failed and len(failed) == len(self.streams):
            raise failed[0]

    def _thread(self, target, s: Stream) -> threading.Thread:
        name = "capture" if target == self._capture else "prepare"
        return threading.Thread(
            target=named(target), args=(s,), name=f"{name}-{s.index}", daemon=True
        )

    # -- streams added and removed while it runs (a configuration reloaded) ------------------
    def add_stream(self, source, gate=None) -> int:
        """A new stream of ``source`` (its gate, when the streams are gated), started at once;
        its index (never one used before in this run)."""
        with self._ready:
            s = Stream(
                len(self.streams),
                source,
                self._queue_size,
                self._depth,
                self._ready,
                self.steps.discard,
            )
            s.last_ready = time.monotonic()
            if self.gates is not None:
                self.gates.append(gate)
                self.post.grow()  # room for its frames too (see __init__)
                self.out.grow()
            self.streams.append(s)
        capture, prepare = self._thread(self._capture, s), self._thread(self._prepare, s)
        self._captures.append(capture)
        capture.start()
        prepare.start()
        return s.index

    def remove_stream(self, index: int, wait: float = 2.0) -> bool:
        """Stream ``index`` ends as a stream that ran out would (its frames in flight still
        delivered, the others untouched); whether its capture ended within ``wait`` s (its
        source can then be closed; one stuck in a native call is left behind, as at a stop)."""
        s = self.streams[index]
        s.removed.set()
        s.cut = True  # what its capture says now is not a failure
        s.source.cancel()
        capture = self._captures[index] if index < len(self._captures) else None
        if capture is None:
            return True
        capture.join(wait)
        return not capture.is_alive()

    def retire(self, index: int, keep: int = 256) -> bool:
        """What a removed stream holds let go once its last frame is through (its gate, most of
        its latency samples; its counts stay for the summary); whether it was."""
        s = self.streams[index]
        with self._ready:
            if not (s.removed.is_set() and s.ended and s.in_flight == 0):
                return False
        for rec in s.timings.values():
            rec.shrink(keep)
        if self.gates is not None and self.gates[index] is not None:
            s.gate_said, self.gates[index] = self.gates[index].report(), None
        return True

    DURATION_GRACE_S = 1.0  # for a capture to deliver its last frame once the duration is up

    def _end_of_duration(self, captures: list[threading.Thread]) -> None:
        """``duration`` is a promise even while a stream reconnects or waits for a frame: a
        capture still running ``DURATION_GRACE_S`` after it is cut off (its source cancelled,
        its stream ended), so the run ends on time; what it says afterwards is not a failure."""
        if self.duration is None:
            return
        if time.monotonic() - self.started < self.duration + self.DURATION_GRACE_S:
            return
        for s, t in zip(self.streams, captures):
            if t.is_alive() and not s.cut:
                s.cut = True
                s.source.cancel()
                s.raw.put(END)

    # -- numbers ----------------------------------------------------------------------------
    def recent_fps(self, seconds: float = 2.0, stream: int | None = None) -> float:
        """Frames out of the pipeline per second over the last ``seconds`` (of one stream)."""
        since = time.monotonic() - seconds
        with self._lock:
            n = sum(1 for t, k in self._outputs_at if t >= since and stream in (None, k))
        return n / seconds

    def snapshot(self) -> tuple[dict, dict, list]:
        """The latency recorders, batch sizes and (stream, its recorders, frames processed) of
        each stream, taken together under the lock (for :mod:`.pipeline_stats`)."""
        with self._lock:
            return (
                dict(self.timings),
                dict(self.batch_sizes),
                [(s, dict(s.timings), s.processed) for s in self.streams],
            )

    def stats(self, recent: bool = False) -> dict:
        """Counts and latency percentiles of the whole run (or of the recent window), overall and
        per stream, and the batch sizes run (:func:`.pipeline_stats.report`)."""
        return report(self, recent)
