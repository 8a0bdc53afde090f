"""The event store (apps/store, issue 69): its write budget per camera-hour on a busy and a quiet
scene, its insert rate, and the page's queries over 10k, 100k and 1M events.

1. Write budget: an hour of a camera's events (busy: a track every BUSY_EVERY_S seconds, each
   with its start, a line crossed, a zone entered and left, its end; quiet: none) fed to the
   store's writer thread at SPEED times real time, its batch window shortened as much (so each
   commit holds the rows a real-time one would): the bytes the writer thread wrote
   (/proc/thread-self/io wchar: commits and checkpoints) and the files' sizes. Goal: at most
   5 MB per busy camera-hour; a quiet camera: its heartbeat alone.
2. Insert rate: events a second through the writer thread, as fast as they come.
3. Queries: p95 of the page's filters (none, camera, label, zone, line, the last hour, the next
   page by cursor) over stores of 10k, 100k and 1M events. Goal: p95 <= 50 ms at 1M.
4. ``--postgres``: the same insert rate and queries on a real PostgreSQL server (Debian's,
   started on a free loopback port by tests/apps/pg_server.py, ``fsync=off`` as the tests run
   it), through the store's own writer (:class:`~edgert.apps.store.postgres.PgWriter`) and
   reads (``%s``: by the index of time), side by side with SQLite's at ``--pg-sizes``
   (10k and 100k by default; the tables emptied between sizes, ``ANALYZE`` after each fill).

    python benchmarks/event_store.py [--json reports/event_store.json] [--sizes 10000,100000,1000000]
        [--postgres [--pg-sizes 10000,100000]] [--no-budget]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from json_report import write_json

from edgert.apps.store import query
from edgert.apps.store import writer as writer_module
from edgert.apps.store.records import row_of
from edgert.apps.store.writer import BATCH_S, HEARTBEAT_S, StoreWriter

BUSY_EVERY_S = 2.0  # a new track every 2 s: 2.5 events a second, 9,000 an hour
LABELS = ("person", "person", "person", "car", "bicycle", "dog")
CAMERAS = ["rtsp://door-cam/stream", "rtsp://yard-cam/stream"]


def scene_events(seconds: float, every_s: float, t0: float, seed: int = 0) -> list:
    """(scene time, event record) of a busy scene: a track every ``every_s`` seconds, living
    4-8 s: its start, a line crossed, a zone entered and left, its end."""
    rng = random.Random(seed)
    out, track, t = [], 0, 0.0
    while t < seconds:
        track += 1
        label, life = rng.choice(LABELS), rng.uniform(4, 8)
        base = {"stream": 0, "track_id": track, "label": label, "model": "det@2026-12-06#ab12"}
        for at, extra in (
            (0.0, {"event": "track_start"}),
            (life * 0.3, {"event": "line_cross", "line": "door", "direction": "in"}),
            (life * 0.5, {"event": "zone_enter", "zone": "pen"}),
            (life * 0.8, {"event": "zone_exit", "zone": "pen", "dwell_s": round(life * 0.3, 3)}),
            (life, {"event": "track_end", "duration_s": round(life, 3)}),
        ):
            out.append((t + at, {**base, **extra, "time": t0 + t + at}))
        t += every_s
    return sorted(out, key=lambda x: x[0])


def write_budget(folder: Path, busy: bool, speed: float, batch_s: float = BATCH_S) -> dict:
    """An hour of a camera (busy or quiet) through the writer at ``speed`` times real time."""
    path = folder / f"budget-{'busy' if busy else 'quiet'}-{batch_s:g}.db"
    events = scene_events(3600, BUSY_EVERY_S, time.time()) if busy else []
    writer_module.HEARTBEAT_S = HEARTBEAT_S / speed  # the heartbeat on the camera's clock too
    writer = StoreWriter(path, "bench", CAMERAS[:1], batch_s=batch_s / speed)
    start = time.monotonic()
    for at, record in events:
        delay = start + at / speed - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        writer.put([row_of(record, CAMERAS)])
    rest = start + 3600 / speed - time.monotonic()
    if rest > 0:
        time.sleep(rest)
    writer.close()
    writer_module.HEARTBEAT_S = HEARTBEAT_S
    sizes = sum(p.stat().st_size for p in folder.glob(path.name + "*"))
    return {
        "scene": "busy" if busy else "quiet",
        "batch_s": batch_s,
        "events": len(events),
        "commits": writer.commits,
        "bytes_written_per_camera_hour": writer.io["wchar"],
        "disk_write_bytes": writer.io["write_bytes"],
        "file_bytes": sizes,
    }


def insert_rate(folder: Path, n: int = 20000, opened=None) -> dict:
    """``opened(batch_s)``: the writer (SQLite's at FOLDER/rate.db when not given)."""
    events = scene_events(n / 2.5, BUSY_EVERY_S, time.time() - 86400, seed=1)[:n]
    opened = opened or (lambda b: StoreWriter(folder / "rate.db", "bench", CAMERAS, batch_s=b))
    writer = opened(0.05)
    t = time.perf_counter()
    for _, record in events:
        writer.put([row_of(record, CAMERAS)])
    writer.close()
    took = time.perf_counter() - t
    return {
        "events": len(events),
        "seconds": round(took, 3),
        "events_per_s": round(len(events) / took),
    }


def filled(folder: Path, n: int, opened=None) -> Path:
    """A store of ``n`` events over the last ``n / 2.5`` seconds of two cameras, written in big
    batches (the writer's own statements; its pacing is not what is measured here).
    ``opened(batch_s)``: the writer (SQLite's at FOLDER/qN.db when not given)."""
    path = folder / f"q{n}.db"
    writer = opened(0.0) if opened else StoreWriter(path, "bench", CAMERAS, batch_s=0.0)
    t0 = time.time() - n / 2.5
    rows = []
    for i, (_, record) in enumerate(scene_events(n / 2.5, BUSY_EVERY_S, t0, seed=2)[:n]):
        record["stream"] = i % 2
        rows.append(row_of(record, CAMERAS))
        if len(rows) == 2000:
            writer.put(rows)
            rows = []
    writer.put(rows)
    writer.close()
    return path


FILTERS = {
    "newest": {},
    "camera": {"camera": CAMERAS[1]},
    "label person": {"label": "person"},
    "label dog": {"label": "dog"},
    "zone": {"zone": "pen"},
    "line": {"line": "door"},
    "last hour": {"since": "-1h"},
    "label dog, yesterday 14-15": {"label": "dog", "since": "-26h", "until": "-25h"},
    "label cat (in no event)": {"label": "cat"},
}


def query_p95(path: Path, repeats: int, conn=None, mark: str = "?") -> dict:
    """``conn``: a server's connection (``mark``: its placeholder) instead of the file's."""
    conn = conn or query.open_read(path)
    out = {}
    for name, given in {**FILTERS, "next page": {}}.items():
        f = query.Filters.parse({**given, "limit": "50"})
        if name == "next page":
            first = query.events(conn, f, mark)
            f = query.Filters.parse({"limit": "50", "cursor": first["next_cursor"]})
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            query.events(conn, f, mark)
            times.append((time.perf_counter() - t) * 1e3)
        out[name] = round(statistics.quantiles(times, n=20)[-1], 2)
    conn.close()
    return out


def postgres_side(folder: Path, sizes: list, repeats: int, sqlite: dict) -> dict:
    """Insert rate and query p95 on a real PostgreSQL server, printed beside SQLite's."""
    import os
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from edgert.apps.store import postgres
    from tests.apps.pg_server import PASSWORD, PgServer

    os.environ["EDGERT_PG_PASSWORD"] = PASSWORD
    server = PgServer()
    try:
        target = postgres.parse(server.uri(device="bench", spool=folder / "pg-spool.jsonl"))

        def opened(batch_s: float):
            return postgres.PgWriter(target, "bench", CAMERAS, batch_s=batch_s)

        out: dict = {"insert": insert_rate(folder, opened=opened), "query_p95_ms": {}}
        print(f"insert: PostgreSQL {out['insert']['events_per_s']} events/s")
        for n in sizes:
            conn = postgres.connect(target)
            conn.execute("TRUNCATE events, tracks, runs CASCADE")
            filled(folder, n, opened)
            conn.execute("ANALYZE")
            (stored,) = conn.execute("SELECT count(*) FROM events").fetchone()
            assert stored == n, f"{stored} events on the server, {n} written"
            out["query_p95_ms"][n] = query_p95(folder, repeats, conn, "%s")
            conn.close()
            print(f"query p95 over {n:,} events (ms)      SQLite  PostgreSQL")
            for name, ms in out["query_p95_ms"][n].items():
                print(f"  {name:<30}{sqlite.get(n, {}).get(name, float('nan')):>10}{ms:>12}")
    finally:
        server.remove()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default="reports/event_store.json")
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--speed", type=float, default=100.0, help="camera time per second of wall")
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--only-budget", action="store_true", help="the write budget alone")
    ap.add_argument("--no-budget", action="store_true", help="without the write budget")
    ap.add_argument("--postgres", action="store_true", help="PostgreSQL side by side")
    ap.add_argument("--pg-sizes", default="10000,100000")
    args = ap.parse_args()
    report: dict = {"machine": "a loaded 2-core VM shared by 5 engineers; times are indicative"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        report["write_budget"] = (
            []
            if args.no_budget
            else [
                write_budget(folder, True, args.speed, b)
                for b in sorted({2.0, BATCH_S, 30.0, 60.0})
            ]
            + [write_budget(folder, False, args.speed)]
        )
        for r in report["write_budget"]:
            print(
                f"write budget {r['scene']:>5}, batch {r['batch_s']:>4g} s: {r['events']} events, "
                f"{r['commits']} commits, {r['bytes_written_per_camera_hour'] / 1e6:.2f} MB "
                f"written per camera-hour, files {r['file_bytes'] / 1e6:.2f} MB"
            )
        if args.only_budget:
            write_json(args.json, report)
            return
        report["insert"] = insert_rate(folder)
        print(f"insert: {report['insert']['events_per_s']} events/s")
        report["query_p95_ms"] = {}
        for n in (int(x) for x in args.sizes.split(",")):
            got = query_p95(filled(folder, n), args.repeats)
            report["query_p95_ms"][n] = got
            print(f"query p95 over {n:,} events (ms): {got}")
        if args.postgres:
            sizes = [int(x) for x in args.pg_sizes.split(",")]
            report["postgres"] = postgres_side(folder, sizes, args.repeats, report["query_p95_ms"])
    write_json(args.json, report)


if __name__ == "__main__":
    main()
