"""How ``benchmarks/streams.py`` runs one variant and reads it: the decoder alone in a child
process (the floors), ``edgert camera`` with its /metrics and events, and what /proc says of a
process (CPU by thread, page faults, RSS)."""

from __future__ import annotations

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

from tests.ports import free_ports  # noqa: E402
from tests.power_plant import CLOCK_TICKS, cpu_seconds  # noqa: E402


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
pulls = chain in ("pull", "model")  # a Python thread a stream takes each frame from an appsink
model = None
if chain == "model":  # the bundle's work in each pulling thread, as a minimal program runs it
    from edgert.runtime.malloc import keep_freed_memory
    from edgert.runtime.tasks import load_task_model
    keep_freed_memory()  # as edgert camera
    model = load_task_model(urls.pop(0), spin=False)
have = media.elements()
hw = media.hardware_decoder(have)
dec = "nvv4l2decoder" if hw else "avdec_h264 thread-type=slice"
if chain in ("scale", "pull", "model"):  # the model's size and BGR, as edgert's source asks
    dec += (" ! nvvidconv ! video/x-raw,width=640,height=360,format=BGRx" if hw else
            " ! videoscale method=bilinear ! video/x-raw,width=640,height=360 ! videoconvert"
            " ! video/x-raw,format=BGR")
sink = ("appsink sync=false max-buffers=2 drop=true" if pulls  # edgert's
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
            frame = np.frombuffer(info.data, np.uint8).copy()
            buf.unmap(info)
            if model is not None:  # 640x360 BGR of a 1080p camera: letterbox, infer, decode
                tensor, t = model.preprocess(frame.reshape(360, 640, 3), (1080, 1920))
                model.postprocess(model.infer(model.collate([tensor])), [t])
        age(buf)
        pulled[k] += 1

for k in range(len(urls)):
    if pulls:
        threading.Thread(target=pull, args=(k,), name=f"pull-{k}", daemon=True).start()
    else:
        pad = pipe.get_by_name(f"s{k}").get_static_pad("sink")
        pad.add_probe(Gst.PadProbeType.BUFFER, arrived)
pipe.set_state(Gst.State.PLAYING)
print(json.dumps({"decoder": dec.split()[0]}), flush=True)
for line in sys.stdin:  # each line: the frames each sink has taken so far, latency so far
    counts = list(pulled) if pulls else [
        pipe.get_by_name(f"s{k}").get_property("stats").get_value("rendered")
        for k in range(len(urls))]
    seen = sorted(ages)
    q = {f"p{p}_ms": 1e3 * seen[min(len(seen) - 1, p * len(seen) // 100)] if seen else None
         for p in (50, 95)}
    print(json.dumps({"counts": counts, **q}), flush=True)
pipe.set_state(Gst.State.NULL)
"""


def floor_run(
    urls: list[str], warmup: float, seconds: float, chain: str = "decode", bundle=None
) -> dict:
    """The decoder alone on the N streams (``chain`` "scale": and scaled to 640x360 BGR; "pull":
    that, pulled and copied out by a Python thread a stream; "model": each pulled frame then
    run through ``bundle`` in that thread, preprocess, infer and postprocess, nothing else):
    frames each sink took over the window, latency p50/p95 (whole run), CPU, page faults, CPU
    by thread, RSS."""
    proc = subprocess.Popen(
        [sys.executable, "-c", FLOOR_CHILD, chain, *([str(bundle)] if bundle else []), *urls],
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
