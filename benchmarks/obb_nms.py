"""Oriented boxes' NMS on the round-6 review's reproduction (fault-battery-6.md, G11): a 640 OBB
model whose every candidate is above the threshold, one class, boxes spread uniformly (the
review's seeds), through the real ``edgert run`` (wall time and max RSS of the process, from
``/usr/bin/time``), and in process the NMS alone against the N x N float64 Fast-NMS it replaced
(time and tracemalloc's peak). The results of both are compared: they must be the same.

    python benchmarks/obb_nms.py [--json reports/obb_nms.json] [--sizes 2000,4000,8400]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from json_report import write_json

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from edgert.runtime.tasks.heads import rotated_nms  # noqa: E402
from tests.const_heads import const_bundle, meta  # noqa: E402
from tests.runtime.tasks.test_rotated_nms import reference_nms  # noqa: E402


def review_output(n: int) -> np.ndarray:
    """The review's [1, 6, n]: centres 20..620, sides 10..80, score 0.9, angles -0.7..2.3."""
    return np.concatenate(
        [
            np.random.default_rng(0).uniform(20, 620, (2, n)),
            np.random.default_rng(1).uniform(10, 80, (2, n)),
            np.full((1, n), 0.9),
            np.random.default_rng(2).uniform(-0.7, 2.3, (1, n)),
        ]
    )[None]


def cli_run(bundle: Path, image: Path) -> dict:
    """``edgert run`` under /usr/bin/time -v: wall seconds and max RSS (MB)."""
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "edgert.apps", "run", bundle, image, "-q"]
    proc = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, check=True)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", proc.stderr)
    h, m, s = wall.groups()
    return {
        "wall_s": round(int(h or 0) * 3600 + int(m) * 60 + float(s), 2),
        "max_rss_mb": rss // 1024,
    }


def in_process(nms, boxes, scores, classes) -> tuple:
    tracemalloc.start()
    t = time.perf_counter()
    kept = nms(boxes, scores, classes, 0.45)
    seconds = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return kept, {"s": round(seconds, 3), "peak_mb": round(peak / 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="reports/obb_nms.json")
    ap.add_argument("--sizes", default="2000,4000,8400")
    args = ap.parse_args()
    import cv2

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        image = Path(tmp) / "grey.png"
        cv2.imwrite(str(image), np.full((640, 640, 3), 40, np.uint8))
        for n in map(int, args.sizes.split(",")):
            out = review_output(n)
            bundle = const_bundle(Path(tmp), f"obb{n}", meta("obb"), out)
            pred = out[0].T.astype(np.float32)
            boxes, scores = pred[:, [0, 1, 2, 3, 5]], pred[:, 4]
            classes = np.zeros(n, np.int64)
            old, old_m = in_process(reference_nms, boxes, scores, classes)
            new, new_m = in_process(rotated_nms, boxes, scores, classes)
            rows.append(
                {
                    "candidates": n,
                    "run": cli_run(bundle, image),
                    "nms_square_float64": old_m,
                    "nms_blocks": new_m,
                    "same_kept": old.tolist() == new.tolist(),
                }
            )
    print(
        f"{'candidates':>10} {'run wall s':>10} {'run RSS MB':>10} | NMS alone: "
        f"{'N x N s':>8} {'peak MB':>8} {'blocks s':>8} {'peak MB':>8} same"
    )
    for r in rows:
        o, b = r["nms_square_float64"], r["nms_blocks"]
        print(
            f"{r['candidates']:>10} {r['run']['wall_s']:>10} {r['run']['max_rss_mb']:>10} | "
            f"{'':>10} {o['s']:>8} {o['peak_mb']:>8} {b['s']:>8} {b['peak_mb']:>8} "
            f"{r['same_kept']}"
        )
    write_json(args.json, {"rows": rows})


if __name__ == "__main__":
    main()
