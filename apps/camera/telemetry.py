"""A camera run's telemetry: Prometheus metrics and the /live and /ready probes (``--metrics``,
and on the web viewer's port), MQTT events and heartbeats (``--mqtt``). Started before the
model loads (so /ready says 503 while it does), closed on every path."""

from __future__ import annotations

import logging
import time

from edgert.runtime.errors import MissingDependency

log = logging.getLogger(__name__)


class MqttOutput:
    """Tracking and counting events to MQTT, as an output (so the end-of-run events reach it)."""

    draws = False  # takes no picture

    def __init__(self, publisher) -> None:
        self.publisher = publisher

    def write(self, frame, overlay_image, record: dict) -> None:
        self.write_events(frame.events)

    def write_events(self, events: list) -> None:
        for event in events:
            self.publisher.publish_event(event)

    def close(self) -> None:
        self.publisher.close()

    def report(self) -> dict:
        return {"output": "mqtt", **self.publisher.report()}


class CameraTelemetry:
    def __init__(self, cfg, say=lambda s: None) -> None:
        from edgert.apps.telemetry.http import Probes, ProbeServer, parse_address
        from edgert.apps.telemetry.metrics import CameraMetrics

        self.cfg = cfg
        self.metrics = None
        self.server = None
        self.mqtt = None
        self.model_loaded = False
        self.pipeline = None
        self.started = time.monotonic()
        target = None
        if cfg.mqtt:
            from edgert.apps.telemetry import require
            from edgert.apps.telemetry.mqtt import parse_uri

            target = parse_uri(cfg.mqtt)  # a wrong URI or a missing paho before anything starts
            require("paho.mqtt.client", "--mqtt")
        address = parse_address(cfg.metrics) if cfg.metrics else None
        web = any(u.startswith("http://") for u in cfg.outputs)
        if address is not None or web:
            try:
                self.metrics = CameraMetrics()
            except MissingDependency:
                if address is not None:
                    raise
                log.info("the web viewer serves no /metrics: prometheus_client is not installed")
        self.probes = Probes(
            self.metrics.exposition if self.metrics else None, self.live, self.ready
        )
        try:
            if address is not None:
                self.server = ProbeServer(*address, self.probes)
                say(f"metrics: {self.server.url}/metrics (probes: /live, /ready)")
            if target is not None:
                from edgert.apps.telemetry.mqtt import MqttPublisher, TlsOptions

                tls = TlsOptions(cfg.mqtt_ca, cfg.mqtt_cert, cfg.mqtt_key, cfg.mqtt_insecure)
                self.mqtt = MqttPublisher(target, cfg.mqtt_buffer, tls=tls,
                                          client_id=cfg.mqtt_client_id,
                                          protocol=cfg.mqtt_protocol)  # fmt: skip
                say(f"mqtt: {target.shown} (events on {self.mqtt.topic_events}, "
                    f"status on {self.mqtt.topic_status})")  # fmt: skip
        except BaseException:
            self.close()
            raise

    # -- the run's parts, as they come ---------------------------------------------------------
    def loaded(self, model) -> None:
        from edgert.apps.telemetry.metrics import build_labels

        self.model_loaded = True
        if self.metrics is not None:
            self.metrics.attach(info=build_labels(model, self.cfg.precision
                                                  if self.cfg.precision != "auto" else None))  # fmt: skip

    def attach(self, pipeline, power, analytics) -> None:
        from edgert.apps.telemetry.metrics import PowerGauges

        self.pipeline = pipeline
        self.power = power
        if self.metrics is not None:
            pipeline.observers.append(self.metrics.observe)
            self.metrics.attach(pipeline=pipeline, power=PowerGauges(power.meter, power.runner),
                                analytics=analytics, mqtt=self.mqtt)  # fmt: skip
        if self.mqtt is not None and self.cfg.mqtt_heartbeat:
            self.mqtt.start_heartbeat(self.cfg.mqtt_heartbeat, self.heartbeats)

    def outputs(self) -> list:
        return [MqttOutput(self.mqtt)] if self.mqtt is not None else []

    # -- probes and heartbeats ----------------------------------------------------------------
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
            return False, {"reason": "no stream has delivered a frame in the last 5 s",
                           "streams": len(p.streams)}  # fmt: skip
        return True, {"streams": len(p.streams), "delivering": delivering}

    def heartbeats(self) -> list[dict]:
        s = self.power.live(self.pipeline.stats(recent=True))
        meter = self.power.meter
        energy = meter.energy_j(self.started, meter.now()) if meter and not meter.lost else None
        now = time.monotonic()
        beats = []
        for st, stream in zip(s["streams"], self.pipeline.streams):
            e2e = st["latency_ms"].get("end_to_end", {})
            beats.append({"stream": st["stream"], "time": round(time.time(), 3),
                          "fps": round(self.pipeline.recent_fps(5.0, stream.index), 2),
                          "frames_processed": st["frames_processed"],
                          "frames_dropped": st["frames_dropped"],
                          "latency_p99_ms": e2e.get("p99"), "power_w": s.get("power_w"),
                          "energy_j": energy,
                          "status": ("delivering" if stream.delivering(now) else st["status"]),
                          **{k: st[k] for k in ("reconnects", "connection") if k in st}})  # fmt: skip
        return beats

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def report(self) -> dict:
        out: dict = {}
        if self.server is not None:
            out["metrics"] = f"{self.server.url}/metrics"
        return out
