"""The detect task: a detector's outputs -> objects in source pixels, and what objects mean to
the rest of edgert (the hooks every task whose results are boxes shares: faces uses them too)."""

from __future__ import annotations

import collections

import numpy as np

from ..results import Detection, Result


def head_of(model):
    """The model's :class:`~edgert.runtime.tasks.heads.Head` (its manifest's; the YOLO form where
    it records none)."""
    from .heads import Head

    manifest = getattr(model.engine, "manifest", None)
    return manifest.head if manifest is not None else Head()


def candidates(model, values: list, extra: int, rotated: bool = False) -> list:
    """A detector-family model's first output -> :class:`~edgert.runtime.tasks.heads.Candidates`
    per image, in model-input pixels. ``extra``: the values each candidate carries after its
    classes. The number of classes is the labels' where the model has them, else what the
    output's shape leaves."""
    from .heads import decode_head

    head = head_of(model)
    first = values[0]
    if model.labels:
        nc = len(model.labels)
    elif head.form == "detr":
        nc = first.shape[-1] - 4
    elif head.form == "end2end":
        nc = None  # rows carry a class id each: any whole number from 0 then
    else:
        nc = first.shape[1] - 4 - extra
    found = decode_head(first, head, nc, extra, model.conf, model.iou, rotated=rotated)
    if head.form == "detr":  # boxes normalised to the input: in its pixels
        h, w = model.engine.preprocessing.size
        for c in found:
            c.boxes = c.boxes * np.array([w, h, w, h], np.float32)
    return found


def objects(model, found, transforms: list) -> list:
    """Candidates in model pixels -> the :class:`Detection` lists per image in source pixels
    (boxes mapped and clipped, labels named); each task adds its extras to them."""
    names = list(model.labels or ())
    out = []
    for c, t in zip(found, transforms or [None] * len(found)):
        boxes = t.to_source(c.boxes) if t is not None else c.boxes
        out.append(
            [
                Detection(tuple(b), s, k, names[k] if 0 <= k < len(names) else str(k))
                for b, s, k in zip(
                    np.asarray(boxes, np.float64).tolist(),
                    np.asarray(c.scores, np.float64).tolist(),
                    c.classes.tolist(),
                )
            ]
        )
    return out


def head_extras(kpt, shapes: list):
    """Values per candidate after the classes: a box and its class scores, nothing after them."""
    return 0


def decode(model, values: list, transforms: list) -> list:
    from .detection import decode_detections

    if len(values) == 1 and head_of(model).form != "yolo":  # end-to-end and DETR heads
        found = candidates(model, values, 0)
        return [Result.of_objects(d, model.task) for d in objects(model, found, transforms)]
    dets = decode_detections(
        values,
        model.conf,
        model.iou,
        transforms=transforms,
        labels=model.labels,
        input_size=model.engine.preprocessing.size,
    )
    return [Result.of_objects(per_image, model.task) for per_image in dets]


def compare(ref: list, got: list, by: str = "label") -> dict:
    """How the objects of ``got`` match ``ref``'s (per image :class:`Result` lists): box F1 (IoU
    >= 0.5, the same ``by``: label or class_id), ``ref``'s boxes per image (0: the F1 of 1.0
    judged nothing) and per label the ratio of ``got``'s objects to ``ref``'s."""
    from .detection import matched_boxes

    matched = total_ref = total_got = 0
    per = collections.defaultdict(lambda: [0, 0])
    for r, g in zip(ref, got):
        r, g = r.objects, g.objects
        total_ref, total_got = total_ref + len(r), total_got + len(g)
        for d in r:
            per[str(d.label)][0] += 1
        for d in g:
            per[str(d.label)][1] += 1
        matched += matched_boxes(
            [d.box for d in r],
            [getattr(d, by) for d in r],
            [d.box for d in g],
            [getattr(d, by) for d in g],
        )
    return {
        "frames": len(ref),
        "box_f1": 2 * matched / (total_ref + total_got) if total_ref + total_got else 1.0,
        "boxes_per_frame": total_ref / max(1, len(ref)),
        "rate_ratio": {k: round(n[1] / n[0], 3) for k, n in per.items() if n[0] >= 3},
    }


def agreement(ref: list, got: list, by: str, similarity, name: str, measure: str) -> dict:
    """How the objects of ``got`` agree with ``ref``'s (per image :class:`Result` lists) on a
    task's own shape: ``{name}_f1``, the F1 of objects paired within one ``by`` (label or class
    id) at ``similarity`` >= 0.5 (``similarity(a, b)``: the [len(a), len(b)] matrix of two
    images' objects: keypoint OKS, mask IoU, rotated IoU; None where they lack that shape: box
    IoU then), as box F1 pairs at box IoU 0.5; and
    ``{name}_{measure}``, the mean similarity of the pairs the boxes match (1.0 where none)."""
    from .detection import box_iou, greedy_pairs, matched_pairs

    matched = total = 0
    seen = []
    for r, g in zip(ref, got):
        r, g = r.objects, g.objects
        total += len(r) + len(g)
        if not r or not g:
            continue
        sim = similarity(r, g)
        if sim is None:  # objects without the task's shape (records read back): their boxes
            sim = box_iou(
                np.array([d.box for d in r], np.float64), np.array([d.box for d in g], np.float64)
            )
        sim = np.asarray(sim, np.float64)
        same = np.array([[getattr(a, by) == getattr(b, by) for b in g] for a in r])
        matched += len(greedy_pairs(np.where(same, sim, 0), 0.5))
        pairs = matched_pairs(
            [d.box for d in r],
            [getattr(d, by) for d in r],
            [d.box for d in g],
            [getattr(d, by) for d in g],
        )
        seen += [sim[i, j] for i, j in pairs]
    return {
        f"{name}_f1": 2 * matched / total if total else 1.0,
        f"{name}_{measure}": float(np.mean(seen)) if seen else 1.0,
    }


def shape_hooks(similarity, name: str, measure: str, noun: str) -> tuple:
    """(compare, judge) of a task whose objects are boxes with a shape of their own (keypoints,
    a mask, an oriented box): detect's measures plus :func:`agreement` on ``similarity``
    (``{name}_f1``, ``{name}_{measure}``); the judge refuses what detect's refuses, then the
    shape's F1 under the same bound as the boxes' (``noun``: what the sentence calls them)."""

    def compare_shape(ref: list, got: list, by: str = "label") -> dict:
        return {**compare(ref, got, by), **agreement(ref, got, by, similarity, name, measure)}

    def judge_shape(measures: dict, bounds, what: str):
        why = judge(measures, bounds, what)
        f1 = measures.get(f"{name}_f1")
        if why is None and f1 is not None and f1 < bounds.min_box_f1:
            why = (
                f"the candidate's {noun} match the model in use's with F1 {f1:.2f} on "
                f"{measures['frames']} {what}, under {bounds.min_box_f1:.2f}"
            )
        return why

    return compare_shape, judge_shape


def judge(measures: dict, bounds, what: str):
    """Why ``measures`` refuse a candidate under ``bounds.min_box_f1`` (or a label detected at
    under half or over twice the rate), or None."""
    if measures["box_f1"] < bounds.min_box_f1:
        return (
            f"the candidate's boxes match the model in use's with F1 {measures['box_f1']:.2f} "
            f"on {measures['frames']} {what}, under {bounds.min_box_f1:.2f}"
        )
    off = {k: r for k, r in measures.get("rate_ratio", {}).items() if not 0.5 <= r <= 2}
    if off:
        label, r = next(iter(off.items()))
        return f"the candidate detects {label} {r:.2f} times as often as the model in use"
    return None


def observed(result: Result) -> list:
    """What a frame counts for in the rollback watch: each object's (label, score)."""
    return [(str(o.label), float(o.score)) for o in result.objects]


def track_color(track_id) -> tuple:
    """A steady colour per track (green for boxes without one): the overlay's boxes and trails."""
    if track_id is None:
        return (0, 220, 0)
    import cv2
    import numpy as np

    hue = (int(track_id) * 47) % 180
    bgr = cv2.cvtColor(np.uint8([[[hue, 200, 255]]]), cv2.COLOR_HSV2BGR)[0, 0]
    return tuple(int(v) for v in bgr)


def caption(o) -> str:
    """An object's words on the overlay: its track ID, label and score, then what second-stage
    models said of its track (an extra that is ``{"label": ...}``, as the camera's
    ``--secondary`` writes)."""
    tag = f"#{o.track_id} " if o.track_id is not None else ""
    said = [v["label"] for v in o.extras.values() if isinstance(v, dict) and "label" in v]
    return f"{tag}{o.label} {o.score:.2f}" + "".join(f" {x}" for x in said)


def pixels(values, out) -> np.ndarray | None:
    """Coordinates (any shape) -> whole pixels (int32) OpenCV can draw onto ``out``, clipped to
    4 times its size around it; None where one is NaN or infinite: that item is not drawn (a
    broken model's value must not end the camera)."""
    v = np.asarray(values, np.float64)
    if not v.size or not np.isfinite(v).all():
        return None
    side = 4 * max(out.shape[:2])
    return np.round(np.clip(v, -side, side)).astype(np.int32)


def draw(out, result: Result) -> list:
    """Each object's box, then its :func:`caption` on the box's colour, inside the frame and
    clear of the captions placed before (:mod:`..captions`); no corner lines."""
    import cv2

    from ..images.captions import current

    captions = current(out)
    boxes = []
    for o in result.objects:
        box = pixels(o.box, out)
        if box is not None:
            boxes.append((o, box.tolist()))
            cv2.rectangle(out, tuple(box[:2]), tuple(box[2:]), track_color(o.track_id), 2)
    for o, box in boxes:  # after every box: a caption is never drawn over by another's box
        captions.label_box(out, caption(o), box, track_color(o.track_id))
    return []


def describe(result: Result) -> list:
    """``edgert run``'s lines: score, label and box of each object."""
    return [
        f"  {o.score:7.4f}  {o.label:<20} {[round(float(v), 2) for v in o.box]}"
        for o in result.objects
    ]
