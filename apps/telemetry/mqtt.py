"""Events, heartbeats and a Last Will over MQTT (``paho-mqtt``), the way DeepStream's message
broker, Frigate and EdgeX publish:

    PREFIX/status                  "online" (retained) while connected; "offline" (retained) at a
                                   clean end, or from the broker (the Last Will) when the device
                                   vanishes
    PREFIX/events                  one JSON event per message, QoS 1, in order, each with ``seq``
    PREFIX/streams/N/heartbeat     every --mqtt-heartbeat seconds, QoS 0: fps, dropped, latency
                                   p99, power, energy, status

Inference never waits for the network: events go into a bounded buffer (the oldest dropped first
when it is full, counted) that a thread hands to paho while connected, at most ``WINDOW``
unacknowledged at a time. What paho holds when the connection drops it sends again on reconnect
(QoS 1: at least once, so a subscriber may see a ``seq`` twice), and nothing newer is sent until
those are acknowledged, so the order holds.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import secrets
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass
from urllib.parse import unquote

from edgert.apps.uris import redact, show_host, split
from edgert.runtime import json_text
from edgert.runtime.errors import OutputError

from . import require

log = logging.getLogger(__name__)
WINDOW = 32  # events handed to paho and not yet acknowledged


@dataclass
class MqttTarget:
    host: str
    port: int
    prefix: str
    tls: bool = False
    username: str | None = None
    password: str | None = None

    @property
    def shown(self) -> str:
        """The broker as printed: no password, an IPv6 address in brackets."""
        user = (
            f"{self.username}:***@"
            if self.password
            else (f"{self.username}@" if self.username else "")
        )
        where = show_host(self.host, self.port)
        return f"{'mqtts' if self.tls else 'mqtt'}://{user}{where}/{self.prefix}"


FORM = "give mqtt://[user:pass@]host[:port]/PREFIX (or mqtts:// for TLS)"


def parse_uri(uri: str) -> MqttTarget:
    """``mqtt://[user:pass@]host[:port]/PREFIX`` or ``mqtts://...`` (TLS, port 8883); the
    prefix defaults to ``edgert/HOSTNAME``. The credentials end at the last "@" (a password may
    hold "#", "/" or "@"). OutputError (one sentence, the password hidden) for anything else,
    and for a prefix the broker would not take (a wildcard, an empty level, or "$", which
    brokers keep for themselves)."""
    shown = redact(uri)
    scheme, sep, _ = uri.partition("://")
    if not sep or scheme.lower() not in ("mqtt", "mqtts"):
        raise OutputError(f"--mqtt {shown!r}: {FORM}")
    try:
        parts = split(uri)
    except ValueError as exc:
        raise OutputError(f"--mqtt {exc}; {FORM}") from None
    tls, port = parts.scheme == "mqtts", parts.port
    prefix = parts.path.strip("/") or f"edgert/{socket.gethostname()}"
    if any(c in prefix for c in "#+") or "//" in prefix:
        raise OutputError(
            f"--mqtt: the topic prefix {prefix!r} may not hold '#', '+' or '//' "
            "(edgert adds /events, /status and /streams/N/heartbeat to it)"
        )
    if prefix.startswith("$"):
        raise OutputError(
            f"--mqtt: the topic prefix {prefix!r} begins with '$', which brokers "
            "keep for themselves ($SYS): they would refuse every message"
        )
    user, colon, password = parts.userinfo.partition(":")
    return MqttTarget(
        parts.host,
        port or (8883 if tls else 1883),
        prefix,
        tls,
        unquote(user) if user else None,
        unquote(password) if colon and password else None,
    )


@dataclass
class TlsOptions:
    ca: str | None = None  # CA bundle (default: the system's)
    cert: str | None = None  # client certificate
    key: str | None = None
    insecure: bool = False  # do not check the broker's host name

    def check(self, target: MqttTarget) -> None:
        """OutputError when the options cannot mean what they say: TLS files with a plain
        ``mqtt://`` broker (events would go in clear text), or a key without its certificate."""
        given = [
            f
            for f, v in (
                ("--mqtt-ca", self.ca),
                ("--mqtt-cert", self.cert),
                ("--mqtt-key", self.key),
                ("--mqtt-insecure", self.insecure),
            )
            if v
        ]
        if given and not target.tls:
            raise OutputError(
                f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} for a "
                f"TLS broker: write mqtts:// (the events would go in clear text to "
                f"{target.shown})"
            )
        if self.key and not self.cert:
            raise OutputError("--mqtt-key is the key of a client certificate: give --mqtt-cert too")


HEARTBEAT_MIN_S = 0.5
SHORT_S = 5.0  # a connection that drops sooner than this after connecting was hardly used
PROTOCOLS = {"5": "MQTTv5", "3.1.1": "MQTTv311"}


class MqttPublisher:
    """One connection to the broker for a run: events (buffered, in order), heartbeats, status.

    While the broker is connected nothing is dropped: a full buffer makes :meth:`publish_event`
    wait for room (back-pressure on the thread that writes events). Only while it is away does
    the buffer keep the newest ``buffer`` events, the oldest dropped and counted as such. With
    MQTT 5 (the default) an event the broker refuses (its PUBACK says not authorized, say) is
    counted as refused, not delivered."""

    def __init__(
        self,
        target: MqttTarget,
        buffer: int = 1000,
        keepalive: int = 10,
        tls: TlsOptions | None = None,
        client_id: str | None = None,
        protocol: str = "5",
    ) -> None:
        mqtt = require("paho.mqtt.client", "--mqtt")
        self.mqtt = mqtt
        self.target = target
        tls = tls or TlsOptions()
        tls.check(target)
        self.topic_status = f"{target.prefix}/status"
        self.topic_events = f"{target.prefix}/events"
        self.buffer = max(1, buffer)
        self._queue: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._outstanding: dict[int, int] = {}  # mid -> the connection it was sent on
        self._generation = 0
        self._in_hand = 0  # being handed to paho (outside the lock)
        self._acked_early: dict[int, bool] = {}  # mid -> delivered, acked before publish() returned
        self.connected = False
        self.connects = 0
        self.seq = 0
        self.delivered = 0
        self.refused = 0  # the broker's PUBACK said no
        self.dropped = 0  # from the full buffer while the broker was away
        self.waited_s = 0.0  # back-pressure: time publish_event waited for room
        self.heartbeats = 0
        self.last_error: str | None = None
        self._warned: set[str] = set()
        self._closed = False
        self._probed = False
        self._connected_at = 0.0
        self._short_drops = 0  # connections in a row that dropped within SHORT_S
        self.v5 = protocol == "5"
        client = self._client(mqtt, target, tls, client_id, protocol)
        self.client = client
        client.connect_async(target.host, target.port, keepalive)
        client.loop_start()  # paho's thread: the connection, reconnects and acknowledgements
        self._sender = threading.Thread(target=self._send_loop, name="mqtt-send", daemon=True)
        self._sender.start()
        self._heartbeat: threading.Thread | None = None

    def _client(self, mqtt, target: MqttTarget, tls: TlsOptions, client_id, protocol: str):
        """paho's client for ``target``: its id, credentials, TLS, Last Will, reconnect delays and
        this output's callbacks (not yet connected)."""
        cid = client_id or f"edgert-{socket.gethostname()}-{secrets.token_hex(4)}"
        client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=cid,
            protocol=getattr(mqtt, PROTOCOLS[protocol]),
        )
        if target.username:
            client.username_pw_set(target.username, target.password)
        if target.tls:
            try:
                client.tls_set(ca_certs=tls.ca, certfile=tls.cert, keyfile=tls.key)
            except (OSError, ValueError) as exc:
                raise OutputError(f"--mqtt: the TLS files cannot be used: {exc}") from None
            client.tls_insecure_set(tls.insecure)
        client.will_set(self.topic_status, "offline", qos=1, retain=True)
        client.reconnect_delay_set(min_delay=1, max_delay=5)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        client.on_connect_fail = self._on_connect_fail
        return client

    def _warn(self, why: str, more: str = "") -> None:
        """``why`` becomes the last error; said once per distinct reason (a refusal repeated on
        every retry is one line, not one a second)."""
        self.last_error = why
        if why not in self._warned:
            self._warned.add(why)
            log.warning("MQTT %s: %s%s", self.target.shown, why, more)

    # -- paho's callbacks (its thread) --------------------------------------------------------
    def _on_connect(self, client, userdata, flags, reason_code, properties=None) -> None:
        if reason_code.is_failure:
            hint = ""
            if "protocol" in str(reason_code).lower() and self.v5:
                hint = " (a broker that speaks only MQTT 3.1.1: --mqtt-protocol 3.1.1)"
            self._warn(f"the broker refused the connection: {reason_code}{hint}")
            return
        client.publish(self.topic_status, "online", qos=1, retain=True)
        with self._cond:
            self._connected_at = time.monotonic()
            self.connected = True
            self.connects += 1
            self._generation += 1
            self._cond.notify_all()
        if self.connects > 1:
            log.warning("MQTT %s: connected again", self.target.shown)

    def _on_connect_fail(self, client, userdata) -> None:
        """No connection (refused, no route, a TLS handshake that failed); paho tries again.
        Paho calls this inside its ``except OSError``: the exception says which."""
        self._warn(
            _connect_failure(sys.exc_info()[1]),
            f"; trying again, events are kept (up to {self.buffer})",
        )

    def _on_disconnect(self, client, userdata, flags, reason_code, properties=None) -> None:
        with self._cond:
            was = self.connected
            self.connected = False
            self._cond.notify_all()
        if self._closed:
            return
        if was:  # dropped right after connecting, again and again: a take-over (MQTT 5 says so)
            short = time.monotonic() - self._connected_at < SHORT_S
            self._short_drops = self._short_drops + 1 if short else 0
        if "taken over" in str(reason_code).lower() or self._short_drops >= 3:
            self._warn(
                "the connection is taken over right after each connect: another client "
                "with the same client id may be using it; give each edgert its own "
                "--mqtt-client-id"
            )
        elif was:
            self._warn(
                f"disconnected ({reason_code})",
                f"; events are kept (up to {self.buffer}) until it is back",
            )
        elif not self.target.tls and not self._probed:
            self._probed = True  # closed before it answered: a TLS port spoken to in clear?
            if _speaks_tls(self.target.host, self.target.port):
                self._warn(
                    f"port {self.target.port} speaks TLS: write mqtts:// (with --mqtt-ca "
                    "for a private CA)"
                )
            else:
                self._warn(f"the broker closed the connection before answering ({reason_code})")

    def _on_publish(self, client, userdata, mid, reason_code=None, properties=None) -> None:
        ok = reason_code is None or not getattr(reason_code, "is_failure", False)
        with self._cond:
            if self._outstanding.pop(mid, None) is not None:
                self._count(ok, reason_code)
            elif self._in_hand:
                self._acked_early[mid] = ok
            self._cond.notify_all()

    def _count(self, ok: bool, reason_code=None) -> None:
        if ok:
            self.delivered += 1
            return
        self.refused += 1
        self._warn(f"the broker refused events on {self.topic_events} ({reason_code})")

    # -- events -------------------------------------------------------------------------------
    def publish_event(self, event: dict) -> None:
        """Queue one event. While the broker is connected a full buffer waits for room (nothing
        is lost); while it is away, the oldest buffered event goes, counted."""
        with self._cond:
            self.seq += 1
            payload = json_text.dumps({"seq": self.seq, **event}, default=str)
            if len(self._queue) >= self.buffer and self.connected:
                t0 = time.monotonic()
                self._cond.wait_for(
                    lambda: len(self._queue) < self.buffer or not self.connected or self._closed
                )
                self.waited_s += time.monotonic() - t0
            if len(self._queue) >= self.buffer:
                self._queue.popleft()
                self.dropped += 1
                if self.dropped == 1:
                    log.warning(
                        "MQTT %s: the broker is away and %d events are buffered: the "
                        "oldest are being dropped (--mqtt-buffer)",
                        self.target.shown,
                        self.buffer,
                    )
            self._queue.append(payload)
            self._cond.notify_all()

    def _may_send(self) -> bool:
        # after a reconnect, what paho sends again goes first: nothing newer until it is acked
        stale = any(g != self._generation for g in self._outstanding.values())
        return self.connected and not stale and len(self._outstanding) < WINDOW

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or (self._queue and self._may_send()))
                if self._closed:
                    return
                payload = self._queue.popleft()
                generation = self._generation
                self._in_hand += 1
                self._cond.notify_all()  # room in the buffer
            # outside the lock: paho's thread takes its own locks, then calls _on_publish.
            # paho keeps the message (and sends it on reconnect) even if the connection just went
            info = self.client.publish(self.topic_events, payload, qos=1)
            with self._cond:
                self._in_hand -= 1
                if info.mid in self._acked_early:  # its PUBACK came before publish() returned
                    self._count(self._acked_early.pop(info.mid))
                else:
                    self._outstanding[info.mid] = generation
                self._cond.notify_all()

    # -- heartbeats ---------------------------------------------------------------------------
    def start_heartbeat(self, every_s: float, streams) -> None:
        """Every ``every_s`` seconds (at least :data:`HEARTBEAT_MIN_S`), ``streams()`` -> a list of dicts (one per stream, with
        ``stream``), each published QoS 0 to PREFIX/streams/N/heartbeat while connected."""

        every_s = max(HEARTBEAT_MIN_S, every_s)

        def loop() -> None:
            while not self._stop_heartbeat.wait(every_s):
                if not self.connected:
                    continue
                try:
                    beats = streams()
                except Exception as exc:  # noqa: BLE001 - a heartbeat never stops the run
                    log.debug("heartbeat: %s", exc)
                    continue
                for beat in beats:
                    topic = f"{self.target.prefix}/streams/{beat['stream']}/heartbeat"
                    self.client.publish(topic, json_text.dumps(beat, default=str), qos=0)
                    self.heartbeats += 1

        self._stop_heartbeat = threading.Event()
        self._heartbeat = threading.Thread(target=loop, name="mqtt-heartbeat", daemon=True)
        self._heartbeat.start()

    # -- the end ------------------------------------------------------------------------------
    def close(self, drain_s: float = 5.0) -> None:
        """Deliver what is buffered (up to ``drain_s`` while connected), publish "offline"
        (retained) and disconnect cleanly; the broker then keeps the Last Will to itself."""
        if self._heartbeat is not None:
            self._stop_heartbeat.set()
            self._heartbeat.join(2.0)
        deadline = time.monotonic() + drain_s
        with self._cond:
            # connected, or still connecting for the first time with nothing said against it (a
            # short run can end before the first connection is made)
            while (self._queue or self._outstanding or self._in_hand) and (
                self.connected or (self.connects == 0 and self.last_error is None)
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.1))
            self._closed = True
            self._cond.notify_all()
        self._sender.join(2.0)
        if self.connected:
            info = self.client.publish(self.topic_status, "offline", qos=1, retain=True)
            with contextlib.suppress(RuntimeError, ValueError):  # gone meanwhile: the Will says it
                info.wait_for_publish(2.0)
        self.client.disconnect()
        self.client.loop_stop()

    def report(self) -> dict:
        with self._cond:
            return {
                "broker": self.target.shown,
                "connected": self.connected,
                "connects": self.connects,
                "events": self.seq,
                "delivered": self.delivered,
                "dropped": self.dropped,
                "refused": self.refused,
                "backpressure_s": round(self.waited_s, 3),
                "buffered": len(self._queue) + len(self._outstanding) + self._in_hand,
                "heartbeats": self.heartbeats,
                "last_error": self.last_error,
            }


def families(report: dict) -> list:
    """Prometheus metric families of a publisher's :meth:`MqttPublisher.report`."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    msgs = CounterMetricFamily(
        "edgert_mqtt_messages_total",
        "MQTT events delivered to the broker or dropped from the full buffer while it was away",
        labels=["result"],
    )
    msgs.add_metric(["delivered"], report["delivered"])
    msgs.add_metric(["dropped"], report["dropped"])
    return [
        msgs,
        GaugeMetricFamily(
            "edgert_mqtt_connected",
            "1 while connected to the broker",
            value=float(report["connected"]),
        ),
        GaugeMetricFamily(
            "edgert_mqtt_buffered_messages",
            "Events waiting for the broker",
            value=report["buffered"],
        ),
    ]


def lost(report: dict) -> int:
    """Events of a run's MQTT report that never reached the broker's subscribers."""
    return report["dropped"] + report["refused"] + report["buffered"]


def _connect_failure(exc: BaseException | None) -> str:
    """Why a connection attempt failed, in words: a certificate the check refused is named."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the broker's TLS certificate was refused: {exc.verify_message or exc.reason}"
    if isinstance(exc, ssl.SSLError):
        return f"the TLS handshake failed: {exc.reason or exc}"
    if isinstance(exc, ConnectionRefusedError):
        return "cannot connect to the broker: nothing listens there (connection refused)"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "cannot connect to the broker: no answer (timed out)"
    if isinstance(exc, socket.gaierror):
        return f"cannot connect to the broker: its name does not resolve ({exc.strerror})"
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot connect to the broker: {exc.strerror}"
    return "cannot connect to the broker"


def _speaks_tls(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """Whether ``host:port`` completes a TLS handshake (its certificate not checked: this only
    tells a TLS port from a plain one, for the sentence)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout_s) as raw, ctx.wrap_socket(
            raw, server_hostname=host
        ):
            return True
    except (OSError, ValueError):
        return False
