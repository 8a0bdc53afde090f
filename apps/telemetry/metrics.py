"""What Prometheus metrics of edgert share, with ``prometheus_client`` (its registry, types and
exposition; nothing hand-formatted): the build info's labels, the power gauges, the buckets. The
camera's own families are :mod:`edgert.apps.camera.metrics`; the server's
:mod:`edgert.apps.telemetry.serving`.

Names follow Prometheus' conventions: the ``edgert_`` prefix, base units (seconds, watts, joules),
``_total`` on counters. Labels are bounded: a stream's index, a stage, a rail, a line or zone the
user named, a model; never a frame or a track. Counters the pipeline keeps anyway (frames,
drops, reconnects, counts) are read at scrape time by a collector; latencies are observed once
per frame into histograms with millisecond-scale buckets.
"""

from __future__ import annotations

# seconds: inference and its stages are milliseconds on a Jetson, seconds when something is wrong
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
STAGES = ("capture_age", "preprocess", "batch_wait", "infer", "postprocess", "output", "end_to_end")


def build_labels(model, precision: str | None = None) -> dict:
    """The build info metric's labels: edgert, backend, precision, TensorRT, device."""
    import sys

    from edgert.runtime.device import edgert_version, jetson_info

    engine = getattr(model, "engine", None)
    jetson = jetson_info() or {}
    return {
        "version": edgert_version(),
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
            out.append(
                GaugeMetricFamily(
                    "edgert_power_watts",
                    "Board power (the sensor's total), averaged over 2 s",
                    value=recent,
                )
            )
        if m.last is not None and m.last.rails:
            rails = GaugeMetricFamily(
                "edgert_rail_power_watts", "Power of each rail the sensor reads", labels=["rail"]
            )
            for name, watts in m.last.rails.items():
                rails.add_metric([name], watts)
            out.append(rails)
        energy = m.energy_j(self.start, m.now())
        if energy is not None:
            out.append(
                CounterMetricFamily(
                    "edgert_energy_joules", "Energy since edgert started", value=energy
                )
            )
        if recent is not None and per_second:
            out.append(
                GaugeMetricFamily(
                    "edgert_energy_per_inference_joules",
                    "Recent board energy per processed frame (one image's inference)",
                    value=recent / per_second,
                )
            )
        r = self.runner
        if r is not None:
            if r.governor is not None:
                out.append(
                    GaugeMetricFamily(
                        "edgert_power_cap_watts",
                        "The power cap (--power-cap)",
                        value=r.governor.cap_w,
                    )
                )
            out.append(
                GaugeMetricFamily(
                    "edgert_governor_duty_ratio",
                    "The share of time the governor lets inference run (0-1)",
                    value=r.duty,
                )
            )
        return out
