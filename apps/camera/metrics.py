"""A camera run's metrics and probes (``--metrics``, and on the web viewer's port): Prometheus
families read from the pipeline, the power session, the counters and the sinks at scrape time,
stage latencies observed per frame; ``/live`` while the pipeline's loop turns, ``/ready`` while a
stream delivers. Started before the model loads (so /ready says 503 while it does), closed on
every path. The registry and the exposition are :mod:`edgert.apps.telemetry`'s; what is read
here is the camera's own, as Frigate keeps its camera metrics with the camera."""

from __future__ import annotations

import logging
import time

from edgert.apps.telemetry import require
from edgert.apps.telemetry.metrics import BATCH_BUCKETS, LATENCY_BUCKETS, STAGES
from edgert.runtime.errors import MissingDependency

from .sources.base import stats_of

log = logging.getLogger(__name__)


class CameraMetrics:
    """A camera run's registry. ``attach`` gives it the running parts; ``observe(frame)`` from the
    output thread; ``exposition()`` is what /metrics serves."""

    def __init__(self) -> None:
        pc = require("prometheus_client", "--metrics")
        self.pc = pc
        self.registry = pc.CollectorRegistry()
        self.stages = pc.Histogram(
            "edgert_stage_latency_seconds",
            "Time of each pipeline stage per frame (end_to_end: capture to output)",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.e2e = pc.Histogram(
            "edgert_stream_latency_seconds",
            "Capture to output per frame, per stream",
            ["stream"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.pipeline = None
        self.sinks: list = []
        self.info: dict | None = None
        self.families = None  # () -> every camera feature's families (Feature.families)
        self.registry.register(_Collector(self))

    def attach(self, pipeline=None, sinks=None, info=None, families=None) -> None:
        for name, value in (
            ("pipeline", pipeline),
            ("sinks", sinks),
            ("info", info),
            ("families", families),
        ):
            if value is not None:
                setattr(self, name, value)

    def observe(self, frame) -> None:
        for stage, ms in frame.timings.items():
            if stage in STAGES:
                self.stages.labels(stage).observe(ms / 1e3)
        if "end_to_end" in frame.timings:
            self.e2e.labels(str(frame.stream)).observe(frame.timings["end_to_end"] / 1e3)

    def exposition(self) -> tuple[bytes, str]:
        return self.pc.generate_latest(self.registry), self.pc.CONTENT_TYPE_LATEST


class _Collector:
    """The values the pipeline, power meter, counters and sinks keep, read at scrape."""

    def __init__(self, metrics: CameraMetrics) -> None:
        self.m = metrics

    def describe(self):
        return []  # values appear once the run has them

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        m = self.m
        if m.info is not None:
            info = GaugeMetricFamily(
                "edgert_build_info",
                "edgert, backend, precision, TensorRT and device of this process",
                labels=list(m.info),
            )
            info.add_metric(list(m.info.values()), 1)
            yield info
        if m.pipeline is not None:
            yield from _stream_families(m.pipeline)
            yield _batch_family(m.pipeline)
        if m.families is not None:
            yield from m.families()
        for sink in m.sinks:
            yield from sink.metrics()


def _stream_families(p):
    """Each stream's frames processed, captured and dropped, whether it delivers, and a network
    stream's reconnects, stalls and time without frames."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    processed = CounterMetricFamily(
        "edgert_frames_processed_total", "Frames through the whole pipeline", labels=["stream"]
    )
    captured = CounterMetricFamily(
        "edgert_frames_captured_total", "Frames read from the source", labels=["stream"]
    )
    dropped = CounterMetricFamily(
        "edgert_frames_dropped_total",
        "Frames not processed: dropped from a full queue (queue) or unreadable (decode)",
        labels=["stream", "reason"],
    )
    up = GaugeMetricFamily(
        "edgert_stream_up", "1 while a stream delivers frames", labels=["stream"]
    )
    reconnects = CounterMetricFamily(
        "edgert_stream_reconnects_total", "Reconnections of a network stream", labels=["stream"]
    )
    stalls = CounterMetricFamily(
        "edgert_stream_stalls_total",
        "Stalls (connected, no frame for --stall-timeout)",
        labels=["stream"],
    )
    down = CounterMetricFamily(
        "edgert_stream_downtime_seconds",
        "Time a network stream spent without frames",
        labels=["stream"],
    )
    now = time.monotonic()
    for s in p.streams:
        k = str(s.index)
        processed.add_metric([k], s.processed)
        captured.add_metric([k], s.captured)
        dropped.add_metric([k, "queue"], s.dropped)
        c = stats_of(s.source)
        dropped.add_metric([k, "decode"], c.get("images_failed", 0))
        up.add_metric([k], float(s.delivering(now)))
        if "reconnects" in c:
            reconnects.add_metric([k], c["reconnects"])
            stalls.add_metric([k], c["stalls"])
            down.add_metric([k], c["downtime_s"])
    return [processed, captured, dropped, up, reconnects, stalls, down]


def _batch_family(p):
    """Frames per inference, as a histogram."""
    from prometheus_client.core import HistogramMetricFamily

    sizes = dict(p.batch_sizes)
    buckets, acc = [], 0
    for bound in BATCH_BUCKETS:
        acc = sum(n for size, n in sizes.items() if size <= bound)
        buckets.append((str(bound), acc))
    buckets.append(("+Inf", sum(sizes.values())))
    return HistogramMetricFamily(
        "edgert_batch_size",
        "Frames per inference",
        buckets=buckets,
        sum_value=sum(k * n for k, n in sizes.items()),
    )


class CameraProbes:
    """The run's metrics registry (when asked for, or a web viewer can serve it), its probe
    server (``--metrics [HOST:]PORT``) and the answers of /live and /ready."""

    def __init__(self, address: str | None, web: bool, say=lambda s: None) -> None:
        from edgert.apps.telemetry.http import Probes, ProbeServer, parse_address

        self.metrics = None
        self.server = None
        self.model_loaded = False
        # more conditions of readiness, each () -> None (no objection) or (False, why): the
        # swap's canary check (--check-against)
        self.conditions: list = []
        self.pipeline = None
        where = parse_address(address) if address else None
        if where is not None or web:
            try:
                self.metrics = CameraMetrics()
            except MissingDependency:
                if where is not None:
                    raise
                log.info("the web viewer serves no /metrics: prometheus_client is not installed")
        self.probes = Probes(
            self.metrics.exposition if self.metrics else None, self.live, self.ready
        )
        if where is not None:
            self.server = ProbeServer(*where, self.probes)
            say(f"metrics: {self.server.url}/metrics (probes: /live, /ready)")

    def loaded(self, model, precision: str | None) -> None:
        from edgert.apps.telemetry.metrics import build_labels

        self.model_loaded = True
        if self.metrics is not None:
            self.metrics.attach(info=build_labels(model, precision))

    def attach(self, pipeline, **parts) -> None:
        """The pipeline, and the run's parts the registry reads (``CameraMetrics.attach``'s
        arguments: the sinks, every camera feature's ``families``)."""
        self.pipeline = pipeline
        if self.metrics is not None:
            pipeline.observers.append(self.metrics.observe)
            self.metrics.attach(pipeline=pipeline, **parts)

    def live(self) -> tuple[bool, dict]:
        p = self.pipeline
        if p is None or p.heartbeat is None:
            return True, {"phase": "starting"}
        age = time.monotonic() - p.heartbeat
        return age < 10.0, {"phase": "running", "loop_age_s": round(age, 3)}

    def ready(self) -> tuple[bool, dict]:
        if not self.model_loaded:
            return False, {"reason": "the model is loading"}
        p = self.pipeline
        if p is None or p.heartbeat is None:
            return False, {"reason": "the pipeline is starting"}
        now = time.monotonic()
        delivering = [s.index for s in p.streams if s.delivering(now)]
        if not delivering:
            return False, {
                "reason": "no stream has delivered a frame in the last 5 s",
                "streams": len(p.streams),
            }
        for condition in self.conditions:
            objection = condition()
            if objection is not None:
                return objection
        return True, {"streams": len(p.streams), "delivering": delivering}

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def report(self) -> dict:
        return {"metrics": f"{self.server.url}/metrics"} if self.server is not None else {}
