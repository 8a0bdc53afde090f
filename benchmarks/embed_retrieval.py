"""Retrieval with the ImageNet MobileNetV2 embedder (zoo:mobilenet_v2_embed), FP32 vs FP16 vs INT8
side by side, on labelled pictures that ship offline: recall@10 for same-class neighbours
(each picture's 10 nearest others by cosine, the fraction of the same class), on

- scikit-learn's digits (1,797 8x8 digits, 10 classes),
- scikit-image's ``lfw_subset`` (200 25x25 pictures: 100 faces, 100 not),
- the 2,000 simulated textile pictures of ``conformal-clip-data`` 0.1.4 (nominal 1,000, global
  defect 500, local defect 500: 3 classes).

FP16 and INT8 are the bundle's own models as ``edgert build --precision fp16|int8`` makes them,
run on ONNX Runtime CPU as the build evaluates them where there is no TensorRT: ``int8`` is
calibrated on pictures of the set itself (``--calib`` an .npz of them, 200 pictures never
evaluated; lfw_subset: 60 of its 200, the other 140 evaluated; no preparation; edgert's default
gate on the build's hold-out of them, which keeps nodes out of INT8 until it passes), ``int8 zoo photos`` is the bundle's own, calibrated on the zoo entry's photos and
gated on their hold-out (what ``edgert build`` does with no ``--calib``). Also per precision: the INT8/FP16 model's neighbours
against FP32's (``neighbour_recall``, what the build's gate measures), the mean and least cosine of
each vector to FP32's, and the vectors' spread (what the health check bounds); and FP32's vectors
in their compact stored forms (float16, int8: :func:`edgert.runtime.embeddings.encode`). Accuracy
numbers only. Prints a table, writes JSON.

    pip install scikit-image && pip install --no-deps conformal-clip-data==0.1.4
    python benchmarks/embed_retrieval.py [--json reports/embed_retrieval.json] [--limit N]  # N a set
        [--bundle mnv2e.edgert]   # an embedder already built with fp16 and int8
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import tempfile
from pathlib import Path

import cv2
import numpy as np
import onnx
from json_report import write_json

from edgert.export import export_model
from edgert.quantize import build, evaluate
from edgert.runtime import embeddings
from edgert.runtime.bundle import Bundle
from edgert.runtime.precision import model_file

PRECISIONS = ("fp32", "fp16", "int8")
K = 10
CALIB = {"digits": 200, "lfw_subset": 60, "textiles": 200}  # pictures calibrating, never evaluated


def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    images = [(im * 255 / 16).clip(0, 255).astype(np.uint8) for im in d.images]
    return [cv2.cvtColor(im, cv2.COLOR_GRAY2BGR) for im in images], d.target


def lfw():
    from skimage.data import lfw_subset

    faces = lfw_subset()  # 100 faces, then 100 pictures that are not faces
    images = [(im * 255).clip(0, 255).astype(np.uint8) for im in faces]
    return [cv2.cvtColor(im, cv2.COLOR_GRAY2BGR) for im in images], np.repeat([1, 0], 100)


def textiles():
    spec = importlib.util.find_spec("conformal_clip_data")
    if spec is None or spec.origin is None:
        raise SystemExit("pip install --no-deps conformal-clip-data==0.1.4")
    root = Path(spec.origin).parent / "data/textile_images/simulated"
    images, labels = [], []
    for i, kind in enumerate(("nominal", "global", "local")):
        for f in sorted((root / kind).iterdir()):
            images.append(cv2.imread(str(f), cv2.IMREAD_COLOR))
            labels.append(i)
    return images, np.array(labels)


DATASETS = {"digits": digits, "lfw_subset": lfw, "textiles": textiles}


def embedder(folder: Path) -> Path:
    """zoo:mobilenet_v2_embed (dynamic batch) built to FP16, then to INT8 (edgert's defaults)."""
    bundle = export_model("zoo:mobilenet_v2_embed", folder / "mnv2e.edgert", dynamic_batch=True)
    for precision in ("fp16", "int8"):
        build(bundle.bundle, precision, no_engine=True, say=print)
    return bundle.bundle


def calibrated(bundle: Path, images: list, folder: Path) -> Path:
    """A copy of ``bundle`` built to INT8 with ``images`` as its calibration data (2/3
    calibration, 1/3 the gate's hold-out: the build's own split)."""
    import shutil

    target = folder / bundle.name
    shutil.rmtree(target, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(bundle, target)
    side = min(min(im.shape[:2]) for im in images)
    npz = folder / "calib.npz"
    np.savez(npz, images=np.stack([cv2.resize(im, (side, side)) for im in images]))
    n = len(images)
    build(
        target,
        "int8",
        calib=str(npz),
        calib_size=n * 2 // 3,
        holdout_size=n - n * 2 // 3,
        prepare="none",
        no_engine=True,
        say=print,
    )
    return target


def vectors(bundle: Path, own_int8: Path, images: list) -> dict:
    """Each model's raw outputs for ``images`` through the bundle's preprocessing."""
    pre = Bundle(bundle).manifest.preprocessing
    inputs = np.concatenate([pre.batch(images[i : i + 64])[0] for i in range(0, len(images), 64)])
    files = {p: bundle / model_file(p) for p in PRECISIONS}
    files["int8 zoo photos"], files["int8"] = files["int8"], own_int8 / model_file("int8")
    out = {}
    for p, file in files.items():
        sess = evaluate.session(onnx.load(str(file)))
        out[p] = next(iter(evaluate.run(sess, inputs, what=f"{p} embeddings").values()))
    return out


def measure(raw: dict, labels: np.ndarray) -> dict:
    ref, _ = embeddings.normalise(raw["fp32"])
    rows = {}
    for p in raw:
        unit, _ = embeddings.normalise(raw[p])
        cos = (unit.astype(np.float64) * ref).sum(axis=1)
        rows[p] = {
            "recall_at_10": embeddings.label_recall(unit, labels, K),
            "neighbour_recall": embeddings.neighbour_recall(ref, unit, K),
            "cosine_mean": float(cos.mean()),
            "cosine_min": float(cos.min()),
            "spread": embeddings.spread(unit),
        }
    for form in ("float16", "int8"):
        stored = np.stack([embeddings.decode(embeddings.encode(v, form)) for v in ref])
        unit, _ = embeddings.normalise(stored)
        rows[f"fp32 stored {form}"] = {
            "recall_at_10": embeddings.label_recall(unit, labels, K),
            "neighbour_recall": embeddings.neighbour_recall(ref, unit, K),
            "cosine_mean": float((unit.astype(np.float64) * ref).sum(axis=1).mean()),
            "bytes": len(embeddings.encode(ref[0], form)),
        }
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default="reports/embed_retrieval.json")
    ap.add_argument("--bundle", help="zoo:mobilenet_v2_embed already built to fp16 and int8")
    ap.add_argument("--limit", type=int, help="at most N pictures of each set (a quick run)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(args.bundle) if args.bundle else embedder(Path(tmp))
        manifest = json.loads((bundle / "manifest.json").read_text())
        report = {
            "embedder": "zoo:mobilenet_v2_embed (ImageNet MobileNetV2, pooled 1280-d features)",
            "k": K,
            "gate_holdout": {
                p: (manifest.get("quantization") or {}).get(p, {}).get("holdout")
                for p in PRECISIONS[1:]
            },
            "datasets": {},
        }
        for name, load in DATASETS.items():
            images, labels = load()
            order = np.random.default_rng(0).permutation(len(images))
            calib, pick = order[: CALIB[name]], order[CALIB[name] :][: args.limit]
            own = calibrated(bundle, [images[i] for i in calib], Path(tmp) / name)
            images, labels = [images[i] for i in pick], labels[pick]
            rows = measure(vectors(bundle, own, images), labels)
            q = json.loads((own / "manifest.json").read_text())["quantization"]["int8"]
            rows["int8"].update(kept_fp32=len(q["kept_fp32"]), int8_macs=q.get("macs_share"))
            rows["int8"]["gate_holdout"] = q["holdout"]
            report["datasets"][name] = {
                "pictures": len(images),
                "calibration_pictures": len(calib),
                "classes": len(set(labels)),
                **rows,
            }
    _table(report)
    write_json(args.json, report)


def _table(report: dict) -> None:
    print(f"\nrecall@{K} of same-class neighbours ({report['embedder']})")
    print(
        f"{'data set':<12} {'model':<20} {'recall@10':>9} {'vs FP32 nn':>10} {'cos mean':>9} "
        f"{'cos min':>8} {'spread':>7}"
    )
    for name, d in report["datasets"].items():
        for row, m in d.items():
            if not isinstance(m, dict):
                continue
            print(
                f"{name:<12} {row:<20} {m['recall_at_10']:9.4f} {m['neighbour_recall']:10.4f} "
                f"{m['cosine_mean']:9.5f} {m.get('cosine_min', float('nan')):8.5f} "
                f"{m.get('spread', float('nan')):7.4f}"
            )
    for p, held in report["gate_holdout"].items():
        if held:
            print(f"gate hold-out {p}: " + ", ".join(f"{k} {v}" for k, v in held.items()))


if __name__ == "__main__":
    main()
