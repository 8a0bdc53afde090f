"""One stream of the pipeline (:mod:`.pipeline`): its queues, counts, timings and how it ended."""

from __future__ import annotations

import threading
import time

from edgert.runtime.latency import LatencyRecorder

from .queues import DropOldestQueue

STALLED_S = 1.0  # a stream silent this long is not waited for (it is still polled)


class Stream:
    """One source's state: its queues, counts, timings and how it ended."""

    def __init__(self, index: int, source, queue_size: int, depth: int, cond, discard=None) -> None:
        self.index = index
        self.source = source
        lossless = not getattr(source, "live", True)  # files and folders: every frame
        self.raw = DropOldestQueue(queue_size, lossless)
        # a lossless stream may give several frames to one batch: room for its share
        self.ready = DropOldestQueue(  # a prepared frame dropped is discarded by the steps
            max(queue_size, depth) if lossless else queue_size, lossless, cond, discard
        )
        self.captured = 0
        self.scaled = 0  # frames the decoder gave at the model's size (--decoder-scale)
        self.viewed = 0  # of those, frames that came with the full picture for a viewer
        self.processed = 0
        self.ended = False  # the batcher saw its end marker
        self.error: BaseException | None = None
        self.cut = False  # its capture was cut off at the end of --duration (still connecting)
        self.last_ready = time.monotonic()
        self.last_work = time.monotonic()  # its last frame that went to inference
        self.last_output: float | None = None  # when its last frame left the pipeline
        self.timings = {"capture_age": LatencyRecorder(), "end_to_end": LatencyRecorder()}
        self.scene = [None, None]  # its first and last frame's scene time (camera time covered)
        self.in_flight = 0  # its frames the batcher took and has not yet handed on
        self.removed = threading.Event()  # a reload took its camera away: its capture ends
        self.gate_said: dict | None = None  # its gate's report, once a removed stream let it go

    def camera_seconds(self) -> float:
        """The camera time its frames covered (a live camera's wall time, a video's own time),
        one frame interval added for the last frame's own."""
        first, last = self.scene
        if first is None:
            return 0.0
        return (last - first) * (1 + 1 / max(1, self.captured - 1))

    def delivering(self, now: float, window: float = 5.0) -> bool:
        """Whether a frame of this stream left the pipeline in the last ``window`` seconds."""
        return self.last_output is not None and now - self.last_output < window

    @property
    def dropped(self) -> int:
        return self.raw.dropped + self.ready.dropped

    @property
    def status(self) -> str:
        if self.error is not None:
            return f"failed: {self.error}"
        if self.removed.is_set():
            return "removed"
        return "ended" if self.ended else "running"
