"""Crash safety of the event store, measured (issue 69): a writer process (the store's writer
thread under a busy camera's event load, benchmarks/event_store.py's scene at SPEED times real
time, its batch window shortened as much) is killed with SIGKILL at N random moments; after
each kill the store is opened again as the next run opens it: ``PRAGMA integrity_check`` must
say ok, and every event the writer had acknowledged (committed: what ``/api/events`` could
have answered) must be in it. The events sent but not yet committed when it died are counted
(at most one batch window's). The variant ``--cut-wal`` also cuts the WAL at a random offset
after each kill (a torn write): integrity must still be ok; the acknowledged events must all be
there still: the cut falls after the WAL's size at the last acknowledged commit (with
``synchronous = FULL`` that is on the disk; what a power cut can tear is the commit in flight).

The variant ``--mqtt`` runs the camera's own sinks (the store's and MQTT's, as ``edgert camera
--store ... --mqtt ...`` opens them) against a real Mosquitto (Debian's, on a free loopback port)
with a subscriber (QoS 1, a persistent session): after each kill every event the subscriber
received must be in the store (MQTT publishes an event once the store committed it);
``--mqtt-first`` publishes as the events come instead (the order before), to show what that
loses.

The variant ``--camera`` kills a real ``edgert camera`` on a busy rendered scene instead
(benchmarks/store_kill_camera.py).

    python benchmarks/store_kill.py [--kills 200] [--cut-wal] [--mqtt | --mqtt-first]
        [--json reports/store_kill.json]
    python benchmarks/store_kill.py --camera [--kills 200] [--batch-s 10] [--minutes M]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPEED = 20.0  # camera time per second of wall: a commit every 0.5 s of wall at a 10 s window


def _sinks(store: str, mqtt: str, gated: bool):
    """The camera's store and MQTT sinks, opened as a run opens them; (writer, put)."""
    from event_store import CAMERAS

    from edgert.apps.camera.sinks import SinkContext, open_sink
    from edgert.apps.store.writer import BATCH_S

    ctx = SinkContext(streams=[{"stream": 0, "uri": CAMERAS[0]}])
    kept = open_sink(f"store://{store}?batch_s={BATCH_S / SPEED}", ctx)
    sinks = [kept, open_sink(mqtt, ctx)]
    if gated:
        sinks = kept.hold_back(sinks)
    told = kept.writer.on_commit

    def put(record: dict) -> None:
        for s in sinks:
            s.events([record])

    return kept.writer, told, put


def child(store: str, first: int, mqtt: str | None = None, gated: bool = True) -> None:
    """The writer: events numbered from ``first`` (``seq``), a line ``acked N`` on stdout after
    each commit (N: the last committed), until killed; with ``mqtt``, through the camera's
    sinks (the store's, MQTT's)."""
    sys.path.insert(0, str(HERE))
    from event_store import BUSY_EVERY_S, CAMERAS, scene_events

    from edgert.apps.camera.sinks.retention import run_id
    from edgert.apps.store.records import row_of
    from edgert.apps.store.writer import BATCH_S, StoreWriter

    told = None
    if mqtt:
        writer, told, put = _sinks(store, mqtt, gated)
    else:
        writer = StoreWriter(store, run_id(), CAMERAS[:1], batch_s=BATCH_S / SPEED)

        def put(record: dict) -> None:
            writer.put([row_of(record, CAMERAS)])

    lock = threading.Lock()

    def acked(batch: list) -> None:
        if told is not None:
            told(batch)
        seqs = [r["data"]["seq"] for r in batch if isinstance(r, dict)]
        if seqs:  # the WAL's size once committed: what a torn write may cut is after it
            wal = os.stat(f"{store}-wal").st_size
            with lock:
                os.write(1, f"acked {max(seqs)} {wal}\n".encode())

    writer.on_commit = acked
    print("ready", flush=True)
    start, seq = time.monotonic(), first
    for at, record in scene_events(3600, BUSY_EVERY_S, time.time(), seed=first):
        delay = start + at / SPEED - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        record["seq"] = seq
        os.write(1, f"sent {seq}\n".encode())
        put(record)
        seq += 1


def _stored(store: Path) -> tuple[str, set]:
    conn = sqlite3.connect(store, timeout=10)
    try:
        ok = conn.execute("PRAGMA integrity_check").fetchone()[0]
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
        if "events" not in tables:  # the cut took the tables' own commit: a store made anew
            return ok, set()
        seqs = {json.loads(d).get("seq") for (d,) in conn.execute("SELECT data FROM events")}
    finally:
        conn.close()
    return ok, seqs


class Broker:
    """A Mosquitto of our own on a free loopback port, and a subscriber (QoS 1, a persistent
    session) that keeps the ``seq`` of every event it receives."""

    def __init__(self, folder: Path, prefix: str = "kill") -> None:
        import paho.mqtt.client as mqtt

        sys.path.insert(0, str(HERE.parent))
        from tests.ports import free_ports

        self.port = free_ports(1)[0]
        conf = folder / "mosquitto.conf"
        user = "user root\n" if os.geteuid() == 0 else ""
        conf.write_text(f"{user}listener {self.port} 127.0.0.1\nallow_anonymous true\n")
        self.proc = subprocess.Popen(
            ["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.url = f"mqtt://127.0.0.1:{self.port}/{prefix}"
        self.got: set = set()
        self.lock, subscribed = threading.Lock(), threading.Event()
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="kill-sub", clean_session=False)
        c.on_connect = lambda cl, *a: cl.subscribe(f"{prefix}/events", qos=1)
        c.on_subscribe = lambda *a: subscribed.set()
        c.on_message = self._message
        deadline = time.monotonic() + 10
        while True:
            try:
                c.connect("127.0.0.1", self.port, keepalive=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        c.loop_start()
        assert subscribed.wait(10), "the subscriber did not subscribe"
        self.client = c

    def _message(self, client, userdata, msg) -> None:
        seq = json.loads(msg.payload).get("seq")
        with self.lock:
            self.got.add(seq)

    def received(self, settle_s: float = 0.5) -> set:
        """What arrived, once nothing more has for ``settle_s``."""
        n = -1
        while True:
            with self.lock:
                if len(self.got) == n:
                    return set(self.got)
                n = len(self.got)
            time.sleep(settle_s)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()
        self.proc.terminate()
        self.proc.wait(10)


def one_kill(
    store: Path, first: int, rng: random.Random, cut_wal: bool, broker=None, gated=True
) -> dict:
    extra = ["--mqtt", broker.url] if broker is not None else []
    extra += [] if gated else ["--mqtt-first"]
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", str(store), "--first", str(first), *extra],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    lines: list = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    time.sleep(rng.uniform(0.05, 2.0))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    reader.join(5)
    sent = [int(x.split()[1]) for x in lines if x.startswith("sent ")]
    acks = [tuple(map(int, x.split()[1:])) for x in lines if x.startswith("acked ")]
    acked, synced = max(acks, default=(first - 1, 0))
    cut = None
    wal = Path(f"{store}-wal")
    if cut_wal and wal.exists() and wal.stat().st_size > synced:  # the commit in flight, torn
        cut = rng.randrange(synced, wal.stat().st_size)
        os.truncate(wal, cut)
    ok, seqs = _stored(store)
    acked_set = set(range(first, acked + 1))
    published = {s for s in broker.received() if s >= first} if broker is not None else set()
    return {
        "published": len(published),  # received by the MQTT subscriber
        "published_lost": len(published - seqs),  # received, and not in the store
        "integrity": ok,
        "sent": len(sent),
        "acked": len(acked_set),
        "acked_lost": len(acked_set - seqs),
        "unacked_lost": len(set(sent) - acked_set - seqs),
        "wal_cut_at": cut,
        "next": (max(sent) + 1) if sent else first,
    }


def run(kills: int, cut_wal: bool, seed: int = 0, mqtt: str | None = None) -> dict:
    """``mqtt``: None (the writer alone), "after" (the camera's sinks, MQTT after the commit)
    or "first" (MQTT as the events come)."""
    rng = random.Random(seed)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(Path(tmp)) if mqtt else None
        try:
            store, first = Path(tmp) / "kill.db", 1
            for _ in range(kills):
                r = one_kill(store, first, rng, cut_wal, broker, mqtt != "first")
                first = r["next"] + 1000  # a fresh range: every run's events told apart
                rows.append(r)
        finally:
            if broker is not None:
                broker.close()
    return {
        "kills": kills,
        "cut_wal": cut_wal,
        "mqtt": mqtt,
        "events_published": sum(r["published"] for r in rows),
        "published_lost": sum(r["published_lost"] for r in rows),
        "corrupt": sum(r["integrity"] != "ok" for r in rows),
        "events_acked": sum(r["acked"] for r in rows),
        "acked_lost": sum(r["acked_lost"] for r in rows),
        "unacked_lost": sum(r["unacked_lost"] for r in rows),
        "max_unacked_lost_per_kill": max((r["unacked_lost"] for r in rows), default=0),
        "runs": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child")
    ap.add_argument("--first", type=int, default=1)
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--cut-wal", action="store_true")
    ap.add_argument("--mqtt", nargs="?", const="after", help="the camera's sinks and Mosquitto")
    ap.add_argument("--mqtt-first", action="store_true", help="--mqtt, published as they come")
    ap.add_argument("--camera", action="store_true", help="a real `edgert camera` killed")
    ap.add_argument("--batch-s", type=float, default=10.0, help="--camera: the batch window")
    ap.add_argument("--minutes", type=float, help="--camera: stop after M minutes (fewer kills)")
    ap.add_argument("--json", help="default: reports/store_kill[_camera].json")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.first, args.mqtt, not args.mqtt_first)
        return
    sys.path.insert(0, str(HERE))
    if args.camera:
        from store_kill_camera import main as camera

        path = args.json or "reports/store_kill_camera.json"
        camera(args.kills, args.batch_s, path, args.minutes)
        return
    from json_report import write_json

    mqtt = "first" if args.mqtt_first else ("after" if args.mqtt else None)
    report = run(args.kills, args.cut_wal, mqtt=mqtt)
    print(
        f"{report['kills']} kills{' with the WAL cut' if args.cut_wal else ''}: "
        f"{report['corrupt']} corrupt stores, {report['events_acked']} events acknowledged, "
        f"{report['acked_lost']} of them lost; {report['unacked_lost']} sent and not yet "
        f"committed lost (at most {report['max_unacked_lost_per_kill']} in one kill)"
        + (
            f"; MQTT ({'after the commit' if mqtt == 'after' else 'as the events come'}): "
            f"{report['events_published']} events received by the "
            f"subscriber, {report['published_lost']} of them not in the store"
            if mqtt
            else ""
        )
    )
    write_json(args.json or "reports/store_kill.json", report)


if __name__ == "__main__":
    main()
