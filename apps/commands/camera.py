"""edgert camera: frames from a camera or stream through a model, results out, numbers for every stage."""

from __future__ import annotations

import argparse
import json
import sys

from edgert.apps.argtypes import (
    BACKENDS,
    PRECISIONS,
    fraction,
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
)
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
    p = sub.add_parser(
        "camera",
        help="camera inference app (e.g. edgert camera m.edgert --source csi://0 --output http://127.0.0.1:8080)",
        description="Run a model on frames from a camera, stream, video or images, with bounded latency "
        "(drop-oldest queues), per-stage timings, power and several outputs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL")
    p.add_argument(
        "--source",
        action="append",
        metavar="URI",
        help="a camera, stream or file; repeat for several streams (default: synthetic://); "
        "${EDGERT_NAME} is replaced by that environment variable (keep passwords out of argv)",
    )
    p.add_argument(
        "--output",
        action="append",
        default=[],
        metavar="URI",
        help="display://0, http://HOST:PORT, file://out.mp4",
    )
    p.add_argument(
        "--task",
        choices=[t.name for t in TASK_SPECS.values() if t.camera],
        help="default: the bundle's task",
    )
    p.add_argument("--power-cap", type=positive_float, metavar="W")
    p.add_argument("--temp-cap", type=positive_float, metavar="C",
                   help="pace inference so the hottest thermal zone settles at or below C °C")  # fmt: skip
    p.add_argument("--duration", type=positive_float, metavar="S")
    p.add_argument("--max-frames", type=positive_int, metavar="N", help="per stream")
    p.add_argument(
        "--batch",
        type=positive_int,
        metavar="N",
        help="frames per inference (default: the number of streams, within the model's largest batch)",
    )
    p.add_argument(
        "--batch-timeout-ms",
        type=nonneg_float,
        default=20.0,
        metavar="MS",
        help="how long a batch waits for the other streams once it has a frame (default 20)",
    )
    p.add_argument(
        "--mosaic", action="store_true", help="several streams: one video file (or window) tiled"
    )
    p.add_argument("--jsonl", metavar="FILE",
                   help="one JSON line per processed frame, after a header line per run (appended to)")  # fmt: skip
    boxes = " and ".join(t.name for t in TASK_SPECS.values() if t.boxes)
    t = p.add_argument_group(f"tracking and counting ({boxes} models)")
    t.add_argument("--track", action="store_true",
                   help="follow objects across frames: a track ID per detection (one tracker per stream)")  # fmt: skip
    t.add_argument("--line", action="append", default=[], metavar="[STREAM:]NAME=x1,y1,x2,y2",
                   help="count crossings of a line, per direction (pixels, or fractions of the "
                   "frame when all are 0..1); repeatable; implies --track")  # fmt: skip
    t.add_argument("--zone", action="append", default=[], metavar="[STREAM:]NAME=x1,y1,x2,y2,x3,y3,...",
                   help="count who is in a polygon, entries, exits and dwell time; repeatable; implies --track")  # fmt: skip
    t.add_argument("--events", metavar="FILE",
                   help="one JSON line per event: track_start, track_end, line_cross, zone_enter, "
                   "zone_exit; appended to, each run starting with run_start; implies --track")  # fmt: skip
    t.add_argument("--count-point", choices=["bottom_center", "center"], default="bottom_center",
                   help="the point of a box that counts (default bottom_center: where a person stands)")  # fmt: skip
    t.add_argument("--lost-seconds", type=nonneg_float, default=1.0, metavar="S",
                   help="how long a track waits for its object to be detected again (default 1)")  # fmt: skip
    m = p.add_argument_group("telemetry (pip install 'edgert[telemetry]')")
    m.add_argument("--metrics", metavar="[HOST:]PORT",
                   help="Prometheus /metrics and the /live and /ready probes on HOST:PORT (host "
                   "127.0.0.1 unless given); the web viewer's port serves them too")  # fmt: skip
    m.add_argument("--mqtt", metavar="URI",
                   help="mqtt://[user:pass@]host[:port]/PREFIX (mqtts:// for TLS; ${EDGERT_NAME} from "
                   "the environment): events on "
                   "PREFIX/events (QoS 1), heartbeats on PREFIX/streams/N/heartbeat, PREFIX/status "
                   "online/offline (retained, with a Last Will)")  # fmt: skip
    m.add_argument("--mqtt-buffer", type=positive_int, default=1000, metavar="N",
                   help="events kept while the broker is away, the oldest dropped first; while it "
                   "is connected a full buffer waits, nothing is dropped (default 1000)")  # fmt: skip
    m.add_argument("--mqtt-heartbeat", type=_heartbeat, default=10.0, metavar="S",
                   help="seconds between heartbeats (0: none; at least 0.5; default 10)")  # fmt: skip
    m.add_argument("--mqtt-protocol", choices=["5", "3.1.1"], default="5",
                   help="MQTT 5 (default: the broker's refusal of an event is seen) or 3.1.1")  # fmt: skip
    m.add_argument("--mqtt-ca", metavar="FILE", help="mqtts: the CA bundle (default: the system's)")
    m.add_argument("--mqtt-cert", metavar="FILE", help="mqtts: a client certificate")
    m.add_argument("--mqtt-key", metavar="FILE", help="mqtts: its key")
    m.add_argument("--mqtt-insecure", action="store_true",
                   help="mqtts: do not check the broker's host name")  # fmt: skip
    m.add_argument("--mqtt-client-id", metavar="ID",
                   help="default: edgert-HOSTNAME- and 8 random hex digits")  # fmt: skip
    p.add_argument(
        "--on-output-error",
        choices=["stop", "continue"],
        default="stop",
        help="when an output cannot be written (a full disk): stop the run (default), or go on "
        "without that output; either way the exit code is non-zero",
    )
    p.add_argument("--headless", action="store_true", help="never open a display window")
    p.add_argument("--backend", default="auto", choices=BACKENDS)
    p.add_argument("--precision", default="auto", choices=PRECISIONS)
    p.add_argument("--top-k", type=positive_int, default=3)
    p.add_argument("--conf", type=fraction, default=0.25)
    p.add_argument("--iou", type=fraction, default=0.45)
    p.add_argument("--width", type=positive_int)
    p.add_argument("--height", type=positive_int)
    p.add_argument("--fps", type=positive_float)
    p.add_argument("--codec", choices=["mjpeg", "yuyv"])
    p.add_argument("--loop", action="store_true", help="loop files, folders and globs")
    n = p.add_argument_group("network streams (rtsp://)")
    n.add_argument("--decoder", choices=["auto", "gstreamer", "ffmpeg"], default="auto",
                   help="auto (default): GStreamer for streams when PyGObject is there (NVDEC on a "
                   "Jetson), and for files when there is a hardware decoder; else OpenCV's FFmpeg")  # fmt: skip
    n.add_argument("--reconnect", type=_tries, default=5, metavar="N|forever",
                   help="tries per (re)connection of a stream that drops (default 5; forever for "
                   "cameras that reboot)")  # fmt: skip
    n.add_argument("--stall-timeout", type=positive_float, default=5.0, metavar="S",
                   help="a connected stream without a frame this long is a stall, reconnected (default 5)")  # fmt: skip
    n.add_argument("--rtsp-latency", type=nonneg_int, default=100, metavar="MS",
                   help="GStreamer's RTSP jitter buffer (default 100; GStreamer's own is 2000)")  # fmt: skip
    n.add_argument("--rtsp-transport", choices=["auto", "tcp", "udp"], default="auto",
                   help="RTP over TCP or UDP (default auto: UDP, then TCP)")  # fmt: skip
    p.add_argument("--sysfs-root", metavar="DIR")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def _heartbeat(text: str) -> float:
    """--mqtt-heartbeat: 0 (none) or at least 0.5 s (a broker is not a busy loop)."""
    from edgert.apps.telemetry.mqtt import HEARTBEAT_MIN_S

    value = nonneg_float(text)
    if 0 < value < HEARTBEAT_MIN_S:
        raise argparse.ArgumentTypeError(
            f"must be 0 (no heartbeats) or at least {HEARTBEAT_MIN_S:g} s, not {text}"
        )
    return value


def _tries(text: str):
    """--reconnect: a count of tries, or forever (None)."""
    if text.strip().lower() in ("forever", "inf", "always"):
        return None
    return positive_int(text)


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
            print(f"{where}{st['decoder']}: {st['reconnects']} reconnects, {st['stalls']} stalls, "
                  f"{st['downtime_s']:.1f} s without frames (last: {st['last_error']})")  # fmt: skip
    if s.get("labels_seen"):
        print("labels seen: " + ", ".join(f"{k} ({n})" for k, n in s["labels_seen"].items()))
    if s.get("power_w") is not None:
        print(f"power {s['power_w']:.2f} W, {s['mj_per_frame']:.1f} mJ/frame")
    else:
        print(f"power unavailable ({s.get('power_reason')})")
    from edgert.apps.commands.bench import print_conditions

    print_conditions(s.get("conditions"))
    for out in _flat(s.get("outputs") or []):
        if out.get("output") == "mqtt":
            print(f"mqtt {out['broker']}: {mqtt_counts(out)}")
        if out.get("letterboxed"):
            print(f"{out['output']}: {out['letterboxed']} of {out['frames']} frames letterboxed "
                  "(their size differs from the first frame's)")  # fmt: skip
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
            print(f"stream {st['stream']}: {st['images_failed']} images could not be read: "
                  + ", ".join(st["images_failed_files"][:5]))  # fmt: skip


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
    return ", ".join(parts) + (f" (last error: {out['last_error']})" if out.get("last_error")
                               and out["delivered"] < out["events"] else "")  # fmt: skip


def problems(s: dict) -> tuple[list[str], int]:
    """What went wrong in a run that finished (outputs that failed, events that never reached
    the MQTT broker, images that could not be read) as sentences for stderr, and the exit code:
    0 when nothing did."""
    from edgert.apps.telemetry.mqtt import lost

    lines = list(s.get("output_errors") or [])
    for out in _flat(s.get("outputs") or []):
        if out.get("output") == "mqtt" and lost(out):
            lines.append(f"mqtt {out['broker']}: {lost(out)} of {out['events']} events were not "
                         f"delivered ({out.get('last_error') or 'see the summary'})")  # fmt: skip
    failed = sum(st.get("images_failed", 0) for st in s.get("streams") or [])
    if failed:
        lines.append(f"{failed} images could not be read and were skipped (named in the summary)")
    return lines, (2 if len(lines) > bool(failed) else 1 if failed else 0)


def run(args) -> int:
    from edgert.apps.camera.app import CameraConfig, run_camera
    from edgert.apps.camera.sources import SourceOptions
    from edgert.apps.uris import expand
    from edgert.runtime.errors import OutputError, SourceError

    for flag, value in (("--events", args.events), ("--jsonl", args.jsonl)):
        if value is not None and not value.strip():
            raise OutputError(f"{flag} needs a file name, and it was given an empty one")
    try:  # ${EDGERT_...}: credentials from the environment, not the command line
        sources = [expand(s, "--source") for s in args.source or ["synthetic://"]]
    except ValueError as exc:
        raise SourceError(str(exc)) from None
    try:
        mqtt = expand(args.mqtt, "--mqtt") if args.mqtt else None
    except ValueError as exc:
        raise OutputError(str(exc)) from None
    cfg = CameraConfig(
        model=args.model,
        sources=sources,
        outputs=args.output,
        task=args.task,
        power_cap=args.power_cap,
        temp_cap=args.temp_cap,
        duration=args.duration,
        max_frames=args.max_frames,
        jsonl=args.jsonl,
        headless=args.headless,
        backend=args.backend,
        precision=args.precision,
        top_k=args.top_k,
        conf=args.conf,
        iou=args.iou,
        source_options=SourceOptions(
            width=args.width,
            height=args.height,
            fps=args.fps,
            codec=args.codec,
            loop=args.loop,
            decoder=args.decoder,
            reconnect_tries=args.reconnect,
            stall_timeout=args.stall_timeout,
            rtsp_latency_ms=args.rtsp_latency,
            rtsp_transport=args.rtsp_transport,
        ),
        sysfs_root=args.sysfs_root,
        batch=args.batch,
        batch_timeout_ms=args.batch_timeout_ms,
        mosaic=args.mosaic,
        on_output_error=args.on_output_error,
        track=args.track,
        lines=args.line,
        zones=args.zone,
        events=args.events,
        count_anchor=args.count_point,
        lost_seconds=args.lost_seconds,
        metrics=args.metrics,
        mqtt=mqtt,
        mqtt_protocol=args.mqtt_protocol,
        mqtt_buffer=args.mqtt_buffer,
        mqtt_heartbeat=args.mqtt_heartbeat,
        mqtt_ca=args.mqtt_ca,
        mqtt_cert=args.mqtt_cert,
        mqtt_key=args.mqtt_key,
        mqtt_insecure=args.mqtt_insecure,
        mqtt_client_id=args.mqtt_client_id,
    )
    summary = run_camera(cfg, say=(lambda s: None) if args.json else print)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print_summary(summary)
    lines, code = problems(summary)
    for line in lines:
        print(f"edgert camera: error: {line}", file=sys.stderr)
    return code
