"""A threaded pipeline: capture -> preprocess -> infer -> postprocess -> outputs.

Stages run in their own threads joined by bounded queues that drop the oldest item when full, so a
model slower than the camera never builds a backlog: end-to-end latency stays bounded and the drops
are counted. Every frame carries its timings; the summary has per-stage percentiles.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from edgert.runtime.latency import LatencyRecorder

log = logging.getLogger(__name__)
_END = object()


class DropOldestQueue:
    """A bounded queue whose put() never blocks: when full, the oldest item is dropped (counted).

    ``lossless=True`` (files and folders, where every frame matters and nothing is live) makes
    put() wait for room instead.
    """

    def __init__(self, maxsize: int = 1, lossless: bool = False) -> None:
        self._items: collections.deque = collections.deque()
        self.maxsize = max(1, maxsize)
        self.lossless = lossless
        self.dropped = 0
        self._cond = threading.Condition()

    def put(self, item) -> None:
        with self._cond:
            if self.lossless and item is not _END:
                self._cond.wait_for(lambda: len(self._items) < self.maxsize)
            elif item is not _END:
                while len(self._items) >= self.maxsize:
                    old = self._items.popleft()
                    if old is _END:  # never drop the end marker
                        self._items.appendleft(old)
                        break
                    self.dropped += 1
            self._items.append(item)
            self._cond.notify()

    def get(self, timeout: float | None = None):
        with self._cond:
            if not self._cond.wait_for(lambda: self._items, timeout):
                raise queue.Empty
            item = self._items.popleft()
            self._cond.notify_all()
            return item


@dataclass
class Frame:
    index: int
    t_capture: float
    image: np.ndarray
    tensor: object = None
    transform: object = None
    outputs: dict | None = None
    results: object = None
    timings: dict[str, float] = field(default_factory=dict)  # stage -> ms


@dataclass
class Stage:
    name: str
    fn: Callable[[Frame], None]


class Pipeline:
    def __init__(
        self,
        source,
        stages: list[Stage],
        sink: Callable[[Frame], None],
        queue_size: int = 1,
        duration: float | None = None,
        max_frames: int | None = None,
    ) -> None:
        self.source = source
        self.stages = stages
        self.sink = sink
        self.duration = duration
        self.max_frames = max_frames
        lossless = not getattr(source, "live", True)
        self.queues = [DropOldestQueue(queue_size, lossless) for _ in range(len(stages) + 1)]
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        # bounded: a camera left on for days keeps a fixed-size reservoir and window per stage
        self.timings: dict[str, LatencyRecorder] = {
            s.name: LatencyRecorder()
            for s in [Stage("capture_age", None), *stages, Stage("output", None)]
        }
        self.timings["end_to_end"] = LatencyRecorder()
        self.interrupted = False
        self.captured = 0
        self.processed = 0
        self.started = 0.0
        self.finished = 0.0
        self._lock = threading.Lock()

    @property
    def dropped(self) -> int:
        return sum(q.dropped for q in self.queues)

    def _fail(self, exc: BaseException) -> None:
        if self.interrupted:  # e.g. a source told to stop while connecting: not a failure
            return
        if self.error is None:
            self.error = exc
        self.stop_event.set()

    def _capture(self) -> None:
        try:
            i = 0
            while not self.stop_event.is_set():
                if self.max_frames is not None and i >= self.max_frames:
                    break
                if self.duration is not None and time.monotonic() - self.started >= self.duration:
                    break
                got = self.source.read()
                if got is None:
                    break
                image, t = got
                self.queues[0].put(Frame(i, t, image))
                i += 1
                self.captured = i
        except BaseException as exc:  # noqa: BLE001 - reported by run()
            self._fail(exc)
        finally:
            self.queues[0].put(_END)

    def _frames(self, q_in: DropOldestQueue):
        """Frames from ``q_in`` until the end marker, or until another thread failed."""
        while True:
            try:
                frame = q_in.get(timeout=0.1)
            except queue.Empty:
                if self.stop_event.is_set():  # a failure or Ctrl-C: what was queued is done
                    return
                continue
            if frame is _END:
                return
            yield frame

    def _stage(self, k: int) -> None:
        stage, q_in, q_out = self.stages[k], self.queues[k], self.queues[k + 1]
        try:
            for frame in self._frames(q_in):
                if k == 0:
                    frame.timings["capture_age"] = (time.monotonic() - frame.t_capture) * 1e3
                t0 = time.monotonic()
                stage.fn(frame)
                frame.timings[stage.name] = (time.monotonic() - t0) * 1e3
                q_out.put(frame)
        except BaseException as exc:  # noqa: BLE001 - reported by run()
            self._fail(exc)
        finally:
            q_out.put(_END)

    def _output(self) -> None:
        try:
            for frame in self._frames(self.queues[-1]):
                t0 = time.monotonic()
                self.sink(frame)
                now = time.monotonic()
                frame.timings["output"] = (now - t0) * 1e3
                frame.timings["end_to_end"] = (now - frame.t_capture) * 1e3
                with self._lock:
                    for name, ms in frame.timings.items():
                        self.timings.setdefault(name, LatencyRecorder()).add(ms)
                    self.processed += 1
        except BaseException as exc:  # noqa: BLE001 - reported by run()
            self._fail(exc)

    def run(self) -> None:
        """Run until the source ends, ``duration`` or ``max_frames``, Ctrl-C or an error."""
        self.started = time.monotonic()
        threads = [threading.Thread(target=self._capture, name="capture", daemon=True)]
        threads += [
            threading.Thread(target=self._stage, args=(k,), name=s.name, daemon=True)
            for k, s in enumerate(self.stages)
        ]
        threads.append(threading.Thread(target=self._output, name="output", daemon=True))
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                threads[-1].join(0.1)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM through the CLI's handler
            log.info("interrupted: finishing the frames in flight")
            self.interrupted = True
            self.stop_event.set()
            self.source.cancel()
            # stages finish their frame and the output closes within a second; a capture thread
            # stuck in a native call (a stream that does not answer) is left behind (daemon)
            deadline = time.monotonic() + 1.0
            for t in threads[1:]:
                t.join(max(0.0, deadline - time.monotonic()))
        self.finished = time.monotonic()
        if self.error is not None:
            raise self.error

    def stats(self, recent: bool = False) -> dict:
        """Counts and per-stage latency percentiles of the whole run (or of the recent window);
        the cost does not grow with the run's length."""
        elapsed = max(1e-9, (self.finished or time.monotonic()) - self.started)
        with self._lock:
            recorders = dict(self.timings)
        lat = {}
        for name, rec in recorders.items():
            summary = rec.summary(recent)
            if summary:
                lat[name] = {k: summary[k] for k in ("p50", "p90", "p99", "max", "mean")}
        return {
            "frames_captured": self.captured,
            "frames_processed": self.processed,
            "frames_dropped": self.dropped,
            "seconds": elapsed,
            "fps": self.processed / elapsed,
            "latency_ms": lat,
        }
