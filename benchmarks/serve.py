"""edgert serve under load: 1, 4 and 16 concurrent gRPC clients (one image tensor per request) on a
dynamic-batch bundle, against in-process Engine.infer at batch 1 and batch 8 on the same machine.
Prints a table and writes JSON. Runs in the serve environment (PyTriton needs numpy < 2):

    .venv/bin/edgert export zoo:mobilenet_v2 -o /tmp/mv2.edgert --dynamic-batch --max-batch 8
    .venv-serve/bin/python benchmarks/serve.py /tmp/mv2.edgert [--seconds 8] [--json reports/serve.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.ports import free_ports  # noqa: E402


def in_process(bundle: str, batch: int, seconds: float) -> dict:
    from edgert.runtime import Engine

    with Engine.load(bundle) as engine:
        x = np.random.default_rng(0).random((batch, *engine.inputs[0].shape[1:]), np.float32)
        for _ in range(3):
            engine.infer(x)
        n, lat, t0 = 0, [], time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            t = time.perf_counter()
            engine.infer(x)
            lat.append(time.perf_counter() - t)
            n += batch
        elapsed = time.perf_counter() - t0
    return {
        "run": f"in-process batch {batch}",
        "ips": n / elapsed,
        "p50_ms": float(np.percentile(lat, 50) * 1e3),
        "p99_ms": float(np.percentile(lat, 99) * 1e3),
    }


def metric(port: int, name: str, model: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
        text = r.read().decode()
    m = re.search(rf'^{name}{{model="{model}",version="1"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def clients(n: int, grpc_port: int, metrics_port: int, model: str, shape, seconds: float) -> dict:
    import tritonclient.grpc as grpcclient

    x = np.random.default_rng(1).random((1, *shape), np.float32)
    lat: list[float] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds
    count0 = metric(metrics_port, "nv_inference_count", model)
    exec0 = metric(metrics_port, "nv_inference_exec_count", model)

    def worker():
        c = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        inp = grpcclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        mine = []
        while time.perf_counter() < stop:
            t = time.perf_counter()
            c.infer(model, [inp])
            mine.append(time.perf_counter() - t)
        with lock:
            lat.extend(mine)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    count = metric(metrics_port, "nv_inference_count", model) - count0
    execs = metric(metrics_port, "nv_inference_exec_count", model) - exec0
    return {
        "run": f"serve, {n} gRPC clients",
        "ips": len(lat) / elapsed,
        "p50_ms": float(np.percentile(lat, 50) * 1e3),
        "p99_ms": float(np.percentile(lat, 99) * 1e3),
        "mean_batch": count / execs if execs else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("bundle")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--json", default="reports/serve.json")
    ap.add_argument("--queue-delay-us", type=int, default=5000, help="the server's batching delay")
    args = ap.parse_args()
    from edgert.runtime import Bundle

    manifest = Bundle(args.bundle).manifest
    rows = [in_process(args.bundle, 1, args.seconds), in_process(args.bundle, 8, args.seconds)]
    http, grpc, metrics = free_ports(3)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "serve",
            args.bundle,
            "--http-port",
            str(http),
            "--grpc-port",
            str(grpc),
            "--metrics-port",
            str(metrics),
            "--max-batch",
            "8",
            "--max-queue-delay-us",
            str(args.queue_delay_us),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        for line in server.stdout:
            if line.startswith("ready:"):
                break
        else:
            raise SystemExit("the server did not start")
        for n in (1, 4, 16):
            rows.append(
                clients(n, grpc, metrics, manifest.name, manifest.inputs[0].shape[1:], args.seconds)
            )
    finally:
        server.terminate()
        server.wait(30)
    best = rows[1]["ips"]
    print(f"{'run':<26}{'inf/s':>9}{'x batch-8':>10}{'p50 ms':>9}{'p99 ms':>9}{'mean batch':>12}")
    for r in rows:
        mb = f"{r['mean_batch']:.2f}" if r.get("mean_batch") else "-"
        print(
            f"{r['run']:<26}{r['ips']:>9.1f}{r['ips'] / best:>10.2f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{mb:>12}"
        )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    print(f"json: {args.json}")


if __name__ == "__main__":
    main()
