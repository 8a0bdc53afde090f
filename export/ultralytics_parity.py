"""Parity of an Ultralytics checkpoint's export: Ultralytics' own predictor on the checkpoint
(PyTorch) and on the ONNX its exporter made, the same square photos in (the bundled sample
photos, centre-cropped and resized to the export size, so neither predictor letterboxes them
differently: on the checkpoint it pads to a rectangle, on the ONNX to the exported square).

Each photo's objects are paired (same class, corners within ``BOX_PX``, by an optimal
assignment); an object only one side found passes only when its score is within ``EDGE`` of the
threshold (a box at 0.2501 in one and 0.2499 in the other). A classifier's probabilities are
compared as they are. The report is a :class:`~.parity.ParityReport` whose cases are the photos.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from .parity import OutputParity, ParityCase, ParityReport

BOX_PX = 0.5  # model-input pixels: float32 on two runtimes moves a corner by ~1e-3 (measured)
SCORE = 2e-3
EDGE = 0.01
CONF, IOU = 0.25, 0.45
TITLE = (
    f"parity vs Ultralytics' predictor on the checkpoint (PyTorch), the same photos through its "
    f"ONNX: boxes and keypoints within {BOX_PX} px, scores within {SCORE}"
)


def photos(size: tuple) -> list:
    """(name, BGR image of ``size`` (h, w)) of the bundled sample photos, centre-cropped to that
    shape and resized."""
    import cv2

    folder = Path(__file__).resolve().parents[1] / "runtime" / "sample_data" / "images"
    out = []
    for path in sorted(folder.glob("*.jpg")):
        image = cv2.imread(str(path))
        if image is None:
            continue
        h, w = image.shape[:2]
        scale = min(h / size[0], w / size[1])
        ch, cw = int(size[0] * scale), int(size[1] * scale)
        y, x = (h - ch) // 2, (w - cw) // 2
        crop = image[y : y + ch, x : x + cw]
        out.append((path.name, cv2.resize(crop, size[::-1], interpolation=cv2.INTER_AREA)))
    return out


def predictor_parity(yolo, checkpoint: Path, onnx_file: Path, size: tuple) -> ParityReport:
    """The checkpoint against its ONNX through ``yolo`` (Ultralytics' YOLO class); ``size``:
    the export's (h, w)."""
    reference = yolo(str(checkpoint))
    exported = yolo(str(onnx_file), task=reference.task)
    cases = []
    for name, image in photos(size):
        options = {"imgsz": list(size), "conf": CONF, "iou": IOU, "verbose": False}
        ref = reference.predict(image, **options)[0]
        got = exported.predict(image, **options)[0]
        outputs, count = _compare(ref, got)
        cases.append(ParityCase(f"{name}: {count} object(s)", 1, tuple(outputs)))
    return ParityReport(BOX_PX, 0.0, tuple(cases), title=TITLE)


def _compare(ref, got) -> tuple:
    """(OutputParity list, objects compared) of one photo's two Results."""
    if getattr(ref, "probs", None) is not None:
        a, b = ref.probs.data.cpu().numpy(), got.probs.data.cpu().numpy()
        return [_within("probabilities", a, b, SCORE)], int(a.size)
    rotated = getattr(ref, "obb", None) is not None  # Results.obb: oriented boxes
    ra, ga = (ref.obb, got.obb) if rotated else (ref.boxes, got.boxes)
    rb, gb = (x.xyxyxyxy.reshape(-1, 8) if rotated else x.xyxy for x in (ra, ga))
    kind = "corners" if rotated else "boxes"
    rb, gb = rb.cpu().numpy(), gb.cpu().numpy()
    rs, gs = ra.conf.cpu().numpy(), ga.conf.cpu().numpy()
    rc, gc = ra.cls.cpu().numpy(), ga.cls.cpu().numpy()
    pairs, lone = _pair(rb, rc, gb, gc)
    lone_ok = all(abs(s - CONF) <= EDGE for s in np.concatenate([rs[lone[0]], gs[lone[1]]]))
    i, j = (np.array([p[k] for p in pairs], int) for k in (0, 1))
    boxes = _within(kind, rb[i], gb[j], BOX_PX)
    boxes = replace(boxes, passed=boxes.passed and lone_ok)
    outputs = [boxes, _within("scores", rs[i], gs[j], SCORE)]
    if getattr(ref, "keypoints", None) is not None:
        rk, gk = ref.keypoints.xy.cpu().numpy(), got.keypoints.xy.cpu().numpy()
        outputs.append(_within("keypoints", rk[i], gk[j], BOX_PX))
    return outputs, len(pairs)


def _pair(rb, rc, gb, gc) -> tuple:
    """Pairs (i, j) of the same class with corners within BOX_PX, and the indices left on each."""
    from scipy.optimize import linear_sum_assignment

    pairs = []
    if len(rb) and len(gb):
        far = np.abs(rb[:, None, :] - gb[None, :, :]).max(axis=2)
        far = far + 1e6 * (rc[:, None] != gc[None, :])
        rows, cols = linear_sum_assignment(far)
        pairs = [
            (int(a), int(b)) for a, b in zip(rows, cols, strict=True) if far[a, b] <= 4 * BOX_PX
        ]
    left_r = [k for k in range(len(rb)) if k not in {p[0] for p in pairs}]
    left_g = [k for k in range(len(gb)) if k not in {p[1] for p in pairs}]
    return pairs, (np.array(left_r, int), np.array(left_g, int))


def _within(name: str, ref: np.ndarray, got: np.ndarray, atol: float) -> OutputParity:
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    diff = np.abs(ref - got) if ref.shape == got.shape else np.array([np.inf])
    worst = float(diff.max()) if diff.size else 0.0
    denom = float(np.linalg.norm(ref) * np.linalg.norm(got))
    cosine = float(np.dot(ref.ravel(), got.ravel()) / denom) if denom else 1.0
    return OutputParity(name, worst, 0.0, cosine, bool(np.isfinite(worst) and worst <= atol))
