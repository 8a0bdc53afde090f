"""The segment-instances task: objects with a mask each (YOLO-seg; not the per-pixel classes of
the ``segment`` task). The head's first output is [B, 4 + nc + P, N] (end-to-end: [B, K, 6 + P])
with P mask coefficients per candidate; the second, [B, P, H/4, W/4], the prototypes. Each
object's mask is its coefficients times the prototypes, cropped to its box, upsampled to the
model's input and thresholded at 0, as Ultralytics' predictor computes it; objects whose mask is
empty are dropped (as there). Records carry the mask's ``mask_area`` (source pixels) and its
outline as a ``polygon`` in source pixels; :attr:`Detection.mask` keeps the bitmap
(model pixels, cropped to the box: :class:`InstanceMask`, whose ``in_source()`` gives it at the
source's resolution where a caller asks) for comparisons, not written to JSON."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError
from ..results import Result
from . import detect


@dataclass(frozen=True)
class InstanceMask:
    """One object's mask in model-input pixels: ``bitmap`` (bool) whose top-left corner is at
    (``x``, ``y``) of an input of ``input_hw``; the rest of the input is outside the mask."""

    x: int
    y: int
    bitmap: np.ndarray
    input_hw: tuple
    transform: object = None  # the frame's Transform (source -> model pixels), where known

    def in_source(self) -> tuple:
        """The mask at the source image's resolution, only where asked (records carry the
        outline): (x, y, bool bitmap) with (x, y) its top-left corner in source pixels, each
        source pixel taking the model pixel its centre maps to."""
        t = self.transform
        if t is None:
            return self.x, self.y, self.bitmap
        h, w = self.bitmap.shape
        sh, sw = t.source_hw
        x0 = max(0, int(np.floor((self.x - t.ox) / t.sx)))
        y0 = max(0, int(np.floor((self.y - t.oy) / t.sy)))
        x1 = min(sw, int(np.ceil((self.x + w - t.ox) / t.sx)))
        y1 = min(sh, int(np.ceil((self.y + h - t.oy) / t.sy)))
        cols = np.floor((np.arange(x0, x1) + 0.5) * t.sx + t.ox).astype(np.int64) - self.x
        rows = np.floor((np.arange(y0, y1) + 0.5) * t.sy + t.oy).astype(np.int64) - self.y
        inside = (
            (rows[:, None] >= 0) & (rows[:, None] < h) & (cols[None, :] >= 0) & (cols[None, :] < w)
        )
        picked = self.bitmap[rows.clip(0, h - 1)[:, None], cols.clip(0, w - 1)[None, :]]
        return x0, y0, picked & inside

    def full(self) -> np.ndarray:
        """The mask over the whole model input (bool [H, W])."""
        out = np.zeros(self.input_hw, bool)
        h, w = self.bitmap.shape
        out[self.y : self.y + h, self.x : self.x + w] = self.bitmap
        return out

    @property
    def area(self) -> int:
        return int(self.bitmap.sum())


def masks_of(protos: np.ndarray, coeffs: np.ndarray, boxes: np.ndarray, input_hw) -> list:
    """Each object's :class:`InstanceMask` (None where it is empty): coefficients [M, P] times
    prototypes [P, h, w], zero outside its box (x1, y1, x2, y2 in input pixels, scaled to the
    prototypes'), bilinearly upsampled to ``input_hw`` and thresholded at 0."""
    import cv2

    p, mh, mw = protos.shape
    ih, iw = input_hw
    raw = (coeffs.astype(np.float32) @ protos.reshape(p, -1).astype(np.float32)).reshape(-1, mh, mw)
    scale = np.array([mw / iw, mh / ih, mw / iw, mh / ih], np.float32)
    # the crop as Ultralytics' predictor makes it: box edges rounded for fewer than 50 objects,
    # exact (pixel centres from the edge in) for 50 and more
    rounded = len(boxes) < 50
    cols = np.arange(mw, dtype=np.float32)[None, :]
    rows = np.arange(mh, dtype=np.float32)[:, None]
    out = []
    for m, box in zip(raw, boxes):
        x1, y1, x2, y2 = np.round(box * scale) if rounded else box * scale
        inside = (cols >= x1) & (cols < x2) & (rows >= y1) & (rows < y2)
        m = np.where(inside, m, 0).astype(np.float32)
        up = cv2.resize(m, (iw, ih), interpolation=cv2.INTER_LINEAR) > 0
        ys, xs = np.nonzero(up.any(axis=1))[0], np.nonzero(up.any(axis=0))[0]
        if not ys.size:
            out.append(None)
            continue
        y0, y1_, x0, x1_ = ys[0], ys[-1] + 1, xs[0], xs[-1] + 1
        out.append(InstanceMask(int(x0), int(y0), up[y0:y1_, x0:x1_], (ih, iw)))
    return out


def polygon(mask: InstanceMask, transform) -> list:
    """The outline of the mask's largest part, in source pixels ([[x, y], ...])."""
    import cv2

    contours, _ = cv2.findContours(
        mask.bitmap.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE
    )
    if not contours:
        return []
    pts = max(contours, key=cv2.contourArea).reshape(-1, 2).astype(np.float64)
    pts += (mask.x, mask.y)
    if transform is not None:
        pts = transform.points_to_source(pts)
    return [[round(x, 1), round(y, 1)] for x, y in pts.tolist()]


def head_extras(kpt, shapes: list):
    """Values per candidate after the classes: the mask coefficients: as many as the prototype output's channels."""
    protos = [s for s in shapes[1:] if len(s) == 4]
    return protos[0][1] if protos else None


def decode(model, values: list, transforms: list) -> list:
    if len(values) != 2:
        raise ShapeError(
            "an instance-segmentation model has two outputs (detections with mask coefficients, "
            f"and prototypes); this one has {len(values)}"
        )
    first, protos = sorted(values, key=lambda v: v.ndim)  # [B, ., .] then [B, P, h, w]
    if protos.ndim != 4:
        raise ShapeError(f"the prototypes are [batch, P, h, w]; got {list(protos.shape)}")
    found = detect.candidates(model, [first], protos.shape[1])
    input_hw = tuple(model.engine.preprocessing.size)
    results = []
    ts = transforms or [None] * len(found)
    for i, (c, t) in enumerate(zip(found, ts)):
        masks = masks_of(protos[i], c.extras, c.boxes, input_hw)
        keep = [j for j, m in enumerate(masks) if m is not None]
        c = c.take(np.asarray(keep, np.int64))
        objs = detect.objects(model, [c], [t])[0]
        sx = t.sx * t.sy if t is not None else 1.0
        results.append(
            Result.of_objects(
                [
                    dataclasses.replace(
                        o.with_extras(
                            mask_area=round(masks[j].area / sx, 1), polygon=polygon(masks[j], t)
                        ),
                        mask=dataclasses.replace(masks[j], transform=t),
                    )
                    for o, j in zip(objs, keep)
                ],
                model.task,
            )
        )
    return results


def _regions(objects: list, bitmaps: bool) -> list:
    """Each object's mask as (x, y, bool bitmap): its bitmap in model pixels, or its outline
    (``polygon``) filled, in the pixels of its records."""
    import cv2

    out = []
    for o in objects:
        if bitmaps:
            out.append((o.mask.x, o.mask.y, o.mask.bitmap))
            continue
        poly = np.round(np.asarray(o.extras.get("polygon") or [], np.float64)).astype(np.int64)
        if poly.ndim != 2 or len(poly) < 3:
            out.append((0, 0, np.zeros((0, 0), bool)))
            continue
        x0, y0 = poly.min(axis=0)
        x1, y1 = poly.max(axis=0)
        canvas = np.zeros((y1 - y0 + 1, x1 - x0 + 1), np.uint8)
        cv2.fillPoly(canvas, [(poly - (x0, y0)).astype(np.int32).reshape(-1, 1, 2)], 1)
        out.append((int(x0), int(y0), canvas.astype(bool)))
    return out


def mask_iou(ref: list, got: list):
    """Mask IoU [len(ref), len(got)] of two images' objects: on their bitmaps where all come
    from one model input (the build's gate), else on their outlines filled, in source pixels
    (the camera's swap check, whose two models may differ in input size)."""
    if not all(o.mask is not None or o.extras.get("polygon") for o in (*ref, *got)):
        return None  # objects without masks: compared by their boxes
    masks = [o.mask for o in (*ref, *got)]
    same = all(m is not None for m in masks) and len({m.input_hw for m in masks}) <= 1
    a, b = _regions(ref, same), _regions(got, same)
    area_a, area_b = [int(m.sum()) for _, _, m in a], [int(m.sum()) for _, _, m in b]
    out = np.zeros((len(a), len(b)))
    for i, (ax, ay, am) in enumerate(a):
        for j, (bx, by, bm) in enumerate(b):
            x0, y0 = max(ax, bx), max(ay, by)
            x1 = min(ax + am.shape[1], bx + bm.shape[1])
            y1 = min(ay + am.shape[0], by + bm.shape[0])
            inter = 0
            if x1 > x0 and y1 > y0:
                inter = int(
                    (
                        am[y0 - ay : y1 - ay, x0 - ax : x1 - ax]
                        & bm[y0 - by : y1 - by, x0 - bx : x1 - bx]
                    ).sum()
                )
            union = area_a[i] + area_b[j] - inter
            out[i, j] = inter / union if union else 0.0
    return out


# detect's measures, and the masks': mask_f1 (objects paired at mask IoU >= 0.5, as COCO's mask
# AP50 pairs them) and mask_iou (mean mask IoU of the pairs the boxes match)
compare, judge = detect.shape_hooks(mask_iou, "mask", "iou", "masks")
observed = detect.observed


def draw(out, result: Result) -> list:
    """Each mask as a tint of its track's colour (its outline filled), then boxes as detect's."""
    import cv2

    if result.objects:
        tint = out.copy()
        for o in result.objects:
            pts = detect.pixels(o.extras.get("polygon") or [], out)
            if pts is not None:
                cv2.fillPoly(tint, [pts.reshape(-1, 1, 2)], detect.track_color(o.track_id))
        cv2.addWeighted(tint, 0.4, out, 0.6, 0, dst=out)
    detect.draw(out, result)
    return []


def describe(result: Result) -> list:
    """``edgert run``'s lines: each object as detect says it, with its mask's area."""
    return [
        f"{line}  mask {o.extras.get('mask_area', 0):.0f} px"
        for line, o in zip(detect.describe(result), result.objects)
    ]
