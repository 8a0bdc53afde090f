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
from edgert.apps.telemetry.metrics import BATCH_BUCKETS, LATENCY_BUCKETS, STAGES, PowerGauges
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
        self.power: PowerGauges | None = None
        self.analytics = None
        self.sinks: list = []
        self.info: dict | None = None
        self.slot = None  # swap.ModelSlot: the model in use, its swaps and rollbacks
        self.secondary = None  # secondary.SecondaryStage: the second-stage models' counts
        self.registry.register(_Collector(self))

    def attach(
        self,
        pipeline=None,
        power=None,
        analytics=None,
        sinks=None,
        info=None,
        slot=None,
        secondary=None,
    ) -> None:
        for name, value in (
            ("pipeline", pipeline),
            ("power", power),
            ("analytics", analytics),
            ("sinks", sinks),
            ("info", info),
            ("slot", slot),
            ("secondary", secondary),
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


def _model_families(slot, gauge, counter):
    """The model in use (``edgert_model_info``, as Prometheus' *_info convention has it) and the
    swaps, rollbacks and refused swaps of the run."""
    info = slot.current.info
    model = gauge(
        "edgert_model_info",
        "The model in use: its name, version and bundle hash",
        labels=list(info),
    )
    model.add_metric([str(v) for v in info.values()], 1)
    yield model
    for name, value, what in slot.counters():
        family = counter(name, what)
        family.add_metric([], value)
        yield family


class _Collector:
    """The values the pipeline, power meter, counters and sinks keep, read at scrape."""

    def __init__(self, metrics: CameraMetrics) -> None:
        self.m = metrics

    def describe(self):
        return []  # values appear once the run has them

    def collect(self):
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        m = self.m
        if m.info is not None:
            info = GaugeMetricFamily(
                "edgert_build_info",
                "edgert, backend, precision, TensorRT and device of this process",
                labels=list(m.info),
            )
            info.add_metric(list(m.info.values()), 1)
            yield info
        if m.slot is not None:
            yield from _model_families(m.slot, GaugeMetricFamily, CounterMetricFamily)
        p = m.pipeline
        rate = None
        if p is not None:
            processed = CounterMetricFamily(
                "edgert_frames_processed_total",
                "Frames through the whole pipeline",
                labels=["stream"],
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
                "edgert_stream_reconnects_total",
                "Reconnections of a network stream",
                labels=["stream"],
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
            yield from (processed, captured, dropped, up, reconnects, stalls, down)
            if p.gates is not None:
                yield from _gate_families(p.gates)
            sizes = dict(p.batch_sizes)
            buckets, acc = [], 0
            for bound in BATCH_BUCKETS:
                acc = sum(n for size, n in sizes.items() if size <= bound)
                buckets.append((str(bound), acc))
            total = sum(sizes.values())
            buckets.append(("+Inf", total))
            yield HistogramMetricFamily(
                "edgert_batch_size",
                "Frames per inference",
                buckets=buckets,
                sum_value=sum(k * n for k, n in sizes.items()),
            )
            rate = p.recent_fps()
        if m.power is not None:
            yield from m.power.families(rate)
        if m.analytics is not None:
            yield from _count_families(m.analytics)
        if m.secondary is not None:
            yield from _secondary_families(m.secondary)
        for sink in m.sinks:
            yield from sink.metrics()


def _secondary_families(stage):
    """Second-stage models: calls, crops, crops refused for size and dropped from the full
    queue, and attempts per track (the tracks attempted so far), per model."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    families = {
        "calls": CounterMetricFamily(
            "edgert_secondary_calls_total", "Inference calls of a secondary model", labels=["model"]
        ),
        "crops": CounterMetricFamily(
            "edgert_secondary_crops_total", "Crops a secondary model ran on", labels=["model"]
        ),
        "refused_size": CounterMetricFamily(
            "edgert_secondary_refused_total",
            "Candidate crops refused (reason: size, under the secondary's min; not_finite, a "
            "box or answer NaN or inf; memory, the held crops' bound)",
            labels=["model", "reason"],
        ),
        "dropped": CounterMetricFamily(
            "edgert_secondary_dropped_total",
            "Crops dropped from the secondary's full queue (the lowest quality first)",
            labels=["model"],
        ),
        "tracks_attempted": CounterMetricFamily(
            "edgert_secondary_tracks_total", "Tracks a secondary model was run on", labels=["model"]
        ),
        "attempts_per_track": GaugeMetricFamily(
            "edgert_secondary_calls_per_track",
            "Mean attempts per track attempted (crops per track)",
            labels=["model"],
        ),
    }
    for r in stage.report():
        for key, family in families.items():
            labels = [r["name"], "size"] if key == "refused_size" else [r["name"]]
            family.add_metric(labels, r[key])
        for reason in ("not_finite", "memory"):
            key = "not_finite" if reason == "not_finite" else "refused_memory"
            families["refused_size"].add_metric([r["name"], reason], r[key])
    yield from families.values()


def _gate_families(gates):
    """Event-gated inference: frames sent to inference per stream and reason, frames skipped."""
    from prometheus_client.core import CounterMetricFamily

    inferred = CounterMetricFamily(
        "edgert_frames_inferred_total",
        "Frames the gate sent to inference, by reason (motion, tracks, geometry, keyframe, ...)",
        labels=["stream", "reason"],
    )
    skipped = CounterMetricFamily(
        "edgert_frames_skipped_total",
        "Frames the gate skipped (their results predicted)",
        labels=["stream"],
    )
    for i, gate in enumerate(gates):
        r = gate.report()
        for reason, n in r["reasons"].items():
            inferred.add_metric([str(i), reason], n)
        skipped.add_metric([str(i)], r["skipped"])
    return [inferred, skipped]


def _count_families(analytics):
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    cross = CounterMetricFamily(
        "edgert_line_crossings_total",
        "Tracks that crossed a line",
        labels=["stream", "line", "direction"],
    )
    entries = CounterMetricFamily(
        "edgert_zone_entries_total", "Tracks that entered a zone", labels=["stream", "zone"]
    )
    exits = CounterMetricFamily(
        "edgert_zone_exits_total", "Tracks that left a zone", labels=["stream", "zone"]
    )
    inside = GaugeMetricFamily(
        "edgert_zone_objects", "Tracks in a zone now", labels=["stream", "zone"]
    )
    for stream in range(len(analytics.streams)):
        k = str(stream)
        for name, c in analytics.counts(stream).items():
            if c["type"] == "line":
                cross.add_metric([k, name, "in"], c["in"])
                cross.add_metric([k, name, "out"], c["out"])
            else:
                entries.add_metric([k, name], c["entries"])
                exits.add_metric([k, name], c["exits"])
                inside.add_metric([k, name], c["occupancy"])
    return [cross, entries, exits, inside]


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
        arguments: each camera feature's ``metrics()``, the sinks)."""
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
