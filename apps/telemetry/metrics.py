"""Prometheus metrics of a camera run or a server, with ``prometheus_client`` (its registry, types
and exposition; nothing hand-formatted).

Names follow Prometheus' conventions: the ``edgert_`` prefix, base units (seconds, watts, joules),
``_total`` on counters. Labels are bounded: a stream's index, a stage, a rail, a line or zone the
user named, a model; never a frame or a track. Counters the pipeline keeps anyway (frames,
drops, reconnects, counts) are read at scrape time by a collector; latencies are observed once
per frame into histograms with millisecond-scale buckets.
"""

from __future__ import annotations

import time

from . import require

# seconds: inference and its stages are milliseconds on a Jetson, seconds when something is wrong
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
STAGES = ("capture_age", "preprocess", "batch_wait", "infer", "postprocess", "output", "end_to_end")


def build_labels(model, precision: str | None = None) -> dict:
    """The build info metric's labels: edgert, backend, precision, TensorRT, device."""
    import sys

    from edgert.runtime.device import edgert_version as version
    from edgert.runtime.device import jetson_info

    engine = getattr(model, "engine", None)
    jetson = jetson_info() or {}
    return {
        "version": version(),
        "backend": str(getattr(model, "backend", None) or getattr(engine, "backend", "")),
        "precision": str(precision or getattr(engine, "precision", None) or "fp32"),
        # only where this process loaded it (the TensorRT backend): never imported for a label
        "tensorrt": str(getattr(sys.modules.get("tensorrt"), "__version__", "")),
        "device": str(jetson.get("model") or _device_name()),
        "task": str(getattr(model, "task", "")),
    }


def _device_name() -> str:
    import platform

    return f"{platform.system()} {platform.machine()}"


class PowerGauges:
    """Power, rails and energy from a :class:`PowerMeter` (and a capped runner's cap and duty)."""

    def __init__(self, meter=None, runner=None) -> None:
        self.meter, self.runner = meter, runner
        self.start = meter.now() if meter is not None else None

    def families(self, per_second: float | None):
        """(power W, rails, energy J since start, J per inference) families; ``per_second``: the
        recent inference rate, for energy per inference."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        out = []
        m = self.meter
        if m is None or m.lost:
            return out
        recent = m.recent_w(2.0)
        if recent is not None:
            out.append(GaugeMetricFamily("edgert_power_watts",
                                         "Board power (the sensor's total), averaged over 2 s",
                                         value=recent))  # fmt: skip
        if m.last is not None and m.last.rails:
            rails = GaugeMetricFamily("edgert_rail_power_watts", "Power of each rail the sensor reads",
                                      labels=["rail"])  # fmt: skip
            for name, watts in m.last.rails.items():
                rails.add_metric([name], watts)
            out.append(rails)
        energy = m.energy_j(self.start, m.now())
        if energy is not None:
            out.append(CounterMetricFamily("edgert_energy_joules", "Energy since edgert started",
                                           value=energy))  # fmt: skip
        if recent is not None and per_second:
            out.append(GaugeMetricFamily("edgert_energy_per_inference_joules",
                                         "Recent board energy per processed frame (one image's inference)",
                                         value=recent / per_second))  # fmt: skip
        r = self.runner
        if r is not None:
            if r.governor is not None:
                out.append(GaugeMetricFamily("edgert_power_cap_watts", "The power cap (--power-cap)",
                                             value=r.governor.cap_w))  # fmt: skip
            out.append(GaugeMetricFamily("edgert_governor_duty_ratio",
                                         "The share of time the governor lets inference run (0-1)",
                                         value=r.duty))  # fmt: skip
        return out


class CameraMetrics:
    """A camera run's registry. ``attach`` gives it the running parts; ``observe(frame)`` from the
    output thread; ``exposition()`` is what /metrics serves."""

    def __init__(self) -> None:
        pc = require("prometheus_client", "--metrics")
        self.pc = pc
        self.registry = pc.CollectorRegistry()
        self.stages = pc.Histogram("edgert_stage_latency_seconds",
                                   "Time of each pipeline stage per frame (end_to_end: capture to output)",
                                   ["stage"], buckets=LATENCY_BUCKETS, registry=self.registry)  # fmt: skip
        self.e2e = pc.Histogram("edgert_stream_latency_seconds",
                                "Capture to output per frame, per stream", ["stream"],
                                buckets=LATENCY_BUCKETS, registry=self.registry)  # fmt: skip
        self.pipeline = None
        self.power: PowerGauges | None = None
        self.analytics = None
        self.mqtt = None
        self.info: dict | None = None
        self.registry.register(_Collector(self))

    def attach(self, pipeline=None, power=None, analytics=None, mqtt=None, info=None) -> None:
        for name, value in (("pipeline", pipeline), ("power", power), ("analytics", analytics),
                            ("mqtt", mqtt), ("info", info)):  # fmt: skip
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
    """The values the pipeline, power meter, counters and MQTT publisher keep, read at scrape."""

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
            info = GaugeMetricFamily("edgert_build_info", "edgert, backend, precision, TensorRT "
                                     "and device of this process", labels=list(m.info))  # fmt: skip
            info.add_metric(list(m.info.values()), 1)
            yield info
        p = m.pipeline
        rate = None
        if p is not None:
            processed = CounterMetricFamily("edgert_frames_processed_total",
                                            "Frames through the whole pipeline", labels=["stream"])  # fmt: skip
            captured = CounterMetricFamily("edgert_frames_captured_total",
                                           "Frames read from the source", labels=["stream"])  # fmt: skip
            dropped = CounterMetricFamily("edgert_frames_dropped_total",
                                          "Frames not processed: dropped from a full queue (queue) "
                                          "or unreadable (decode)", labels=["stream", "reason"])  # fmt: skip
            up = GaugeMetricFamily("edgert_stream_up", "1 while a stream delivers frames",
                                   labels=["stream"])  # fmt: skip
            reconnects = CounterMetricFamily("edgert_stream_reconnects_total",
                                             "Reconnections of a network stream", labels=["stream"])  # fmt: skip
            stalls = CounterMetricFamily("edgert_stream_stalls_total",
                                         "Stalls (connected, no frame for --stall-timeout)",
                                         labels=["stream"])  # fmt: skip
            down = CounterMetricFamily("edgert_stream_downtime_seconds",
                                       "Time a network stream spent without frames", labels=["stream"])  # fmt: skip
            now = time.monotonic()
            for s in p.streams:
                k = str(s.index)
                processed.add_metric([k], s.processed)
                captured.add_metric([k], s.captured)
                dropped.add_metric([k, "queue"], s.dropped)
                dropped.add_metric([k, "decode"], len(getattr(s.source, "failed", None) or ()))
                up.add_metric([k], float(s.delivering(now)))
                stats = getattr(s.source, "connection_stats", None)
                if stats is not None:
                    c = stats()
                    reconnects.add_metric([k], c["reconnects"])
                    stalls.add_metric([k], c["stalls"])
                    down.add_metric([k], c["downtime_s"])
            yield from (processed, captured, dropped, up, reconnects, stalls, down)
            sizes = dict(p.batch_sizes)
            buckets, acc = [], 0
            for bound in BATCH_BUCKETS:
                acc = sum(n for size, n in sizes.items() if size <= bound)
                buckets.append((str(bound), acc))
            total = sum(sizes.values())
            buckets.append(("+Inf", total))
            yield HistogramMetricFamily("edgert_batch_size", "Frames per inference",
                                        buckets=buckets,
                                        sum_value=sum(k * n for k, n in sizes.items()))  # fmt: skip
            rate = p.recent_fps()
        if m.power is not None:
            yield from m.power.families(rate)
        if m.analytics is not None:
            yield from _count_families(m.analytics)
        if m.mqtt is not None:
            r = m.mqtt.report()
            msgs = CounterMetricFamily("edgert_mqtt_messages_total",
                                       "MQTT events delivered to the broker or dropped from the "
                                       "full buffer while it was away", labels=["result"])  # fmt: skip
            msgs.add_metric(["delivered"], r["delivered"])
            msgs.add_metric(["dropped"], r["dropped"])
            yield msgs
            yield GaugeMetricFamily("edgert_mqtt_connected", "1 while connected to the broker",
                                    value=float(r["connected"]))  # fmt: skip
            yield GaugeMetricFamily("edgert_mqtt_buffered_messages",
                                    "Events waiting for the broker", value=r["buffered"])  # fmt: skip


def _count_families(analytics):
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    cross = CounterMetricFamily("edgert_line_crossings_total", "Tracks that crossed a line",
                                labels=["stream", "line", "direction"])  # fmt: skip
    entries = CounterMetricFamily("edgert_zone_entries_total", "Tracks that entered a zone",
                                  labels=["stream", "zone"])  # fmt: skip
    exits = CounterMetricFamily("edgert_zone_exits_total", "Tracks that left a zone",
                                labels=["stream", "zone"])  # fmt: skip
    inside = GaugeMetricFamily("edgert_zone_objects", "Tracks in a zone now",
                               labels=["stream", "zone"])  # fmt: skip
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
