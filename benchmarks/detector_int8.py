"""A detector through INT8: does quantization keep its boxes?

No trained YOLO can be downloaded here, so this script trains one: a small anchor-free YOLOv8-style
detector (one stride-8 head, boxes as centre/size in input pixels, sigmoid class scores: the
``[N, 4 + classes, cells]`` output edgert's detect task decodes) on scenes made of real data —
handwritten digits from scikit-learn's 1797 (the 10 classes) pasted at random sizes and places onto
crops of the bundled photos. Then, like a user would:

    export (task detect, labels 0-9) -> edgert build --precision int8 (calibration: 300 scenes)

and on 300 scenes neither training nor calibration saw: box F1 of INT8 against FP32 (IoU >= 0.5,
same class: the gate's metric) and F1 of FP32 and INT8 against the ground truth. Prints a table,
writes JSON.

    python benchmarks/detector_int8.py [--json reports/detector_int8.json] [--steps 2500]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from json_report import write_json

SIZE, STRIDE, CLASSES = 96, 8, 10
GRID = SIZE // STRIDE


def scenes(n: int, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """(uint8 images N x SIZE x SIZE x 3, per image [K, 5] boxes x1 y1 x2 y2 class)."""
    import cv2
    from sklearn.datasets import load_digits

    from edgert.runtime.sample_data import ALL_PHOTOS, load_photo

    rng = np.random.default_rng(seed)
    digits = load_digits()
    photos = [load_photo(p) for p in ALL_PHOTOS]
    images, boxes = np.zeros((n, SIZE, SIZE, 3), np.uint8), []
    for i in range(n):
        photo = photos[rng.integers(len(photos))]
        h, w = photo.shape[:2]
        side = int(rng.integers(SIZE, min(h, w)))
        y, x = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        bg = cv2.resize(
            photo[y : y + side, x : x + side], (SIZE, SIZE), interpolation=cv2.INTER_AREA
        )
        canvas = (bg.astype(np.float32) * rng.uniform(0.3, 0.7)).astype(np.float32)
        placed: list[list[float]] = []
        for _ in range(int(rng.integers(1, 4))):
            k = int(rng.integers(len(digits.images)))
            s = int(rng.integers(20, 40))
            glyph = cv2.resize(
                digits.images[k].astype(np.float32) / 16.0, (s, s), interpolation=cv2.INTER_LINEAR
            )
            gy, gx = int(rng.integers(0, SIZE - s)), int(rng.integers(0, SIZE - s))
            ys, xs = np.nonzero(glyph > 0.25)
            box = [gx + xs.min(), gy + ys.min(), gx + xs.max() + 1, gy + ys.max() + 1]
            if any(_iou(box, b) > 0.1 for b in placed):
                continue
            colour = rng.uniform(170, 255, 3).astype(np.float32)
            a = glyph[..., None]
            region = canvas[gy : gy + s, gx : gx + s]
            canvas[gy : gy + s, gx : gx + s] = region * (1 - a) + colour * a
            placed.append(box + [int(digits.target[k])])
        images[i] = np.clip(canvas, 0, 255).astype(np.uint8)[..., ::-1]  # photos are BGR
        boxes.append(np.array(placed, np.float32).reshape(-1, 5))
    return images, boxes


def _iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def to_input(images: np.ndarray) -> np.ndarray:
    return (images.astype(np.float32) / 255.0).transpose(0, 3, 1, 2).copy()


def make_model():
    import torch
    from torch import nn

    def block(cin, cout, stride):
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.SiLU()
        )

    class TinyYolo(nn.Module):
        """Backbone to stride 8, one anchor-free head; the output is decoded in the graph like
        Ultralytics' export: [N, 4 + classes, cells], boxes cx, cy, w, h in input pixels."""

        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(
                block(3, 16, 2),
                block(16, 32, 2),
                block(32, 32, 1),
                block(32, 64, 2),
                block(64, 64, 1),
                block(64, 64, 1),
            )
            self.box = nn.Sequential(block(64, 64, 1), nn.Conv2d(64, 4, 1))
            self.cls = nn.Sequential(block(64, 64, 1), nn.Conv2d(64, CLASSES, 1))
            ys, xs = torch.meshgrid(torch.arange(GRID), torch.arange(GRID), indexing="ij")
            self.register_buffer("centres", torch.stack([xs, ys]).reshape(1, 2, -1).float() + 0.5)

        def raw(self, x):
            f = self.body(x)
            return self.box(f).flatten(2), self.cls(f).flatten(2)

        def forward(self, x):
            box, cls = self.raw(x)
            xy = (self.centres + torch.tanh(box[:, :2])) * STRIDE
            wh = torch.exp(box[:, 2:].clamp(max=4.0)) * STRIDE
            return torch.cat([xy, wh, torch.sigmoid(cls)], 1)

    return TinyYolo()


def targets(boxes: list[np.ndarray]):
    """Per image and cell: is a box centred there, its class, its box (cx, cy, w, h) in pixels."""
    n = len(boxes)
    obj = np.zeros((n, GRID * GRID), np.float32)
    cls = np.zeros((n, CLASSES, GRID * GRID), np.float32)
    reg = np.zeros((n, 4, GRID * GRID), np.float32)
    for i, bs in enumerate(boxes):
        for x1, y1, x2, y2, c in bs:
            cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
            cell = int(cy // STRIDE) * GRID + int(cx // STRIDE)
            obj[i, cell] = 1
            cls[i, int(c), cell] = 1
            reg[i, :, cell] = [cx, cy, x2 - x1, y2 - y1]
    return obj, cls, reg


def train(steps: int, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    model = make_model()
    images, boxes = scenes(3000, seed=100)
    x_all = torch.from_numpy(to_input(images))
    obj, cls, reg = (torch.from_numpy(a) for a in targets(boxes))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(steps):
        idx = torch.randint(0, len(x_all), (32,), generator=gen)
        out = model(x_all[idx])
        o = obj[idx]
        cls_loss = torch.nn.functional.binary_cross_entropy(
            out[:, 4:].clamp(1e-6, 1 - 1e-6), cls[idx]
        )
        pos = o > 0
        pred = out[:, :4].permute(0, 2, 1)[pos]
        true = reg[idx].permute(0, 2, 1)[pos]
        box_loss = (torch.abs(pred[:, :2] - true[:, :2]).sum(1) / STRIDE).mean() + (
            torch.abs(torch.log(pred[:, 2:] / true[:, 2:])).sum(1)
        ).mean()
        loss = 20 * cls_loss + box_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if (step + 1) % 500 == 0:
            print(
                f"  step {step + 1}/{steps}: class loss {cls_loss.item():.4f}, box loss {box_loss.item():.3f}",
                flush=True,
            )
    return model.eval()


def f1_against_truth(dets, boxes: list[np.ndarray]) -> dict:
    from edgert.quantize.gate import matched_boxes

    tp = n_pred = n_true = 0
    for d, bs in zip(dets, boxes, strict=True):
        n_pred += len(d)
        n_true += len(bs)
        tp += matched_boxes(
            [x.box for x in d], [x.class_id for x in d], bs[:, :4], bs[:, 4].astype(int)
        )
    p, r = tp / max(n_pred, 1), tp / max(n_true, 1)
    return {
        "precision": round(p, 4),
        "recall": round(r, 4),
        "f1": round(2 * p * r / max(p + r, 1e-9), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", default="reports/detector_int8.json")
    ap.add_argument("--steps", type=int, default=2500)
    args = ap.parse_args()
    import onnx

    from edgert.export import export_model
    from edgert.quantize import build, evaluate, gate
    from edgert.runtime.detection import decode_detections

    t0 = time.perf_counter()
    model = train(args.steps)
    train_s = time.perf_counter() - t0
    calib, _ = scenes(300, seed=200)
    test, test_boxes = scenes(300, seed=300)
    x_test = to_input(test)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "labels.txt").write_text("\n".join(str(d) for d in range(CLASSES)) + "\n")
        bundle = export_model(
            model,
            tmp / "digits_yolo.edgert",
            input_shape=f"1x3x{SIZE}x{SIZE}",
            dynamic_batch=True,
            task="detect",
            labels=tmp / "labels.txt",
        ).bundle
        np.savez(tmp / "calib.npz", input=to_input(calib))
        t1 = time.perf_counter()
        report = build(bundle, "int8", calib=str(tmp / "calib.npz"), holdout_size=100)
        build_s = time.perf_counter() - t1
        q = report.quantization
        fp32 = evaluate.run(onnx.load(str(bundle / "model.onnx")), x_test)
        rows = {"FP32": fp32}
        for name, label in (
            ("model.int8.onnx", "INT8"),
            ("model.int8.fp16.onnx", "INT8, FP16 outside"),
        ):
            if (bundle / name).is_file():
                rows[label] = evaluate.run(onnx.load(str(bundle / name)), x_test)
        result = {
            "train_seconds": round(train_s, 1),
            "build_seconds": round(build_s, 1),
            "preparation": q["preparation"]["kept"],
            "method": q["calibration"]["method"],
            "kept_fp32": q["kept_fp32"],
            "quantized_nodes": q["quantized_nodes"],
            "quantizable_nodes": q["quantizable_nodes"],
            "build_holdout": q["holdout"],
            "rows": {},
        }
        for label, outs in rows.items():
            dets = decode_detections(list(outs.values()), num_classes=CLASSES)
            ev = gate.evaluate(fp32, outs, "detect", num_classes=CLASSES)
            result["rows"][label] = {
                "box_f1_vs_fp32": round(ev.metrics["box_f1"], 4),
                "cosine": round(ev.metrics["cosine"], 5),
                **{f"truth_{k}": v for k, v in f1_against_truth(dets, test_boxes).items()},
            }
    print(
        f"TinyYolo on digit scenes: trained {result['train_seconds']:.0f} s; edgert build int8 {result['build_seconds']:.0f} s "
        f"(kept {result['preparation']}, {result['method']}, {result['quantized_nodes']}/{result['quantizable_nodes']} nodes INT8)"
    )
    print(
        f"{'model':<22}{'box F1 vs FP32':>16}{'cosine':>9}{'F1 vs truth':>13}{'precision':>11}{'recall':>8}"
    )
    for label, r in result["rows"].items():
        print(
            f"{label:<22}{r['box_f1_vs_fp32']:>16.4f}{r['cosine']:>9.4f}{r['truth_f1']:>13.4f}"
            f"{r['truth_precision']:>11.4f}{r['truth_recall']:>8.4f}"
        )
    write_json(args.json, result)


if __name__ == "__main__":
    main()
