"""edgert's Tracker against the `trackers` package's ByteTrack on public MOT15 ground truth.

The ground truth of TUD-Campus and TUD-Stadtmitte (shipped inside the motmetrics wheel) is turned
into detections the way a detector gives them: box jitter, missed detections, false positives,
and a share of the true objects at low confidence (seeded). Both trackers get the same detections;
motmetrics scores them (MOTA, IDF1, ID switches), at the regular frame rate and again with a random
half of the frames dropped (irregular intervals, as under load). The peer runs twice there: as
its users call it (one call per frame, fixed rate) and with the frames' timestamps (its
``timestamp=`` argument). Also the time per ``update`` for 10, 20 and 100 detections.

Needs its own environment (the peer needs numpy 2, motmetrics 1.4.0 calls numpy 1's asfarray):

    python3 -m venv .venv-bench && .venv-bench/bin/pip install trackers==2.6.1 motmetrics==1.4.0 \\
        pandas xmltodict && .venv-bench/bin/pip install --no-deps -e .
    .venv-bench/bin/python benchmarks/tracking.py --seeds 0 1 2 --json reports/tracking.json
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from json_report import write_json  # noqa: E402

if not hasattr(np, "asfarray"):  # motmetrics 1.4.0 still calls it; numpy 2 removed it
    np.asfarray = lambda a, dtype=np.float64: np.asarray(a, dtype=dtype)

import motmetrics as mm  # noqa: E402

from edgert.runtime.tasks.detection import Detection  # noqa: E402
from edgert.runtime.tracking import Tracker  # noqa: E402

SEQUENCES = ("TUD-Campus", "TUD-Stadtmitte")
FPS = 25.0  # both TUD sequences


def ground_truth(name: str) -> dict[int, np.ndarray]:
    """frame -> rows of (id, x, y, w, h) from the motmetrics wheel's MOT15 ground truth."""
    folder = Path(importlib.util.find_spec("motmetrics").origin).parent / "data" / name
    gt = np.loadtxt(folder / "gt.txt", delimiter=",")
    frames: dict[int, np.ndarray] = {}
    for f in np.unique(gt[:, 0]).astype(int):
        rows = gt[gt[:, 0] == f]
        frames[int(f)] = rows[:, 1:6]
    return frames


def detections(
    gt: dict[int, np.ndarray], seed: int, miss=0.1, low_share=0.2, jitter=0.05, fp_rate=0.5
):
    """frame -> [(x1, y1, x2, y2, score)]: each true box kept with 1 - ``miss``, its centre and
    size jittered by ``jitter`` of its size, scored high (0.6-1.0) or, for ``low_share`` of them,
    low (0.15-0.5); plus Poisson(``fp_rate``) false positives of a typical size per frame."""
    rng = np.random.default_rng(seed)
    sizes = np.concatenate([rows[:, 3:5] for rows in gt.values()])
    extent = np.concatenate([rows[:, 1:3] + rows[:, 3:5] for rows in gt.values()]).max(axis=0)
    out = {}
    for f, rows in gt.items():
        found = []
        for _, x, y, w, h in rows:
            if rng.random() < miss:
                continue
            cx, cy = x + w / 2 + rng.normal(0, jitter * w), y + h / 2 + rng.normal(0, jitter * h)
            w2, h2 = w * (1 + rng.normal(0, jitter)), h * (1 + rng.normal(0, jitter))
            low = rng.random() < low_share
            score = rng.uniform(0.15, 0.5) if low else rng.uniform(0.6, 1.0)
            found.append((cx - w2 / 2, cy - h2 / 2, cx + w2 / 2, cy + h2 / 2, score))
        for _ in range(rng.poisson(fp_rate)):
            w, h = sizes[rng.integers(len(sizes))]
            x, y = rng.uniform(0, extent[0] - w), rng.uniform(0, extent[1] - h)
            found.append((x, y, x + w, y + h, rng.uniform(0.1, 0.7)))
        out[f] = found
    return out


class Edgert:
    name = "edgert"

    def __init__(self, fps: float) -> None:
        self.tracker = Tracker()

    def update(self, dets, t: float):
        tracks = self.tracker.update([Detection(d[:4], d[4], 0, "person") for d in dets], t)
        return [(tr.track_id, tr.box) for tr in tracks]


class Peer:
    """trackers' ByteTrackTracker with its defaults (frame_rate set to the sequence's)."""

    def __init__(self, fps: float, timestamps: bool = False) -> None:
        from trackers import ByteTrackTracker

        self.tracker = ByteTrackTracker(frame_rate=fps)
        self.timestamps = timestamps
        self.name = "trackers ByteTrack" + (" (timestamps)" if timestamps else "")

    def update(self, dets, t: float):
        import supervision as sv

        arr = np.array(dets, dtype=np.float64).reshape(-1, 5)
        d = sv.Detections(xyxy=arr[:, :4], confidence=arr[:, 4], class_id=np.zeros(len(arr), int))
        out = self.tracker.update(d, timestamp=t) if self.timestamps else self.tracker.update(d)
        return [(int(i), tuple(b)) for i, b in zip(out.tracker_id, out.xyxy, strict=True) if i >= 0]


def score(make, gt, dets, frames: list[int]) -> dict:
    acc = mm.MOTAccumulator(auto_id=True)
    tracker = make()
    for f in frames:
        hyp = tracker.update(dets[f], f / FPS)
        g = gt[f]
        gt_boxes = g[:, 1:5]
        hyp_boxes = np.array([[b[0], b[1], b[2] - b[0], b[3] - b[1]] for _, b in hyp]).reshape(
            -1, 4
        )
        dist = mm.distances.iou_matrix(gt_boxes, hyp_boxes, max_iou=0.5)
        acc.update(g[:, 0].astype(int).tolist(), [i for i, _ in hyp], dist)
    m = mm.metrics.create().compute(acc, metrics=["mota", "idf1", "num_switches"], name="x")
    return {k: float(m[k].iloc[0]) for k in ("mota", "idf1", "num_switches")}


def update_times(make, n: int, seed: int = 0, updates: int = 400) -> float:
    """Median ms per update with ``n`` objects on a random walk (plus their detections' noise)."""
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 1800, (n, 2))
    tracker = make()
    times = []
    for k in range(updates):
        xy += rng.normal(0, 3, xy.shape)
        dets = [(x, y, x + 40, y + 90, 0.9) for x, y in xy]
        t0 = time.perf_counter()
        tracker.update(dets, k / 30)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times[20:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--json", default="reports/tracking.json")
    args = ap.parse_args()
    makers = {
        "edgert": lambda: Edgert(FPS),
        "trackers ByteTrack": lambda: Peer(FPS),
        "trackers ByteTrack (timestamps)": lambda: Peer(FPS, timestamps=True),
    }
    rows = []
    for seq in SEQUENCES:
        gt = ground_truth(seq)
        all_frames = sorted(gt)
        for mode in ("regular", "half dropped"):
            per: dict[str, list[dict]] = {k: [] for k in makers}
            for seed in args.seeds:
                dets = detections(gt, seed)
                frames = all_frames
                if mode == "half dropped":
                    keep = np.random.default_rng(1000 + seed).random(len(all_frames)) >= 0.5
                    frames = [f for f, k in zip(all_frames, keep, strict=True) if k]
                for name, make in makers.items():
                    if mode == "regular" and "timestamps" in name:
                        continue  # the same as without at a fixed rate
                    per[name].append(score(make, gt, dets, frames))
            for name, results in per.items():
                if not results:
                    continue
                rows.append(
                    {
                        "sequence": seq,
                        "frames": mode,
                        "tracker": name,
                        "seeds": args.seeds,
                        **{k: statistics.mean(r[k] for r in results) for k in results[0]},
                    }
                )
    print(f"\n{'sequence':<16}{'frames':<14}{'tracker':<34}{'MOTA':>8}{'IDF1':>8}{'IDsw':>7}")
    for r in rows:
        print(
            f"{r['sequence']:<16}{r['frames']:<14}{r['tracker']:<34}{r['mota']:8.3f}"
            f"{r['idf1']:8.3f}{r['num_switches']:7.1f}"
        )
    timing = []
    for n in (10, 20, 100):
        for name in ("edgert", "trackers ByteTrack"):
            timing.append(
                {"tracker": name, "detections": n, "ms_per_update": update_times(makers[name], n)}
            )
    print(f"\n{'tracker':<34}{'detections':>11}{'ms/update':>11}")
    for r in timing:
        print(f"{r['tracker']:<34}{r['detections']:>11}{r['ms_per_update']:>11.3f}")
    write_json(
        args.json, {"fps": FPS, "accuracy": rows, "update_time": timing, "numpy": np.__version__}
    )


if __name__ == "__main__":
    main()
