"""Event-gated inference (issue 35): always-on, ``--gate motion`` and ``--gate interval:N`` (N chosen
so the fixed skip makes as many detector calls as the motion gate did) side by side, through a real
detector and the real CLI, on rendered scenes whose ground truth is known.

The detector is the MTCNN face bundle (``zoo:mtcnn``, facenet-pytorch's weights; its pyramid set to
faces of 32 px or more, ~45 ms a frame at 640x360 on this CPU): the "people" are a face cut from the astronaut photo (64x80) walking over a
photo background that holds no face. Scenes (640x360, 10 fps, mp4v):

    quiet    60 s, two walks of 6 s: quiet 80 % of the time
    busy     30 s, a new walker every 2 s on three rows, always two or three in view
    light    40 s, the picture 1.5x brighter from 15 s to 30 s (a cloud, a lamp), walks around it
    noise    30 s, Gaussian sensor noise (sigma 8) on every frame
    sway     30 s, a swaying patch (a tree) masked with --motion-mask (for the motion gate)
    still    40 s, one walks into the zone and stands there; another appears and stands
    slow     40 s, one walks in slowly (2.4 px a frame) across the line and into the zone

Line ``door`` at x=320, zone ``pen`` x 420..600 (full height). Ground truth from the walkers' paths:
track starts (half the box in the picture), line crossings (the box's centre crosses x=320; direction
not compared), zone entries (the centre enters 420..600). An event matches one of the same kind and
line/zone within 1 s (``t_video``). Per scene and mode: detector calls (share of always-on), event
recall against the truth and against always-on (with direction), events nobody scripted (extra),
extra delay to each object's first detection against always-on (frames), CPU seconds per
camera-minute (the child process's rusage) and frames per second.

Also: the gate's own cost per frame at 1080p (``StreamGate.decide`` on the quiet scene scaled up),
and how many 10 fps cameras of the quiet scene (each its own phase, paced in real time) this
machine sustains with at most 1 % of frames dropped after a 5 s warm-up, gated and always-on
(``run_camera``, N streams for --camera-seconds each, 60 by default: the whole scene once per
camera; doubling, then bisection).

Goals: quiet scene <= 15 % of always-on's calls, >= 99 % of always-on's events, <= 1 frame extra
delay; motion above interval:N's recall at the same budget; busy scene <= 5 % slower than
always-on; >= 4x the cameras per machine on the quiet scene.

    python benchmarks/gating.py [--scenes quiet busy ...] [--camera-seconds 60] [--no-cameras]
                                [--json reports/gating.json]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from json_report import write_json  # noqa: E402

W, H, FPS = 640, 360, 10
LINE_X, ZONE_X = 320, (420, 600)
LINE = f"door={LINE_X},0,{LINE_X},{H}"
ZONE = f"pen={ZONE_X[0]},0,{ZONE_X[1]},0,{ZONE_X[1]},{H},{ZONE_X[0]},{H}"
SW, SH = 64, 80  # the walker's sprite
KINDS = ("track_start", "line_cross", "zone_enter")
TOLERANCE_S = 1.0


@dataclass
class Walker:
    """A face whose box's left edge is at ``x0`` at ``t0`` and moves ``speed`` px/s; with
    ``stop_x`` it stands still once there. Before ``t0`` it is not in the scene."""

    t0: float
    x0: float
    speed: float
    y: int
    stop_x: float | None = None

    def x(self, t: float) -> float | None:
        if t < self.t0:
            return None
        x = self.x0 + self.speed * (t - self.t0)
        if self.stop_x is not None:
            x = min(x, self.stop_x) if self.speed >= 0 else max(x, self.stop_x)
        return x

    def box(self, t: float):
        x = self.x(t)
        if x is None or x + SW <= 0 or x >= W:
            return None
        return (x, self.y, x + SW, self.y + SH)


@dataclass
class Scene:
    name: str
    seconds: float
    walkers: list
    light: tuple | None = None  # (from s, to s, factor)
    noise: float = 0.0
    sway: bool = False
    mask: str | None = None  # --motion-mask for the motion gate
    notes: str = ""
    truth: list = field(default_factory=list)

    @property
    def frames(self) -> int:
        return int(self.seconds * FPS)


def walk(t0: float, rightwards: bool, y: int, speed: float = 128.0) -> Walker:
    """Across the whole picture: in from one side, out at the other."""
    return Walker(t0, -SW if rightwards else W, speed if rightwards else -speed, y)


def scenes() -> dict:
    rows = (30, 140, 250)
    return {
        s.name: s
        for s in (
            Scene("quiet", 60, [walk(10, True, 150), walk(40, False, 200)], notes="80 % quiet"),
            Scene(
                "busy",
                30,
                # one direction per row: a walker leaving a row's far side is not met there by
                # the next one entering (which a tracker may rightly take for the same object)
                [walk(2 * i, i % 3 != 1, rows[i % 3]) for i in range(13)],
                notes="2-3 walkers in view",
            ),
            Scene(
                "light",
                40,
                [walk(5, True, 150), walk(20, False, 200), walk(32, True, 100)],
                light=(15.0, 30.0, 1.5),
                notes="1.5x brighter 15-30 s",
            ),
            Scene("noise", 30, [walk(5, True, 150), walk(18, False, 200)], noise=8.0),
            Scene(
                "sway",
                30,
                [walk(5, True, 220), walk(18, False, 220)],
                sway=True,
                mask="0,0,190,0,190,170,0,170",
                notes="masked tree",
            ),
            Scene(
                "still",
                40,
                [Walker(5, -SW, 128, 150, stop_x=470), Walker(20, 150, 0, 30)],
                notes="walks in and stands; appears and stands",
            ),
            Scene("slow", 40, [Walker(2, -SW, 24, 160)], notes="2.4 px a frame"),
        )
    }


def ground_truth(scene: Scene) -> list:
    """(kind, line or zone, t) of every scripted event, sampled every 10 ms along the paths."""
    out = []
    for w in scene.walkers:
        started, prev = False, None
        for k in range(int(scene.seconds * 100) + 1):
            t = k / 100
            box = w.box(t)
            if box is None:
                prev = None
                continue
            cx = (box[0] + box[2]) / 2
            if not started and 0 <= cx <= W:  # half of it in the picture
                out.append(("track_start", "", t))
                started = True
            if prev is not None:
                if (prev < LINE_X) != (cx < LINE_X):
                    out.append(("line_cross", "door", t))
                inside = ZONE_X[0] <= cx <= ZONE_X[1]
                if inside and not ZONE_X[0] <= prev <= ZONE_X[1]:
                    out.append(("zone_enter", "pen", t))
            prev = cx
    return out


def _photo(name: str, w: int, h: int) -> np.ndarray:
    from edgert.runtime.sample_data import load_photo

    img = load_photo(name)
    if img.ndim == 2:
        img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    return cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)


def sprite() -> np.ndarray:
    from edgert.runtime.sample_data import load_photo

    return cv2.resize(load_photo("astronaut")[15:215, 140:300], (SW, SH))


def render(scene: Scene, path: Path) -> Path:
    bg, face, tree = _photo("coffee", W, H), sprite(), _photo("flower", 150, 130)
    rng = np.random.default_rng(0)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), FPS, (W, H))
    for i in range(scene.frames):
        t = i / FPS
        img = bg.copy()
        if scene.sway:  # a tree swaying 12 degrees either way, twice a second
            angle = 12 * math.sin(2 * math.pi * 0.5 * t)
            m = cv2.getRotationMatrix2D((75, 130), angle, 1.0)
            img[20:150, 20:170] = cv2.warpAffine(tree, m, (150, 130), borderMode=cv2.BORDER_REFLECT)
        for w in scene.walkers:
            box = w.box(t)
            if box is None:
                continue
            x = int(round(box[0]))
            a, b = max(0, x), min(W, x + SW)
            img[w.y : w.y + SH, a:b] = face[:, a - x : b - x]
        if scene.light and scene.light[0] <= t < scene.light[1]:
            img = cv2.convertScaleAbs(img, alpha=scene.light[2])
        if scene.noise:
            img = np.clip(img + rng.normal(0, scene.noise, img.shape), 0, 255).astype(np.uint8)
        writer.write(img)
    writer.release()
    return path


def run_cli(bundle: Path, video: Path, out: Path, gate: str, mask: str | None) -> dict:
    """One `edgert camera` run of the video: its summary, events, first detections, CPU."""
    out.mkdir(parents=True, exist_ok=True)
    args = [
        sys.executable,
        "-m",
        "edgert.apps",
        "camera",
        str(bundle),
        "--source",
        str(video),
        "--headless",
        "--json",
        "--line",
        LINE,
        "--zone",
        ZONE,
        "--events",
        str(out / "events.jsonl"),
        "--jsonl",
        str(out / "frames.jsonl"),
    ]
    if gate != "off":
        args += ["--gate", gate]
        if gate == "motion" and mask:
            args += ["--motion-mask", mask]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"edgert camera failed ({gate}): {proc.stderr.strip()[-800:]}")
    summary = json.loads(proc.stdout)
    events = []
    for line in (out / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("event") in KINDS:
            name = e.get("line") or e.get("zone") or ""
            events.append((e["event"], name, e["t_video"], e.get("direction")))
    frames = [json.loads(x) for x in (out / "frames.jsonl").read_text().splitlines()[1:]]
    gate_report = summary["streams"][0].get("gate")
    calls = gate_report["inferred"] if gate_report else summary["frames_processed"]
    return {
        "gate": gate,
        "calls": calls,
        "frames": summary["frames_processed"],
        "reasons": gate_report["reasons"] if gate_report else {},
        "fps": summary["fps"],
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "wall_s": wall,
        "events": events,
        "frames_log": frames,
    }


def match(truth: list, found: list, with_direction: bool = False) -> tuple[int, int, int]:
    """(matched, truth events, found events left unmatched): nearest in time, same kind and
    line/zone (and direction when asked), within TOLERANCE_S, each found event used once."""
    used, hits = set(), 0
    for ev in sorted(truth, key=lambda e: e[2]):
        best = None
        for j, f in enumerate(found):
            same = f[0] == ev[0] and f[1] == ev[1]
            if with_direction:
                same = same and f[3] == ev[3]
            if j in used or not same:
                continue
            d = abs(f[2] - ev[2])
            if d <= TOLERANCE_S and (best is None or d < best[0]):
                best = (d, j)
        if best:
            used.add(best[1])
            hits += 1
    return hits, len(truth), len(found) - len(used)


def first_detections(scene: Scene, frames: list) -> list:
    """Per walker, the first frame whose inferred results hold a box centred on it (or None)."""
    firsts = []
    for w in scene.walkers:
        first = None
        for r in frames:
            if r.get("inferred") is False:
                continue
            box = w.box(r["frame"] / FPS)
            if box is None:
                continue
            for res in r["results"]:
                cx = (res["box"][0] + res["box"][2]) / 2
                cy = (res["box"][1] + res["box"][3]) / 2
                if box[0] <= cx <= box[2] and box[1] <= cy <= box[3]:
                    first = r["frame"]
                    break
            if first is not None:
                break
        firsts.append(first)
    return firsts


def score(scene: Scene, run: dict, always: dict) -> dict:
    truth = [(k, n, t, None) for k, n, t in scene.truth]
    hit, total, extra = match(truth, run["events"])
    hit_a, total_a, _ = match(always["events"], run["events"], with_direction=True)
    mine, ref = (
        first_detections(scene, run["frames_log"]),
        first_detections(scene, always["frames_log"]),
    )
    delays = [m - r for m, r in zip(mine, ref, strict=True) if m is not None and r is not None]
    missed = sum(1 for m, r in zip(mine, ref, strict=True) if r is not None and m is None)
    return {
        "gate": run["gate"],
        "calls": run["calls"],
        "call_share": run["calls"] / max(1, always["calls"]),
        "recall_truth": hit / total if total else 1.0,
        "recall_always_on": hit_a / total_a if total_a else 1.0,
        "events": len(run["events"]),
        "extra_events": extra,
        "delay_frames_max": max(delays) if delays else None,
        "delay_frames_mean": sum(delays) / len(delays) if delays else None,
        "objects_never_detected": missed,
        "cpu_s_per_camera_min": run["cpu_s"] / (scene.seconds / 60),
        "fps": run["fps"],
        "reasons": run["reasons"],
    }


def gate_cost_1080p(video: Path, frames: int = 300) -> dict:
    """The motion gate's own time per frame at 1920x1080 (the quiet scene scaled up)."""
    from edgert.apps.camera.frame import Frame
    from edgert.apps.camera.gate import GateOptions, StreamGate

    cap = cv2.VideoCapture(str(video))
    big = []
    while len(big) < frames:
        ok, img = cap.read()
        if not ok:
            break
        big.append(cv2.resize(img, (1920, 1080)))
    cap.release()
    gate = StreamGate(GateOptions.parse("motion"))
    times = []
    for i, img in enumerate(big):
        t0 = time.perf_counter()
        gate.decide(Frame(i, i / FPS, img, 0))
        times.append((time.perf_counter() - t0) * 1000)
    times = sorted(times[5:])
    return {
        "frames": len(times),
        "ms_mean": sum(times) / len(times),
        "ms_p50": times[len(times) // 2],
        "ms_p99": times[int(0.99 * (len(times) - 1))],
    }


def cameras(
    bundle: Path, video: Path, gate: str, seconds: float, limit: int, warmup_s: float = 5.0
) -> dict:
    """The most 10 fps cameras of the quiet scene (paced in real time, each its own phase) that
    run with at most 1 % of frames dropped after a warm-up (the first seconds load the model and
    meet each pyramid size once): doubling, then bisection. Drops are the frame indices missing
    from the run's JSONL after ``warmup_s``."""
    from edgert.apps.camera.analytics import TrackingOptions
    from edgert.apps.camera.app import CameraConfig, ModelOptions, RunOptions, run_camera
    from edgert.apps.camera.gate import GateOptions
    from edgert.apps.camera.sinks import SinkOptions
    from edgert.apps.camera.sources import SyntheticSource

    cap = cv2.VideoCapture(str(video))
    cache = []
    while True:
        ok, img = cap.read()
        if not ok:
            break
        cache.append(img)
    cap.release()

    class Camera(SyntheticSource):
        def __init__(self, k: int) -> None:
            super().__init__(W, H, FPS, photos=("coffee",), realtime=True)
            self.phase = (k * 97) % len(cache)
            self.description = f"camera {k} (quiet scene from frame {self.phase})"

        def frame(self, i: int):
            return cache[(i + self.phase) % len(cache)]

    def trial(n: int) -> dict:
        log = video.parent / f"cameras-{gate}-{n}.jsonl"
        cfg = CameraConfig(
            model=ModelOptions(str(bundle)),
            sources=[Camera(k) for k in range(n)],
            sinks=[f"jsonl://{log}"],
            sink_options=SinkOptions(headless=True),
            tracking=TrackingOptions(lines=(LINE,), zones=(ZONE,)),
            run=RunOptions(duration=seconds),
            gate=GateOptions.parse(gate),
        )
        s = run_camera(cfg)
        seen: dict = {}
        for line in log.read_text().splitlines()[1:]:
            r = json.loads(line)
            seen.setdefault(r["stream"], []).append(r["frame"])
        first = int(warmup_s * FPS)
        done = dropped = 0
        for frames in seen.values():
            after = [i for i in frames if i >= first]
            done += len(after)
            dropped += (max(after) - first + 1 - len(after)) if after else 0
        share = dropped / max(1, done + dropped)
        total = sum(st["frames_dropped"] for st in s["streams"])
        print(
            f"  {gate:>6} x{n:<3} processed {done:5d} dropped {dropped:5d} ({100 * share:.1f} %) "
            f"after {warmup_s:g} s ({total} in all)"
        )
        return {
            "cameras": n,
            "processed": done,
            "dropped": dropped,
            "dropped_with_warmup": total,
            "ok": share <= 0.01,
        }

    trials, good, bad = [], 0, None
    n = 1
    while n <= limit:
        r = trial(n)
        trials.append(r)
        if not r["ok"]:
            bad = n
            break
        good, n = n, n * 2
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        r = trial(mid)
        trials.append(r)
        good, bad = (mid, bad) if r["ok"] else (good, mid)
    return {"gate": gate, "sustained": good, "limit_reached": bad is None, "trials": trials}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--scenes", nargs="+", default=list(scenes()))
    ap.add_argument("--camera-seconds", type=float, default=60.0)
    ap.add_argument("--max-cameras", type=int, default=32)
    ap.add_argument("--no-cameras", action="store_true")
    ap.add_argument(
        "--min-face",
        type=int,
        default=32,
        help="MTCNN's smallest face in pixels (default 32; the zoo's 20 looks 2.5x longer)",
    )
    ap.add_argument("--json", default="reports/gating.json")
    a = ap.parse_args()

    from edgert.export import export_model

    tmp = Path(tempfile.mkdtemp(prefix="gating-"))
    bundle = export_model("zoo:mtcnn", tmp / "mtcnn.edgert").bundle
    # the smallest face the pyramid looks for: the scenes' faces are 36 px wide or more, and a
    # fixed camera's deployment sets this from its own scene (the manifest's detector settings)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["detector"]["min_face"] = a.min_face
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2))
    table, rows = {}, []
    for name in a.scenes:
        scene = scenes()[name]
        scene.truth = ground_truth(scene)
        video = render(scene, tmp / f"{name}.mp4")
        always = run_cli(bundle, video, tmp / name / "off", "off", None)
        motion = run_cli(bundle, video, tmp / name / "motion", "motion", scene.mask)
        n = max(1, round(always["calls"] / max(1, motion["calls"])))
        interval = run_cli(bundle, video, tmp / name / "interval", f"interval:{n}", None)
        table[name] = {
            "seconds": scene.seconds,
            "notes": scene.notes,
            "truth_events": len(scene.truth),
            "modes": [score(scene, r, always) for r in (always, motion, interval)],
        }
        for m in table[name]["modes"]:
            rows.append((name, m))
            print(_row(name, m), flush=True)
    print()
    print(_HEADER)
    for name, m in rows:
        print(_row(name, m))

    result = {
        "scenes": table,
        "fps": FPS,
        "size": [W, H],
        "detector": f"zoo:mtcnn, min_face {a.min_face}",
    }
    first = a.scenes[0]
    result["gate_cost_1080p"] = gate_cost_1080p(tmp / f"{first}.mp4")
    g = result["gate_cost_1080p"]
    print(f"\nmotion gate at 1080p: {g['ms_mean']:.2f} ms mean, p99 {g['ms_p99']:.2f} ms a frame")
    if not a.no_cameras and "quiet" in a.scenes:
        print("\ncameras of the quiet scene at 10 fps (at most 1 % of frames dropped):")
        per = {
            mode: cameras(bundle, tmp / "quiet.mp4", mode, a.camera_seconds, a.max_cameras)
            for mode in ("off", "motion")
        }
        result["cameras"] = per
        ratio = per["motion"]["sustained"] / max(1, per["off"]["sustained"])
        result["cameras_ratio"] = ratio
        print(
            f"always-on {per['off']['sustained']}, motion gate {per['motion']['sustained']}"
            f"{'+' if per['motion']['limit_reached'] else ''}: {ratio:.1f}x"
        )
    result["goals"] = goals(result)
    print()
    for goal, value, met in result["goals"]:
        print(f"{'met ' if met else 'MISS'}  {goal}: {value}")
    write_json(a.json, result)


_HEADER = (
    f"{'scene':<7} {'mode':<11} {'calls':>5} {'share':>6} {'recall':>6} {'vs on':>6} "
    f"{'extra':>5} {'delay':>5} {'CPU s/min':>9} {'fps':>6}  reasons"
)


def _row(name: str, m: dict) -> str:
    delay = "-" if m["delay_frames_max"] is None else f"{m['delay_frames_max']:d}"
    why = " ".join(f"{k} {v}" for k, v in sorted(m["reasons"].items()))
    return (
        f"{name:<7} {m['gate']:<11} {m['calls']:5d} {100 * m['call_share']:5.1f}% "
        f"{100 * m['recall_truth']:5.1f}% {100 * m['recall_always_on']:5.1f}% "
        f"{m['extra_events']:5d} {delay:>5} {m['cpu_s_per_camera_min']:9.1f} {m['fps']:6.1f}  {why}"
    )


def goals(result: dict) -> list:
    out = []
    s = result["scenes"]
    if "quiet" in s:
        _, motion, interval = s["quiet"]["modes"]
        out.append(
            (
                "quiet: calls <= 15 % of always-on",
                f"{100 * motion['call_share']:.1f} %",
                motion["call_share"] <= 0.15,
            )
        )
        out.append(
            (
                "quiet: >= 99 % of always-on's events",
                f"{100 * motion['recall_always_on']:.1f} %",
                motion["recall_always_on"] >= 0.99,
            )
        )
        delay = motion["delay_frames_max"]
        out.append(
            ("quiet: <= 1 frame extra delay", f"{delay} frames", delay is not None and delay <= 1)
        )
    for name, sc in s.items():
        _, motion, interval = sc["modes"]
        out.append(
            (
                f"{name}: recall above interval at the same budget",
                f"{100 * motion['recall_truth']:.1f} % vs {100 * interval['recall_truth']:.1f} %",
                motion["recall_truth"] >= interval["recall_truth"],
            )
        )
    if "busy" in s:
        always, motion, _ = s["busy"]["modes"]
        slower = 1 - motion["fps"] / always["fps"]
        out.append(("busy: <= 5 % slower than always-on", f"{100 * slower:+.1f} %", slower <= 0.05))
    if "cameras_ratio" in result:
        out.append(
            (
                "quiet: >= 4x the cameras",
                f"{result['cameras_ratio']:.1f}x",
                result["cameras_ratio"] >= 4,
            )
        )
    return out


if __name__ == "__main__":
    main()
