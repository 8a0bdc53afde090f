"""edgert camera: frames from a camera or stream through a model, results out, numbers for every stage."""

from __future__ import annotations

import argparse
import json
import sys

from edgert.runtime.tasks import TASK_SPECS

EPILOG = """sources (several allowed, mixed): csi://0, v4l2:///dev/video0, rtsp://..., file://clip.mp4 or
a path (video, image, folder, glob), synthetic://
outputs (several allowed): display://0, http://127.0.0.1:8080 (MJPEG + live stats page, a grid of
the streams), file://out.mp4 (out_<i>.mp4 per stream, or one mosaic with --mosaic); --jsonl FILE
logs a header line naming the streams, then one line per frame.

several sources: one engine; the frames of all streams are batched into one inference (up to
--batch, default one per stream within the model's largest batch), each stream with its own
capture thread and drop-oldest queue; a slow or dead stream is waited for at most
--batch-timeout-ms per batch, and a stream that ends or fails is reported while the rest go on.

examples:
  edgert camera mobilenet_v2.edgert --source synthetic:// --output http://127.0.0.1:8080 --duration 30
  edgert camera det.edgert --source v4l2:///dev/video0 --width 1280 --height 720 --codec mjpeg --task detect
  edgert camera det.edgert --source rtsp://cam1/live --source rtsp://cam2/live --source clip.mp4 \\
      --output http://127.0.0.1:8080 --output file://out.mp4 --mosaic
"""


def add_parser(sub) -> None:
    from edgert.apps.argtypes import add_power_arguments
    from edgert.apps.camera.analytics import TrackingOptions
    from edgert.apps.camera.app import ModelOptions, RunOptions
    from edgert.apps.camera.sinks import MqttOptions, SinkOptions
    from edgert.apps.camera.sources import SourceOptions

    p = sub.add_parser(
        "camera",
        help="camera inference app (e.g. edgert camera m.edgert --source csi://0 --output http://127.0.0.1:8080)",
        description="Run a model on frames from a camera, stream, video or images, with bounded latency "
        "(drop-oldest queues), per-stage timings, power and several outputs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ModelOptions.add_arguments(p, [t.name for t in TASK_SPECS.values() if t.camera])
    p.add_argument(
        "--source",
        action="append",
        metavar="URI",
        help="a camera, stream or file; repeat for several streams (default: synthetic://); "
        "${EDGERT_NAME} is replaced by that environment variable (keep passwords out of argv)",
    )
    SinkOptions.add_arguments(p)
    RunOptions.add_arguments(p)
    add_power_arguments(p)
    TrackingOptions.add_arguments(p, " and ".join(t.name for t in TASK_SPECS.values() if t.boxes))
    m = p.add_argument_group("telemetry (pip install 'edgert[telemetry]')")
    m.add_argument(
        "--metrics",
        metavar="[HOST:]PORT",
        help="Prometheus /metrics and the /live and /ready probes on HOST:PORT (host 127.0.0.1 "
        "unless given); the web viewer's port serves them too",
    )
    MqttOptions.add_arguments(m)
    SourceOptions.add_arguments(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def print_summary(s: dict) -> None:
    print(
        f"frames {s['frames_processed']} processed, {s['frames_dropped']} dropped, {s['fps']:.1f} fps over {s['seconds']:.1f} s ({s['backend']})"
    )
    for name, v in s["latency_ms"].items():
        print(
            f"  {name:<12} p50 {v['p50']:8.2f}  p90 {v['p90']:8.2f}  p99 {v['p99']:8.2f}  max {v['max']:8.2f} ms"
        )
    streams = s.get("streams") or []
    if len(streams) > 1:
        b = s["batch"]
        hist = ", ".join(f"{k}: {v}" for k, v in b["histogram"].items())
        print(f"batches {b['batches']}, mean size {b['mean']:.2f} of {b['max']} (sizes {hist})")
        for st in streams:
            e2e = st["latency_ms"].get("end_to_end", {})
            print(
                f"  [{st['stream']}] {st['frames_processed']:>6} processed {st['frames_dropped']:>6} dropped "
                f"{st['fps']:6.1f} fps  e2e p50 {e2e.get('p50', 0):7.1f} p99 {e2e.get('p99', 0):7.1f} ms  "
                f"{st['status']}  {st['source']}"
            )
    elif streams and streams[0]["status"].startswith("failed"):
        print(f"  stream {streams[0]['status']}")
    for st in streams:
        if "reconnects" in st and (st["reconnects"] or st["stalls"] or st["downtime_s"]):
            where = f"[{st['stream']}] " if len(streams) > 1 else ""
            print(
                f"{where}{st['decoder']}: {st['reconnects']} reconnects, {st['stalls']} stalls, "
                f"{st['downtime_s']:.1f} s without frames (last: {st['last_error']})"
            )
    if s.get("labels_seen"):
        print("labels seen: " + ", ".join(f"{k} ({n})" for k, n in s["labels_seen"].items()))
    if s.get("power_w") is not None:
        print(f"power {s['power_w']:.2f} W, {s['mj_per_frame']:.1f} mJ/frame")
    else:
        print(f"power unavailable ({s.get('power_reason')})")
    from edgert.apps.report import print_conditions

    print_conditions(s.get("conditions"))
    for out in _flat(s.get("outputs") or []):
        if out.get("output") == "mqtt":
            print(f"mqtt {out['broker']}: {mqtt_counts(out)}")
        if out.get("letterboxed"):
            print(
                f"{out['output']}: {out['letterboxed']} of {out['frames']} frames letterboxed "
                "(their size differs from the first frame's)"
            )
    for st in streams:
        for name, c in (st.get("counts") or {}).items():
            where = f"[{st['stream']}] " if len(streams) > 1 else ""
            if c["type"] == "line":
                print(f"{where}line {name}: in {c['in']}, out {c['out']}")
            else:
                dwell = (
                    f", mean dwell {c['dwell_s_mean']:.1f} s"
                    if c["dwell_s_mean"] is not None
                    else ""
                )
                print(f"{where}zone {name}: {c['entries']} entries, {c['exits']} exits{dwell}")
    for st in streams:
        if st.get("images_failed"):
            print(
                f"stream {st['stream']}: {st['images_failed']} images could not be read: "
                + ", ".join(st["images_failed_files"][:5])
            )


def _flat(reports: list) -> list:
    return [r for item in reports for r in (item if isinstance(item, list) else [item])]


def mqtt_counts(out: dict) -> str:
    """The MQTT line of the summary: what was delivered, and each way an event was lost."""
    parts = [f"{out['events']} events", f"{out['delivered']} delivered"]
    if out["dropped"]:
        parts.append(f"{out['dropped']} dropped from the full buffer while the broker was away")
    if out.get("refused"):
        parts.append(f"{out['refused']} refused by the broker")
    if out["buffered"]:
        parts.append(f"{out['buffered']} undelivered at the end")
    if out.get("backpressure_s"):
        parts.append(f"{out['backpressure_s']:.1f} s waited for the broker")
    return ", ".join(parts) + (
        f" (last error: {out['last_error']})"
        if out.get("last_error") and out["delivered"] < out["events"]
        else ""
    )


def problems(s: dict) -> tuple[list[str], int]:
    """What went wrong in a run that finished (outputs that failed, events that never reached
    the MQTT broker, images that could not be read) as sentences for stderr, and the exit code:
    0 when nothing did."""
    from edgert.apps.telemetry.mqtt import lost

    lines = list(s.get("output_errors") or [])
    for out in _flat(s.get("outputs") or []):
        if out.get("output") == "mqtt" and lost(out):
            lines.append(
                f"mqtt {out['broker']}: {lost(out)} of {out['events']} events were not "
                f"delivered ({out.get('last_error') or 'see the summary'})"
            )
    failed = sum(st.get("images_failed", 0) for st in s.get("streams") or [])
    if failed:
        lines.append(f"{failed} images could not be read and were skipped (named in the summary)")
    return lines, (2 if len(lines) > bool(failed) else 1 if failed else 0)


def config(args):
    """The run's configuration from the parsed flags: each component reads its own group;
    ``--jsonl``, ``--events`` and ``--mqtt`` become sinks of the table (``jsonl://FILE``,
    ``events://FILE``, the broker's URI)."""
    from edgert.apps.camera.analytics import TrackingOptions
    from edgert.apps.camera.app import CameraConfig, ModelOptions, RunOptions
    from edgert.apps.camera.sinks import SinkOptions, from_flag
    from edgert.apps.camera.sources import SourceOptions
    from edgert.apps.uris import expand
    from edgert.runtime.errors import OutputError, SourceError
    from edgert.runtime.power.session import PowerOptions

    try:  # ${EDGERT_...}: credentials from the environment, not the command line
        sources = [expand(s, "--source") for s in args.source or ["synthetic://"]]
    except ValueError as exc:
        raise SourceError(str(exc)) from None
    try:
        sinks = [expand(s, "--output") for s in args.output]
        for flag, value in (
            ("--jsonl", args.jsonl),
            ("--events", args.events),
            ("--mqtt", args.mqtt),
        ):
            if value is not None:  # the short forms of sinks in the table
                sinks.append(from_flag(flag, expand(value, flag)))
    except ValueError as exc:
        raise OutputError(str(exc)) from None
    return CameraConfig(
        model=ModelOptions.from_args(args),
        sources=sources,
        sinks=sinks,
        source_options=SourceOptions.from_args(args),
        sink_options=SinkOptions.from_args(args),
        tracking=TrackingOptions.from_args(args),
        power=PowerOptions(args.power_cap, args.temp_cap, args.sysfs_root),
        run=RunOptions.from_args(args),
        metrics=args.metrics,
    )


def run(args) -> int:
    from edgert.apps.camera.app import run_camera

    summary = run_camera(config(args), say=(lambda s: None) if args.json else print)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print_summary(summary)
    lines, code = problems(summary)
    for line in lines:
        print(f"edgert camera: error: {line}", file=sys.stderr)
    return code
