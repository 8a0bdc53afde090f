"""``--mqtt URI`` (or ``--output mqtt[s]://...``): track and counting events to an MQTT broker
(QoS 1, buffered while it is away), heartbeats per stream on the sink's own clock, and the
retained online/offline status with a Last Will (:mod:`edgert.apps.telemetry.mqtt`). Its options
(buffer, heartbeat, TLS files, client id, protocol) are its own group."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from .base import Sink, SinkContext


@dataclass(frozen=True)
class MqttOptions:
    buffer: int = 1000  # events kept while the broker is away
    heartbeat: float = 10.0  # seconds between heartbeats (0: none)
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    insecure: bool = False
    client_id: str | None = None
    protocol: str = "5"  # 5 | 3.1.1

    @staticmethod
    def add_arguments(group) -> None:
        from edgert.apps.argtypes import positive_int

        group.add_argument(
            "--mqtt",
            metavar="URI",
            help="mqtt://[user:pass@]host[:port]/PREFIX (mqtts:// for TLS; ${EDGERT_NAME} from "
            "the environment; the same as --output mqtt://...): events on PREFIX/events (QoS "
            "1), heartbeats on PREFIX/streams/N/heartbeat, PREFIX/status online/offline "
            "(retained, with a Last Will)",
        )
        group.add_argument(
            "--mqtt-buffer",
            type=positive_int,
            default=1000,
            metavar="N",
            help="events kept while the broker is away, the oldest dropped first; while it "
            "is connected a full buffer waits, nothing is dropped (default 1000)",
        )
        group.add_argument(
            "--mqtt-heartbeat",
            type=_heartbeat,
            default=10.0,
            metavar="S",
            help="seconds between heartbeats (0: none; at least 0.5; default 10)",
        )
        group.add_argument(
            "--mqtt-protocol",
            choices=["5", "3.1.1"],
            default="5",
            help="MQTT 5 (default: the broker's refusal of an event is seen) or 3.1.1",
        )
        group.add_argument(
            "--mqtt-ca", metavar="FILE", help="mqtts: the CA bundle (default: the system's)"
        )
        group.add_argument("--mqtt-cert", metavar="FILE", help="mqtts: a client certificate")
        group.add_argument("--mqtt-key", metavar="FILE", help="mqtts: its key")
        group.add_argument(
            "--mqtt-insecure",
            action="store_true",
            help="mqtts: do not check the broker's host name",
        )
        group.add_argument(
            "--mqtt-client-id",
            metavar="ID",
            help="default: edgert-HOSTNAME- and 8 random hex digits",
        )

    @classmethod
    def from_args(cls, args) -> MqttOptions:
        return cls(
            args.mqtt_buffer,
            args.mqtt_heartbeat,
            args.mqtt_ca,
            args.mqtt_cert,
            args.mqtt_key,
            args.mqtt_insecure,
            args.mqtt_client_id,
            args.mqtt_protocol,
        )


def _heartbeat(text: str) -> float:
    """--mqtt-heartbeat: 0 (none) or at least 0.5 s (a broker is not a busy loop)."""
    from edgert.apps.argtypes import nonneg_float
    from edgert.apps.telemetry.mqtt import HEARTBEAT_MIN_S

    value = nonneg_float(text)
    if 0 < value < HEARTBEAT_MIN_S:
        raise argparse.ArgumentTypeError(
            f"must be 0 (no heartbeats) or at least {HEARTBEAT_MIN_S:g} s, not {text}"
        )
    return value


class MqttOutput(Sink):
    """Events to the broker as they happen; heartbeats from the run's live statistics."""

    takes_frames = False
    takes_events = True

    def __init__(self, publisher, heartbeat_s: float = 0.0, live=None) -> None:
        self.publisher = publisher
        self.live = live
        if heartbeat_s and live is not None:
            publisher.start_heartbeat(heartbeat_s, self.heartbeats)

    def events(self, events: list) -> None:
        for event in events:
            self.publisher.publish_event(event)

    def heartbeats(self) -> list[dict]:
        """One heartbeat per stream from the run's live statistics (none before it runs)."""
        s = self.live() if self.live is not None else None
        if not s:
            return []
        now = round(time.time(), 3)
        keep = ("reconnects", "connection")
        return [
            {
                "stream": st["stream"],
                "time": now,
                "fps": round(st.get("fps_recent", 0.0), 2),
                "frames_processed": st["frames_processed"],
                "frames_dropped": st["frames_dropped"],
                "latency_p99_ms": st["latency_ms"].get("end_to_end", {}).get("p99"),
                "power_w": s.get("power_w"),
                "energy_j": s.get("energy_j"),
                "status": "delivering" if st.get("delivering") else st["status"],
                **{k: st[k] for k in keep if k in st},
            }
            for st in s["streams"]
        ]

    def metrics(self) -> list:
        from edgert.apps.telemetry.mqtt import families

        return families(self.publisher.report())

    def close(self) -> None:
        self.publisher.close()

    def report(self) -> dict:
        return {"output": "mqtt", **self.publisher.report()}


def check(uri: str, options) -> None:
    """Before anything opens: the URI, the TLS options and paho-mqtt."""
    from edgert.apps.telemetry import require
    from edgert.apps.telemetry.mqtt import TlsOptions, parse_uri

    target = parse_uri(uri)
    o = options.mqtt if options is not None else MqttOptions()
    TlsOptions(o.ca, o.cert, o.key, o.insecure).check(target)
    require("paho.mqtt.client", "--mqtt")


def open_uri(uri: str, ctx: SinkContext) -> MqttOutput:
    from edgert.apps.telemetry import require
    from edgert.apps.telemetry.mqtt import MqttPublisher, TlsOptions, parse_uri

    target = parse_uri(uri)
    require("paho.mqtt.client", "--mqtt")
    o = ctx.options.mqtt if ctx.options is not None else MqttOptions()
    tls = TlsOptions(o.ca, o.cert, o.key, o.insecure)
    publisher = MqttPublisher(target, o.buffer, tls=tls, client_id=o.client_id, protocol=o.protocol)
    ctx.say(
        f"mqtt: {target.shown} (events on {publisher.topic_events}, "
        f"status on {publisher.topic_status})"
    )
    return MqttOutput(publisher, o.heartbeat, ctx.live)
