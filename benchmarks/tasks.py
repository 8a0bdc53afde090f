"""Decode time per frame of each detector-family task (issue 48): edgert's numpy decoders
(``runtime/tasks/heads.py`` and the task modules, as ``EngineTask.postprocess`` calls them)
against the same decode in Ultralytics' own ``ops`` (torch, CPU: ``non_max_suppression``, then
``scale_boxes`` / ``scale_coords`` / ``process_mask``), side by side in one run, on the outputs a
640 x 640 model gives: 8400 candidates, with OBJECTS objects of ~20 overlapping candidates each
above the threshold (a trained head's picture) and the rest at low scores. Both decode from
model outputs to objects in source pixels (a 1080p frame); instance masks at the model's input
(Ultralytics' default, ``retina_masks=False``). Goal: edgert's decode no slower than
Ultralytics'.

Runs where Ultralytics is installed (its own environment, ``make test-ultralytics`` makes it):

    .venv-ultra/bin/python benchmarks/tasks.py [--json reports/tasks_decode.json] [--repeat 50]
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import numpy as np
from json_report import write_json

SIZE, N, OBJECTS, CLUSTER = 640, 8400, 30, 20
SOURCE_HW = (1080, 1920)


def outputs(task: str, nc: int, extra: int, rng) -> np.ndarray:
    """[1, 4 + nc + extra, N]: OBJECTS clusters of CLUSTER jittered candidates scoring 0.3-0.95,
    the rest 0-0.05."""
    out = np.zeros((4 + nc + extra, N), np.float32)
    out[:4] = rng.uniform([0, 0, 8, 8], [SIZE, SIZE, 120, 120], (N, 4)).T
    out[4 : 4 + nc] = rng.uniform(0, 0.05, (nc, N))
    for _ in range(OBJECTS):
        centre = rng.uniform([40, 40, 30, 30], [600, 600, 160, 160])
        idx = rng.choice(N, CLUSTER, replace=False)
        out[:4, idx] = (centre + rng.normal(0, 3, (CLUSTER, 4))).T
        out[4 + rng.integers(nc), idx] = rng.uniform(0.3, 0.95, CLUSTER)
    out[4 + nc :] = rng.normal(0, 1, (extra, N))
    if task == "pose":
        out[4 + nc :: 3] = rng.uniform(0, SIZE, (extra // 3, N))
        out[5 + nc :: 3] = rng.uniform(0, SIZE, (extra // 3, N))
    if task == "obb":
        out[-1] = rng.uniform(-np.pi / 4, 3 * np.pi / 4, N)
    return out[None]


def edgert_model(task: str, nc: int, kpt=None):
    from edgert.runtime.images.preprocess import Preprocessing
    from edgert.runtime.tasks.heads import Head

    pre = Preprocessing(size=(SIZE, SIZE), resize="letterbox", interpolation="bilinear")
    engine = SimpleNamespace(manifest=SimpleNamespace(head=Head("yolo", kpt)), preprocessing=pre)
    return SimpleNamespace(
        engine=engine, labels=[str(i) for i in range(nc)], conf=0.25, iou=0.45, task=task
    )


def ultralytics_decode(task, out, protos, nc, kpt):
    import torch
    from ultralytics.utils import nms, ops

    pred = nms.non_max_suppression(
        torch.from_numpy(out), 0.25, 0.45, nc=nc if task != "detect" else 0, rotated=task == "obb"
    )[0]
    shape = (SIZE, SIZE)
    if task == "segment-instances":
        masks = ops.process_mask(
            torch.from_numpy(protos[0]), pred[:, 6:], pred[:, :4], shape, upsample=True
        )
        pred[:, :4] = ops.scale_boxes(shape, pred[:, :4], SOURCE_HW)
        return len(pred), masks
    if task == "obb":
        rboxes = torch.cat([pred[:, :4], pred[:, -1:]], dim=-1)
        rboxes[:, :4] = ops.scale_boxes(shape, rboxes[:, :4], SOURCE_HW, xywh=True)
        return len(pred), rboxes
    pred[:, :4] = ops.scale_boxes(shape, pred[:, :4], SOURCE_HW)
    if task == "pose":
        kp = ops.scale_coords(shape, pred[:, 6:].view(len(pred), *kpt), SOURCE_HW)
        return len(pred), kp
    return len(pred), pred


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="reports/tasks_decode.json")
    ap.add_argument("--repeat", type=int, default=50)
    a = ap.parse_args()
    import torch

    from edgert.runtime.images.preprocess import Preprocessing
    from edgert.runtime.tasks import TASK_SPECS

    pre = Preprocessing(size=(SIZE, SIZE), resize="letterbox", interpolation="bilinear")
    transform = pre.transform_for(SOURCE_HW) if hasattr(pre, "transform_for") else None
    if transform is None:
        transform = pre.apply(np.zeros((*SOURCE_HW, 3), np.uint8))[1]
    rng = np.random.default_rng(0)
    rows = []
    for task, nc, extra, kpt in (
        ("detect", 80, 0, None),
        ("pose", 1, 51, (17, 3)),
        ("segment-instances", 80, 32, None),
        ("obb", 15, 1, None),
    ):
        out = outputs(task, nc, extra, rng)
        protos = (
            rng.normal(0, 1, (1, 32, SIZE // 4, SIZE // 4)).astype(np.float32)
            if task == "segment-instances"
            else None
        )
        model = edgert_model(task, nc, kpt)
        decode = TASK_SPECS[task].decode
        values = [out] if protos is None else [out, protos]
        times = {"edgert": [], "ultralytics": []}
        counts = {}
        for _ in range(a.repeat):  # interleaved: the VM's drift hits both alike
            t = time.perf_counter()
            res = decode(model, values, [transform])
            times["edgert"].append(time.perf_counter() - t)
            counts["edgert"] = len(res[0].objects)
            t = time.perf_counter()
            n, _ = ultralytics_decode(task, out.copy(), protos, nc, kpt)
            times["ultralytics"].append(time.perf_counter() - t)
            counts["ultralytics"] = n
        ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        rows.append(
            {
                "task": task,
                "objects": counts,
                "edgert_ms": round(ms["edgert"], 3),
                "ultralytics_ms": round(ms["ultralytics"], 3),
                "ratio": round(ms["edgert"] / ms["ultralytics"], 3),
            }
        )
    print(
        f"{'task':<20}{'objects (edgert/ultra)':>24}{'edgert ms':>12}{'ultralytics ms':>16}{'ratio':>8}"
    )
    for r in rows:
        o = r["objects"]
        print(
            f"{r['task']:<20}{o['edgert']:>12}/{o['ultralytics']:<11}{r['edgert_ms']:>12.2f}{r['ultralytics_ms']:>16.2f}{r['ratio']:>8.2f}"
        )
    write_json(
        a.json,
        {
            "size": SIZE,
            "candidates": N,
            "source_hw": SOURCE_HW,
            "repeat": a.repeat,
            "torch_threads": torch.get_num_threads(),
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
