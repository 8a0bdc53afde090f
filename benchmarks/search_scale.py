"""Exact search over stored track embeddings at scale (issue 70): a store with N tracks, each with
a 1280-d vector (MobileNetV2's pooled features' size) in the stored form (int8 by default), then
what ``GET /api/search`` does (:mod:`edgert.apps.store.search`): the first read of the vectors
into memory, then queries ``similar_to`` a random track (no filter; and with a camera filter,
half the tracks), each answering the top 20 with their tracks. Reported per N: the store's
bytes, the first read's seconds, the process's RSS growth after it, and query p50 / p95 / max
milliseconds. Goal (this project's): p95 <= 50 ms at 100k within 512 MB of RSS.

From ``coarse.MIN_ROWS`` vectors on, search scans a projection of them first
(:mod:`edgert.apps.store.coarse`) and re-scores the best candidates exactly: reported too are the
projection's build seconds and recall@20 of each answer against exact search (the int8 pass over
every row, its best 256 re-scored exactly: what search does below ``coarse.MIN_ROWS``).

Vectors (``--data``): ``clustered`` (default) are built as image embeddings are: groups of similar
ones (50 a group) around centres, both spread with a power-law spectrum (the k-th direction's
variance ~ 1/k, as a CNN's pooled features' is) turned by a random rotation, on a common offset;
``random`` are random unit vectors, with no structure at all (the worst case for any
approximate search). Timing numbers are only as good as the machine is quiet.

    python benchmarks/search_scale.py [--sizes 10000,100000,1000000] [--queries 50]
        [--form int8] [--data clustered] [--json reports/search_scale.json]
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

from edgert.apps.store import coarse, query, schema, search  # noqa: E402
from edgert.runtime import embeddings  # noqa: E402

DIM = 1280
CHUNK = 20000


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


GROUP = 50  # clustered: vectors around one centre


def maker(data: str, seed: int):
    """``make(start, m)``: the unit vectors of rows start..start+m (``--data``)."""
    rng = np.random.default_rng(seed)
    if data == "random":
        return lambda start, m: rng.standard_normal((m, DIM)).astype(np.float32)
    spread = (1.0 / np.arange(1, DIM + 1)) ** 0.5
    turn = np.linalg.qr(rng.standard_normal((DIM, DIM)))[0].astype(np.float32)
    offset = np.abs(rng.standard_normal(DIM)).astype(np.float32) * 0.05

    def make(start: int, m: int) -> np.ndarray:
        groups = np.arange(start, start + m) // GROUP
        first = int(groups[0])
        each = [
            np.random.default_rng((seed, g)).standard_normal(DIM)
            for g in range(first, int(groups[-1]) + 1)
        ]
        centres = np.stack(each)[groups - first]
        x = (centres + 0.6 * rng.standard_normal((m, DIM))) * spread
        return (x.astype(np.float32) @ turn) + offset

    return make


def fill(path: Path, n: int, form: str, data: str = "clustered", seed: int = 0) -> None:
    conn = schema.connect(path)
    make = maker(data, seed)
    conn.execute("BEGIN")
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        unit = embeddings.normalise(make(start, m))[0]
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


def exact_ids(conn, v: search.Vectors, f, target: int) -> list:
    """The track ids exact search answers (every row scored, the best 256 re-scored)."""
    q = v.unit(np.array([v.where[target]]))[0]
    rows = search.candidates(conn, f, v)
    sims = v.similarities(q, rows)
    m = min(len(sims), search.RESCORE)
    near = np.argpartition(-sims, m - 1)[:m]
    near = near if rows is None else rows[near]
    best = near[np.argsort(-v.exact(q, near), kind="stable")[: f.limit]]
    return [int(t) for t in v.tracks[best]]


def one(n: int, queries: int, form: str, data: str, folder: Path) -> dict:
    path = folder / f"s{n}.db"
    fill(path, n, form, data)
    conn = query.open_read(path)
    before = rss_mb()
    index = search.Index()
    t = time.perf_counter()
    index.refresh(conn)
    load_s = time.perf_counter() - t
    _, v = index.vectors(None)
    t = time.perf_counter()
    built = v.ready() is not None
    build_s = time.perf_counter() - t
    grown = rss_mb() - before
    rng = np.random.default_rng(1)
    out = {"tracks": n, "store_mb": round(path.stat().st_size / 2**20, 1)}
    out["first_read_s"] = round(load_s, 3)
    out["coarse"] = built
    out["build_s"] = round(build_s, 3)
    out["rss_growth_mb"] = round(grown, 1)
    for name, given in (("no filter", {}), ("camera filter", {"camera": "cam1"})):
        times, recall = [], []
        for _ in range(queries):
            target = int(rng.integers(0, n // 2)) * 2 + 1  # of cam1: in both answers
            f, own = search.parse({**given, "similar_to": str(target)})
            t = time.perf_counter()
            found = search.search(conn, index, f, similar_to=own["similar_to"])
            times.append((time.perf_counter() - t) * 1000)
            assert found["results"][0]["track"]["id"] == target
            want = exact_ids(conn, v, f, target)
            got = [r["track"]["id"] for r in found["results"]]
            recall.append(len(set(got) & set(want)) / len(want))
        out[name] = {
            "p50_ms": round(float(np.percentile(times, 50)), 2),
            "p95_ms": round(float(np.percentile(times, 95)), 2),
            "max_ms": round(max(times), 2),
            "recall_at_20": round(float(np.mean(recall)), 4),
            "recall_min": round(float(np.min(recall)), 4),
        }
    conn.close()
    path.unlink()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--form", default="int8", choices=embeddings.FORMS)
    ap.add_argument("--data", default="clustered", choices=("clustered", "random"))
    ap.add_argument("--json", default="reports/search_scale.json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.sizes.split(",")):
            rows.append(one(n, args.queries, args.form, args.data, Path(tmp)))
            r = rows[-1]
            print(
                f"{n:>8} tracks  store {r['store_mb']:>7} MB  first read {r['first_read_s']:>6} s  "
                f"build {r['build_s']:>6} s  RSS +{r['rss_growth_mb']:>6} MB  p50/p95 "
                f"{r['no filter']['p50_ms']}/{r['no filter']['p95_ms']} ms recall@20 "
                f"{r['no filter']['recall_at_20']}  (camera filter {r['camera filter']['p50_ms']}/"
                f"{r['camera filter']['p95_ms']} ms recall@20 "
                f"{r['camera filter']['recall_at_20']})",
                flush=True,
            )
    meta = {"dim": DIM, "form": args.form, "data": args.data, "queries": args.queries}
    meta.update(coarse_min=coarse.MIN_ROWS, coarse_dims=coarse.DIMS)
    meta.update(candidates_at_least=coarse.CANDIDATES, candidates_of_1m=coarse.candidates(10**6))
    write_json(args.json, {**meta, "rows": rows})


if __name__ == "__main__":
    main()
