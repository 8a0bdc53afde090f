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
import json
import logging
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

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
        """The broker as printed: no password."""
        user = (
            f"{self.username}:***@"
            if self.password
            else (f"{self.username}@" if self.username else "")
        )
        return f"{'mqtts' if self.tls else 'mqtt'}://{user}{self.host}:{self.port}/{self.prefix}"


def parse_uri(uri: str) -> MqttTarget:
    """``mqtt://[user:pass@]host[:port]/PREFIX`` or ``mqtts://...`` (TLS, port 8883); the
    prefix defaults to ``edgert/HOSTNAME``. OutputError (one sentence) for anything else."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("mqtt", "mqtts") or not parsed.hostname:
        raise OutputError(f"--mqtt {_hide(uri)!r}: give mqtt://[user:pass@]host[:port]/PREFIX "
                          "(or mqtts:// for TLS)")  # fmt: skip
    try:
        port = parsed.port
    except ValueError:
        port = -1
    if port is not None and not 0 < port <= 65535:
        raise OutputError(f"--mqtt {_hide(uri)!r}: the port must be a number from 1 to 65535")
    tls = parsed.scheme == "mqtts"
    prefix = parsed.path.strip("/") or f"edgert/{socket.gethostname()}"
    if any(c in prefix for c in "#+") or "//" in prefix:
        raise OutputError(f"--mqtt: the topic prefix {prefix!r} may not hold '#', '+' or '//'")
    return MqttTarget(parsed.hostname, port or (8883 if tls else 1883), prefix, tls,
                      unquote(parsed.username) if parsed.username else None,
                      unquote(parsed.password) if parsed.password else None)  # fmt: skip


def _hide(uri: str) -> str:
    from edgert.apps.camera.source_base import redact

    return redact(uri)


@dataclass
class TlsOptions:
    ca: str | None = None  # CA bundle (default: the system's)
    cert: str | None = None  # client certificate
    key: str | None = None
    insecure: bool = False  # do not check the broker's host name


class MqttPublisher:
    """One connection to the broker for a run: events (buffered, in order), heartbeats, status."""

    def __init__(self, target: MqttTarget, buffer: int = 1000, keepalive: int = 10,
                 tls: TlsOptions | None = None, client_id: str | None = None) -> None:  # fmt: skip
        mqtt = require("paho.mqtt.client", "--mqtt")
        self.mqtt = mqtt
        self.target = target
        self.topic_status = f"{target.prefix}/status"
        self.topic_events = f"{target.prefix}/events"
        self.buffer = max(1, buffer)
        self._queue: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._outstanding: dict[int, int] = {}  # mid -> the connection it was sent on
        self._generation = 0
        self._in_hand = 0  # being handed to paho (outside the lock)
        self._acked_early: set[int] = set()
        self.connected = False
        self.connects = 0
        self.seq = 0
        self.delivered = 0
        self.dropped = 0
        self.heartbeats = 0
        self.last_error: str | None = None
        self._closed = False
        cid = client_id or f"edgert-{socket.gethostname()}-{id(self) & 0xFFFF:04x}"
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid,
                             protocol=mqtt.MQTTv311)  # fmt: skip
        if target.username:
            client.username_pw_set(target.username, target.password)
        if target.tls:
            t = tls or TlsOptions()
            try:
                client.tls_set(ca_certs=t.ca, certfile=t.cert, keyfile=t.key)
            except (OSError, ValueError) as exc:
                raise OutputError(f"--mqtt: the TLS files cannot be used: {exc}") from None
            client.tls_insecure_set(t.insecure)
        client.will_set(self.topic_status, "offline", qos=1, retain=True)
        client.reconnect_delay_set(min_delay=1, max_delay=5)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        client.on_connect_fail = self._on_connect_fail
        self.client = client
        client.connect_async(target.host, target.port, keepalive)
        client.loop_start()  # paho's thread: the connection, reconnects and acknowledgements
        self._sender = threading.Thread(target=self._send_loop, name="mqtt-send", daemon=True)
        self._sender.start()
        self._heartbeat: threading.Thread | None = None

    # -- paho's callbacks (its thread) --------------------------------------------------------
    def _on_connect(self, client, userdata, flags, reason_code, properties=None) -> None:
        if reason_code.is_failure:
            self.last_error = f"the broker refused the connection: {reason_code}"
            log.warning("MQTT %s: %s", self.target.shown, self.last_error)
            return
        client.publish(self.topic_status, "online", qos=1, retain=True)
        with self._cond:
            self.connected = True
            self.connects += 1
            self._generation += 1
            self._cond.notify_all()
        if self.connects > 1:
            log.warning("MQTT %s: connected again", self.target.shown)

    def _on_connect_fail(self, client, userdata) -> None:
        """No connection (refused, no route, a TLS handshake that failed); paho tries again."""
        first = self.last_error is None
        self.last_error = "cannot connect to the broker (refused, unreachable, or TLS failed)"
        if first:
            log.warning("MQTT %s: %s; trying again, events are kept (up to %d)",
                        self.target.shown, self.last_error, self.buffer)  # fmt: skip

    def _on_disconnect(self, client, userdata, flags, reason_code, properties=None) -> None:
        with self._cond:
            was = self.connected
            self.connected = False
            self._cond.notify_all()
        if was and not self._closed:
            self.last_error = f"disconnected ({reason_code})"
            log.warning("MQTT %s: %s; events are kept (up to %d) until it is back",
                        self.target.shown, self.last_error, self.buffer)  # fmt: skip

    def _on_publish(self, client, userdata, mid, reason_code=None, properties=None) -> None:
        with self._cond:
            if self._outstanding.pop(mid, None) is not None:
                self.delivered += 1
            elif self._in_hand:
                self._acked_early.add(mid)
            self._cond.notify_all()

    # -- events -------------------------------------------------------------------------------
    def publish_event(self, event: dict) -> None:
        """Queue one event (never waits); when the buffer is full the oldest goes, counted."""
        with self._cond:
            self.seq += 1
            payload = json.dumps({"seq": self.seq, **event}, default=str)
            if len(self._queue) >= self.buffer:
                self._queue.popleft()
                self.dropped += 1
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
            # outside the lock: paho's thread takes its own locks, then calls _on_publish.
            # paho keeps the message (and sends it on reconnect) even if the connection just went
            info = self.client.publish(self.topic_events, payload, qos=1)
            with self._cond:
                self._in_hand -= 1
                if info.mid in self._acked_early:  # its PUBACK came before publish() returned
                    self._acked_early.discard(info.mid)
                    self.delivered += 1
                else:
                    self._outstanding[info.mid] = generation
                self._cond.notify_all()

    # -- heartbeats ---------------------------------------------------------------------------
    def start_heartbeat(self, every_s: float, streams) -> None:
        """Every ``every_s`` seconds, ``streams()`` -> a list of dicts (one per stream, with
        ``stream``), each published QoS 0 to PREFIX/streams/N/heartbeat while connected."""

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
                    self.client.publish(topic, json.dumps(beat, default=str), qos=0)
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
            while (self._queue or self._outstanding or self._in_hand) and self.connected:
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
                "buffered": len(self._queue) + len(self._outstanding) + self._in_hand,
                "heartbeats": self.heartbeats,
                "last_error": self.last_error,
            }
