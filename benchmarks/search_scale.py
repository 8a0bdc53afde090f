"""Exact search over stored track embeddings at scale (issue 70): a store with N tracks, each with
a 1280-d vector (MobileNetV2's pooled features' size) in the stored form (int8 by default), then
what ``GET /api/search`` does (:mod:`edgert.apps.store.search`): the first read of the vectors
into memory, then queries ``similar_to`` a random track (no filter; and with a camera filter,
half the tracks), each answering the top 20 with their tracks. Reported per N: the store's
bytes, the first read's seconds, the process's RSS growth after it, and query p50 / p95 / max
milliseconds. Goal (this project's): p95 <= 50 ms at 100k within 512 MB of RSS.

Vectors are random unit vectors (search costs the same whatever they hold). Timing numbers are
only as good as the machine is quiet.

    python benchmarks/search_scale.py [--sizes 10000,100000,1000000] [--queries 50]
        [--form int8] [--json reports/search_scale.json]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from json_report import write_json  # noqa: E402

from edgert.apps.store import query, schema, search  # noqa: E402
from edgert.runtime import embeddings  # noqa: E402

DIM = 1280
CHUNK = 20000


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fill(path: Path, n: int, form: str, seed: int = 0) -> None:
    conn = schema.connect(path)
    rng = np.random.default_rng(seed)
    conn.execute("BEGIN")
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        unit = embeddings.normalise(rng.standard_normal((m, DIM)).astype(np.float32))[0]
        ids = range(start + 1, start + m + 1)
        conn.executemany(
            "INSERT INTO tracks (id, run, stream, track_id, camera, label, first_seen, last_seen) "
            "VALUES (?, 'r', ?, ?, ?, 'person', ?, ?)",
            [(i, i % 2, i, f"cam{i % 2}", float(i), float(i + 5)) for i in ids],
        )
        conn.executemany(
            "INSERT INTO embeddings (track, model, dim, form, vector, time) VALUES (?,?,?,?,?,?)",
            [
                (i, "mnv2", DIM, form, embeddings.encode(u, form), float(i))
                for i, u in zip(ids, unit, strict=True)
            ],
        )
    conn.execute("COMMIT")
    conn.close()


def one(n: int, queries: int, form: str, folder: Path) -> dict:
    path = folder / f"s{n}.db"
    fill(path, n, form)
    conn = query.open_read(path)
    before = rss_mb()
    index = search.Index()
    t = time.perf_counter()
    index.refresh(conn)
    load_s = time.perf_counter() - t
    grown = rss_mb() - before
    rng = np.random.default_rng(1)
    out = {"tracks": n, "store_mb": round(path.stat().st_size / 2**20, 1)}
    out["first_read_s"] = round(load_s, 3)
    out["rss_growth_mb"] = round(grown, 1)
    for name, given in (("no filter", {}), ("camera filter", {"camera": "cam1"})):
        times = []
        for _ in range(queries):
            target = int(rng.integers(0, n // 2)) * 2 + 1  # of cam1: in both answers
            f, own = search.parse({**given, "similar_to": str(target)})
            t = time.perf_counter()
            found = search.search(conn, index, f, similar_to=own["similar_to"])
            times.append((time.perf_counter() - t) * 1000)
            assert found["results"][0]["track"]["id"] == target
        out[name] = {
            "p50_ms": round(float(np.percentile(times, 50)), 2),
            "p95_ms": round(float(np.percentile(times, 95)), 2),
            "max_ms": round(max(times), 2),
        }
    conn.close()
    path.unlink()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--form", default="int8", choices=embeddings.FORMS)
    ap.add_argument("--json", default="reports/search_scale.json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.sizes.split(",")):
            rows.append(one(n, args.queries, args.form, Path(tmp)))
            r = rows[-1]
            print(
                f"{n:>8} tracks  store {r['store_mb']:>7} MB  first read {r['first_read_s']:>6} s  "
                f"RSS +{r['rss_growth_mb']:>6} MB  p50/p95 {r['no filter']['p50_ms']}/"
                f"{r['no filter']['p95_ms']} ms  (camera filter {r['camera filter']['p50_ms']}/"
                f"{r['camera filter']['p95_ms']} ms)",
                flush=True,
            )
    write_json(args.json, {"dim": DIM, "form": args.form, "queries": args.queries, "rows": rows})


if __name__ == "__main__":
    main()
