"""The camera pipeline's numbers: counts, rates and latency percentiles of the whole run (or of
the recent window), overall and per stream, and the batch sizes run; the cost does not grow with
the run's length."""

from __future__ import annotations

import time

from edgert.runtime.tasks.detection import dropped_count

from .sources.base import stats_of


def report(pipeline, recent: bool = False) -> dict:
    """Counts and latency percentiles of the whole run (or of the recent window), overall and
    per stream, and the batch sizes run; the cost does not grow with the run's length."""
    elapsed = max(1e-9, (pipeline.finished or time.monotonic()) - pipeline.started)
    recorders, sizes, per_stream = pipeline.snapshot()
    batches = sum(sizes.values())
    stopped = {"stopped": "interrupted (Ctrl-C or SIGTERM)"} if pipeline.interrupted else {}
    broken = dropped_count()  # a broken model's NaN / inf / impossible-class candidates
    return {
        **stopped,
        "frames_captured": pipeline.captured,
        "frames_processed": pipeline.processed,
        "frames_dropped": pipeline.dropped,
        **({"candidates_dropped_broken": broken} if broken else {}),
        "seconds": elapsed,
        "fps": pipeline.processed / elapsed,
        "latency_ms": _percentiles(recorders, recent),
        "batch": {
            "max": pipeline.batch,
            "timeout_ms": round(pipeline.batch_timeout * 1e3, 3),
            "batches": batches,
            "mean": sum(k * v for k, v in sizes.items()) / batches if batches else 0.0,
            "histogram": {str(k): sizes[k] for k in sorted(sizes)},
        },
        "streams": [
            {
                "stream": s.index,
                "source": describe(s.source),
                "status": s.status,
                "frames_captured": s.captured,
                "frames_processed": processed,
                "frames_dropped": s.dropped,
                "fps": processed / elapsed,
                "camera_s": s.camera_seconds(),
                **({"frames_scaled": s.scaled} if s.scaled else {}),
                **({"frames_viewed": s.viewed} if s.viewed else {}),
                "latency_ms": _percentiles(timings, recent),
                **stats_of(s.source),
                **_now(pipeline, s, recent),
                **({"gate": _gate(pipeline, s)} if pipeline.gates is not None else {}),
            }
            for s, timings, processed in per_stream
        ],
    }


def _now(pipeline, s, recent: bool) -> dict:
    """For the live statistics: whether the stream delivers now, its rate over 5 s."""
    if not recent:
        return {}
    return {
        "delivering": s.delivering(time.monotonic()),
        "fps_recent": pipeline.recent_fps(5.0, s.index),
    }


def _percentiles(recorders: dict, recent: bool) -> dict:
    out = {}
    for name, rec in recorders.items():
        summary = rec.summary(recent)
        if summary:
            out[name] = {k: summary[k] for k in ("p50", "p90", "p95", "p99", "max", "mean")}
    return out


def describe(source) -> str:
    return getattr(source, "description", type(source).__name__)


def _gate(pipeline, s) -> dict | None:
    """A stream's gate's report (a removed stream's, as it was when its gate was let go)."""
    gate = pipeline.gates[s.index]
    return gate.report() if gate is not None else s.gate_said
