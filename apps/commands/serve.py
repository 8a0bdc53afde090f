"""edgert serve: bundles behind a real Triton Inference Server (KServe v2 HTTP/gRPC, dynamic
batching, metrics), through PyTriton."""

from __future__ import annotations

import argparse

from edgert.apps.argtypes import BACKENDS, PRECISIONS, nonneg_int, port, positive_int
from edgert.apps.swap.options import SwapOptions

EPILOG = """examples:
  edgert serve mobilenet_v2.edgert                       127.0.0.1:8000 (HTTP), :8001 (gRPC), :8002 (metrics)
  edgert serve a.edgert b.edgert --host 0.0.0.0 --instances 2 --max-batch 8

Models: NAME (the bundle's tensors) and NAME_image (one JPEG/PNG per request -> JSON results).
`edgert export-triton` instead writes a repository for a stock Triton with the TensorRT or ONNX
Runtime backend (no Python in the request path). See docs/serving.md.
"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve bundles behind Triton Inference Server (e.g. edgert serve m.edgert)",
        description="Serve bundles behind a real Triton Inference Server (PyTriton): KServe v2 "
        "HTTP and gRPC, dynamic batching, Prometheus metrics. Needs the serve extra.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("bundles", metavar="BUNDLE", nargs="+")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--http-port", type=port, default=8000)
    p.add_argument("--grpc-port", type=port, default=8001)
    p.add_argument("--metrics-port", type=port, default=8002)
    p.add_argument(
        "--edgert-metrics-port",
        type=port,
        metavar="PORT",
        help="edgert's own /metrics (power, energy per inference, build info), /live "
        "and /ready (200 only once every model answers) on --host:PORT; needs "
        "edgert[telemetry]",
    )
    p.add_argument("--sysfs-root", metavar="DIR")
    p.add_argument("--max-batch", type=positive_int, help="default: the bundle's maximum batch")
    p.add_argument(
        "--max-queue-delay-us",
        type=nonneg_int,
        default=500,
        help="dynamic batching: longest wait for a fuller batch (default 500)",
    )
    p.add_argument("--instances", type=positive_int, default=1, help="model instances (default 1)")
    p.add_argument(
        "--drain-timeout",
        type=positive_int,
        default=5,
        metavar="S",
        help="on SIGTERM/Ctrl-C: longest wait for requests in flight (default 5)",
    )
    p.add_argument("--backend", default="auto", choices=BACKENDS)
    p.add_argument("--precision", default="auto", choices=PRECISIONS)
    SwapOptions.add_arguments(
        p,
        what="every bundle path given",
        port="--edgert-metrics-port (a loopback --host only)",
        sample="the images of the last requests",
        rollback=False,
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from edgert.apps.serve import ServeConfig, serve

    cfg = ServeConfig(
        bundles=args.bundles,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        max_batch=args.max_batch,
        max_queue_delay_us=args.max_queue_delay_us,
        instances=args.instances,
        backend=args.backend,
        precision=args.precision,
        drain_s=args.drain_timeout,
        edgert_metrics_port=args.edgert_metrics_port,
        sysfs_root=args.sysfs_root,
        swap=SwapOptions.from_args(args),
    )
    try:
        serve(cfg, say=lambda line: print(line, flush=True))
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: Triton was stopped on the way out
        print("stopped", flush=True)
    return 0
