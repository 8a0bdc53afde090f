"""Crash safety of a real camera (issue 69): ``edgert camera`` (its own process) on a busy looped
rendered scene (objects crossing a door line both ways, one lane entering a zone, a new track
every 1.25 s) with ``--store``, ``--clips`` (finished every few seconds) and ``--mqtt`` to a real
Mosquitto (Debian's, on a free loopback port; a subscriber with QoS 1 and a persistent session),
killed with SIGKILL at N random moments after it starts answering. After each kill, as the next
run (the restart) opens them: ``PRAGMA integrity_check`` is ok; every event the subscriber
received is in the store; every finished clip the store names plays (ffprobe: a duration over 0
and its frames decode; the clip in flight, ``NAME.mp4.part``, is finished by the restart and
checked after the next kill). What the kill lost: the events of the run's own events file
(``--events``: a line as each happens) that are not in the store, in events and in seconds (how
long before the kill the oldest of them happened): at most one batch window.

    python benchmarks/store_kill.py --camera [--kills 200] [--batch-s 10] [--minutes M]
        [--json reports/store_kill_camera.json]

The scene is a file played as fast as the camera goes (about 25 times real time on a loaded
2-core VM): a far busier event stream than a real camera's, every event's ``time`` the wall
clock's, so the loss in seconds is the wall clock's.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOOR, PEN = "door=160,0,160,240", "pen=200,0,320,0,320,120,200,120"
FPS, FRAMES, PERIOD, STEP = 10, 200, 25, 8  # a track per lane every PERIOD frames, STEP px each


def busy_scene(path: Path) -> Path:
    """20 s at 10 fps that loop without a seam: white squares cross the door (x=160) left to
    right along y=50 (through the pen, top right) and right to left along y=180, a new one in
    each lane every 2.5 s."""
    import cv2
    import numpy as np

    w, h, side = 320, 240, 60  # the blob detector's anchors: 24 px of its 128x96 input
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), FPS, (w, h))
    for i in range(FRAMES):
        img = np.zeros((h, w, 3), np.uint8)
        for j in range(FRAMES // PERIOD):
            x = -side + STEP * ((i - PERIOD * j) % FRAMES)
            for cx, cy in ((x, 50), (w - x, 180)):
                x0, y0 = int(cx - side / 2), int(cy - side / 2)
                if x0 + side > 0 and x0 < w:  # a slice's negative end would wrap around
                    img[y0 : y0 + side, max(0, x0) : x0 + side] = 255
        writer.write(img)
    writer.release()
    return path


def _camera(bundle: Path, video: Path, tmp: Path, n: int, url: str, batch_s: float):
    sys.path.insert(0, str(ROOT))
    from tests.procs import edgert

    return subprocess.Popen(
        edgert(
            *("camera", bundle, "--source", video, "--loop", "--headless"),
            *("--conf", "0.75", "--line", DOOR, "--zone", PEN),
            *("--clips", f"{tmp / 'clips'}?max_s=30", "--pre-roll", "1", "--post-roll", "1"),
            *("--store", f"{tmp / 'events.db'}?batch_s={batch_s}", "--mqtt", url),
            *("--events", tmp / f"events-{n}.jsonl"),
        ),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / f"camera-{n}.err", "wb"),  # noqa: SIM115 (the child's own)
        start_new_session=True,
    )


def _key(kind, track_id, t) -> tuple:
    return (kind, track_id, round(float(t), 3))


def _events_file(path: Path) -> list:
    """The run's events (not its run_start line): (key, time) each; a torn last line skipped."""
    out = []
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("event") not in (None, "run_start") and "time" in r:
            out.append((_key(r["event"], r.get("track_id"), r["time"]), float(r["time"])))
    return out


def _store(db: Path) -> tuple:
    """integrity_check's answer, the events' keys, the clips the rows name."""
    conn = sqlite3.connect(db, timeout=10)
    try:
        ok = conn.execute("PRAGMA integrity_check").fetchone()[0]
        rows = conn.execute("SELECT kind, track_id, time, clip FROM events").fetchall()
    finally:
        conn.close()
    return ok, {_key(k, t, at) for k, t, at, _ in rows}, {c for *_, c in rows if c}


def plays(clip: str) -> bool:
    """ffprobe: a duration over 0 and every frame of its video decodes, without an error."""
    p = subprocess.run(
        ["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries"]
        + ["format=duration:stream=nb_read_frames", "-of", "json", clip],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if p.returncode != 0 or p.stderr.strip():
        return False
    info = json.loads(p.stdout)
    frames = (info.get("streams") or [{}])[0].get("nb_read_frames")
    return float(info["format"].get("duration", 0)) > 0 and int(frames or 0) > 0


def _wait_busy(proc, tmp: Path, n: int, timeout: float = 120) -> None:
    """Until the run's events file has an event (the camera is up and seeing the scene)."""
    path, deadline = tmp / f"events-{n}.jsonl", time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if path.exists() and _events_file(path):
            return
        time.sleep(0.2)
    err = (tmp / f"camera-{n}.err").read_text()[-2000:]
    raise RuntimeError(f"the camera gave no event in {timeout:g} s ({proc.poll()}): {err}")


def one_kill(n: int, env: dict, rng: random.Random, checked: set) -> dict:
    tmp, broker = env["tmp"], env["broker"]
    # the last kill's, the restart finishes (those an earlier restart did not: said once)
    left = sorted(set((tmp / "clips").glob("*.mp4.part")) - env["stuck"])
    proc = _camera(env["bundle"], env["video"], tmp, n, broker.url, env["batch_s"])
    try:
        _wait_busy(proc, tmp, n)
        time.sleep(rng.uniform(0, 2 * env["batch_s"]))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed = time.time()
    ok, stored, named = _store(tmp / "events.db")
    got = broker.received() - env["received"]  # this run's
    env["received"] |= got
    emitted = _events_file(tmp / f"events-{n}.jsonl")
    lost = [t for k, t in emitted if k not in stored]
    finished = sorted(c for c in named - checked if os.path.exists(c))
    bad = [c for c in finished if not plays(c)]
    checked.update(finished)
    stuck = [p for p in left if p.exists()]  # not finished by the restart
    parts = set((tmp / "clips").glob("*.mp4.part")) - set(left) - env["stuck"]
    env["stuck"] |= set(stuck)
    return {
        "integrity": ok,
        "events": len(emitted),
        "published": len(got),
        "published_lost": len(got - stored),
        "lost": len(lost),
        "lost_s": round(killed - min(lost), 2) if lost else 0.0,
        "clips_checked": len(finished),
        "clips_bad": bad,
        "clips_in_flight": len(parts),
        "clips_recovered": sum(p.with_suffix("").exists() for p in left),
        "clips_left": len(left),  # parts the last kill left, for this run to finish
        "clips_not_finished_bytes": [p.stat().st_size for p in stuck],
    }


class _Subscriber:
    """store_kill.Broker's, whose events are told apart by (kind, track_id, time)."""

    def __init__(self, folder: Path) -> None:
        from store_kill import Broker

        class Keyed(Broker):
            def _message(self, client, userdata, msg) -> None:
                r = json.loads(msg.payload)
                with self.lock:
                    self.got.add(_key(r.get("event"), r.get("track_id"), r.get("time", 0)))

        self.broker = Keyed(folder, prefix="cam")


def run(kills: int, batch_s: float = 10.0, seed: int = 0, minutes: float | None = None) -> dict:
    """``kills`` kills, or fewer when ``minutes`` have passed first."""
    import tempfile

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from tests.tiny import blob_detector_bundle

    rng, rows, checked = random.Random(seed), [], set()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        sub = _Subscriber(tmp)
        env = {
            "tmp": tmp,
            "broker": sub.broker,
            "received": set(),
            "stuck": set(),
            "batch_s": batch_s,
            "bundle": blob_detector_bundle(tmp / "det"),
            "video": busy_scene(tmp / "scene.mp4"),
        }
        started = time.monotonic()
        try:
            for n in range(kills):
                rows.append(one_kill(n, env, rng, checked))
                if minutes is not None and time.monotonic() - started > minutes * 60:
                    break
        finally:
            sub.broker.close()
        minutes = (time.monotonic() - started) / 60
    return summary(rows, batch_s, minutes)


def summary(rows: list, batch_s: float, minutes: float) -> dict:
    return {
        "kills": len(rows),
        "minutes": round(minutes, 1),
        "batch_s": batch_s,
        "corrupt": sum(r["integrity"] != "ok" for r in rows),
        "events": sum(r["events"] for r in rows),
        "events_published": sum(r["published"] for r in rows),
        "published_lost": sum(r["published_lost"] for r in rows),
        "lost": sum(r["lost"] for r in rows),
        "max_lost_per_kill": max((r["lost"] for r in rows), default=0),
        "max_lost_s_per_kill": max((r["lost_s"] for r in rows), default=0.0),
        "clips_checked": sum(r["clips_checked"] for r in rows),
        "clips_bad": [c for r in rows for c in r["clips_bad"]],
        "clips_in_flight": sum(r["clips_in_flight"] for r in rows),
        "clips_recovered": sum(r["clips_recovered"] for r in rows),
        "clips_not_finished_bytes": [b for r in rows for b in r["clips_not_finished_bytes"]],
        "runs": rows,
    }


def table(report: dict) -> str:
    r = report
    lines = [
        f"{r['kills']} SIGKILLs of `edgert camera` in {r['minutes']} min "
        f"(batch window {r['batch_s']:g} s)",
        f"  corrupt stores (integrity_check)        {r['corrupt']}",
        f"  events the runs emitted (events files)  {r['events']}",
        f"  events the MQTT subscriber received     {r['events_published']}",
        f"  ... of them not in the store            {r['published_lost']}",
        f"  events lost (emitted, not in the store) {r['lost']}",
        f"  largest loss in one kill: events        {r['max_lost_per_kill']}",
        f"  largest loss in one kill: seconds       {r['max_lost_s_per_kill']}",
        f"  finished clips checked (ffprobe)        {r['clips_checked']}",
        f"  ... of them that do not play            {len(r['clips_bad'])}",
        f"  clips in flight at a kill (.part)       {r['clips_in_flight']}",
        f"  ... finished by the restart             {r['clips_recovered']}",
        f"  ... not finished (sizes, bytes)         {r['clips_not_finished_bytes']}",
    ]
    return "\n".join(lines)


def main(kills: int, batch_s: float, path: str, minutes: float | None = None) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from json_report import write_json

    report = run(kills, batch_s, minutes=minutes)
    print(table(report))
    write_json(path, report)
