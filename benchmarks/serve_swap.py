"""What a model swap costs ``edgert serve`` (issue 39): requests failed, the latency of the requests
around a swap against the same server without swaps, the time from ``POST /model`` to the new
version answering, and the memory of the serving process and Triton's stubs.

``edgert serve`` (its own process, PyTriton's Triton) serves bundle A; ``--clients`` threads send
image requests (``NAME_image``, a JPEG each, over HTTP) without pause. For ``--seconds`` nothing
is swapped (the reference); then ``--swaps`` swaps alternate between B and A through POST /model,
each sent once the one before is freed. A request is "near a swap" when it was sent within 0.5 s
of the first answer of the new version. Runs where PyTriton is (``make test-serve``'s
environment, numpy < 2); A and B are two bundles of one name (``--bundles A B``; by default the
32-px test classifier and a retrained copy of it).

    .venv-serve/bin/python benchmarks/serve_swap.py [--json reports/serve_swap.json]
        [--swaps 10] [--clients 4] [--seconds 10] [--bundles A B] [--arenas edgert,16]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.json_report import write_json  # noqa: E402
from tests.procs import rss_mb  # noqa: E402


def _bundles(folder: Path) -> tuple[Path, Path]:
    from tests.apps.test_serve import _variant
    from tests.tiny import classifier_bundle

    a = classifier_bundle(folder / "a", size=32)
    return a, _variant(a, folder / "b", lambda w: w + 0.01)


def _memory(pid: int) -> float:
    """MiB resident in the server and Triton with its stubs (every descendant)."""
    from edgert.apps.processes import descendants

    total = 0.0
    for p in [pid, *descendants(pid)]:
        with contextlib.suppress(OSError, StopIteration):  # gone, or exiting (no VmRSS)
            total += rss_mb(p)
    return total


class Clients:
    def __init__(self, http: int, n: int, name: str) -> None:
        import cv2
        import tritonclient.http as httpclient

        from edgert.runtime.sample_data import photo_path

        self.jpeg = cv2.imencode(".jpg", cv2.imread(str(photo_path("chelsea"))))[1].tobytes()
        self.httpclient, self.http, self.model = httpclient, http, f"{name}_image"
        self.rows: list = []  # (sent, latency s, model label or None)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        h = self.httpclient.InferenceServerClient(f"127.0.0.1:{self.http}")
        while not self.stop.is_set():
            inp = self.httpclient.InferInput("image", [1, 1], "BYTES")
            inp.set_data_from_numpy(np.array([[self.jpeg]], dtype=np.object_))
            sent = time.monotonic()
            try:
                out = h.infer(self.model, [inp])
                label = json.loads(out.as_numpy("result")[0][0])["model"]
            except Exception:  # noqa: BLE001 - a failed request is what is counted
                label = None
            with self.lock:
                self.rows.append((sent, time.monotonic() - sent, label))

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)


def _pct(values: list, q: float) -> float | None:
    return round(float(np.percentile(values, q)) * 1e3, 1) if values else None


def run(first: Path, second: Path, name: str, a, arenas: str) -> dict:
    """One server (``MALLOC_ARENA_MAX=arenas``, or edgert's own choice for "edgert"): the
    reference, then the swaps."""
    from tests.apps.test_serve import _json_http, start
    from tests.ports import free_ports

    env_before = os.environ.get("MALLOC_ARENA_MAX")
    if arenas == "edgert":
        os.environ.pop("MALLOC_ARENA_MAX", None)
    else:
        os.environ["MALLOC_ARENA_MAX"] = arenas  # start() passes the environment on
    (port,) = free_ports(1)
    roots = {str(Path(first).resolve().parent), str(Path(second).resolve().parent)}
    allow = [x for r in sorted(roots) for x in ("--allow-models", r)]
    try:
        info = start(first, name, "--edgert-metrics-port", port, "--model-endpoint", *allow)
    finally:
        if env_before is None:
            os.environ.pop("MALLOC_ARENA_MAX", None)
        else:
            os.environ["MALLOC_ARENA_MAX"] = env_before
    proc = info["proc"]
    url = f"http://127.0.0.1:{port}"
    try:
        clients = Clients(info["http"], a.clients, name)
        time.sleep(2.0)  # warm
        t_ref = time.monotonic()
        mem = {"before": _memory(proc.pid), "peak": 0.0}
        server_before = rss_mb(proc.pid)
        time.sleep(a.seconds)
        t_swaps = time.monotonic()
        timeline = []
        for i in range(a.swaps):
            target = second if i % 2 == 0 else first
            sent = time.monotonic()
            code, said = _json_http("POST", f"{url}/model", {"bundle": str(target)})
            assert code == 202, said
            while True:  # promoted, and the old version freed (GET /model: not busy)
                m = _json_http("GET", f"{url}/model")[1]
                mem["peak"] = max(mem["peak"], _memory(proc.pid))
                if m["swaps"] >= i + 1 and not m["busy"]:
                    break
                time.sleep(0.05)
            label = m["models"][name]["label"]
            with clients.lock:
                answered = [s + lat for s, lat, lab in clients.rows if lab == label and s >= sent]
            timeline.append(
                {
                    "first_answer_s": round(min(answered) - sent, 3) if answered else None,
                    "freed_s": round(time.monotonic() - sent, 3),
                    "triton_version": m["models"][name]["triton_version"],
                    "server_mb": round(rss_mb(proc.pid), 1),
                    "all_mb": round(_memory(proc.pid), 1),
                }
            )
            time.sleep(0.5)
        mem["after"] = _memory(proc.pid)
        clients.close()
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    rows = clients.rows
    ref = [lat for s, lat, lab in rows if t_ref <= s < t_swaps]
    switches = [
        cur[0] + cur[1]
        for prev, cur in zip(rows, rows[1:], strict=False)
        if prev[2] and cur[2] and prev[2] != cur[2] and cur[0] >= t_swaps
    ]
    near = [lat for s, lat, _ in rows if s >= t_swaps and any(abs(s - w) <= 0.5 for w in switches)]
    during = [lat for s, lat, _ in rows if s >= t_swaps]
    firsts = [t["first_answer_s"] for t in timeline if t["first_answer_s"] is not None]
    frees = [t["freed_s"] for t in timeline]
    return {
        "malloc_arena_max": arenas,
        "requests": len(rows),
        "failed": sum(1 for _, _, lab in rows if lab is None),
        "reference": {"requests": len(ref), "p50_ms": _pct(ref, 50), "p99_ms": _pct(ref, 99)},
        "with_swaps": {
            "requests": len(during),
            "p50_ms": _pct(during, 50),
            "p99_ms": _pct(during, 99),
        },
        "near_swap": {"requests": len(near), "p50_ms": _pct(near, 50), "p99_ms": _pct(near, 99)},
        "request_to_new_version_s": {
            "p50": round(statistics.median(firsts), 3) if firsts else None,
            "max": round(max(firsts), 3) if firsts else None,
        },
        "request_to_old_freed_s": {"p50": round(statistics.median(frees), 3), "max": max(frees)},
        "memory_mb": {k: round(v, 1) for k, v in mem.items()},
        "server_process_mb": {
            "before": round(server_before, 1),
            "after": timeline[-1]["server_mb"] if timeline else None,
        },
        "timeline": timeline,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default="reports/serve_swap.json")
    ap.add_argument("--swaps", type=int, default=10)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0, help="the reference, without swaps")
    ap.add_argument("--bundles", nargs=2, type=Path, metavar=("A", "B"))
    ap.add_argument(
        "--arenas",
        default="edgert,16",
        help="MALLOC_ARENA_MAX of each server run, side by side (edgert: its own choice, 2; "
        "16: glibc's default on 2 cores)",
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        first, second = a.bundles or _bundles(Path(tmp))
        name = json.loads((Path(first) / "manifest.json").read_text())["name"]
        runs = [run(first, second, name, a, arenas) for arenas in a.arenas.split(",")]
    print(f"\n{name}: {a.swaps} swaps through POST /model, {a.clients} clients without pause")
    head = (
        "MALLOC_ARENA_MAX",
        "requests",
        "failed",
        "ref p50",
        "ref p99",
        "swaps p50",
        "swaps p99",
        "near p99",
        "new s",
        "freed s",
        "server MB",
    )
    print("".join(f"{h:>11}" for h in head))
    for r in runs:
        cells = (
            r["malloc_arena_max"],
            r["requests"],
            r["failed"],
            r["reference"]["p50_ms"],
            r["reference"]["p99_ms"],
            r["with_swaps"]["p50_ms"],
            r["with_swaps"]["p99_ms"],
            r["near_swap"]["p99_ms"],
            r["request_to_new_version_s"]["p50"],
            r["request_to_old_freed_s"]["p50"],
            f"{r['server_process_mb']['before']:.0f}->{r['server_process_mb']['after']:.0f}",
        )
        print("".join(f"{str(c):>11}" for c in cells))
    for r in runs:
        print(
            f"MALLOC_ARENA_MAX={r['malloc_arena_max']}: server MB after each swap: "
            + ", ".join(f"{t['server_mb']:.0f}" for t in r["timeline"])
        )
    write_json(
        a.json,
        {
            "bundles": [str(first), str(second)],
            "clients": a.clients,
            "swaps": a.swaps,
            "runs": runs,
            "cpu_count": os.cpu_count(),
        },
    )


if __name__ == "__main__":
    main()
