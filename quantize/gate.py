"""The accuracy gate: a quantized model is compared with FP32 on the hold-out before anyone ships it.

Metrics per output: cosine similarity (mean over samples) and max abs error. For classifiers:
top-1 agreement with FP32 on all samples and on the samples FP32 is confident about (p > 0.5),
and how often FP32's top-1 is within the quantized top-5; with labels, accuracy of both. For
detectors: IoU-matched box agreement (F1 of boxes matching FP32's, IoU >= 0.5, same class) and
how many boxes FP32 finds per sample (none: the F1 judged nothing); with the bundle's manifest
the outputs are decoded as its task decodes a frame's, and pose, instance-mask and oriented-box
models are judged on their own shape as well: objects paired at OKS, mask IoU or rotated IoU
>= 0.5 (``keypoint_f1``, ``mask_f1``, ``rbox_f1``, each >= 0.9 by default, the box F1's rule:
COCO's AP50 pairing on the task's shape), with the mean similarity of the pairs the boxes match
(``keypoint_oks``, ``mask_iou``, ``rbox_iou``) reported.

The default gate was chosen from measurements (see docs/quantization.md): cosine >= 0.99,
confident top-1 agreement >= 0.97 and FP32 top-1 within top-5 >= 0.97 for classifiers, accuracy
drop <= 1 point where labels exist, mAP50-95 against FP32's boxes >= 0.85 for detectors (box F1
reported; gated, >= 0.9, only for the face detector, which has no mAP), and with labelled boxes
(``--calib-labels``) mAP50-95 against them at most 1 point below FP32's; for encoders (the embed
task) the neighbours each hold-out sample's vector has among the others, FP32's 10 nearest kept by
the candidate >= 0.8, and the vectors' spread >= 0.01 (not collapsed; FP32's own failing the
health check refuses the build). Top-1 agreement over all samples
is reported but not gated by default: on ambiguous inputs FP32's own top-1 is a coin toss.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from edgert.runtime.compare import cosine_rows  # also gate.cosine_rows for the recipes
from edgert.runtime.results import Result
from edgert.runtime.tasks import TASK_SPECS, detect
from edgert.runtime.tasks.postprocess import looks_like_probabilities, softmax

DEFAULT_GATE = {
    "cosine": 0.99,
    "agreement_confident": 0.97,
    "top5_contains_fp32": 0.97,
    "accuracy_drop": 0.01,
    # detectors: mAP50-95 against FP32's boxes (measured on a real YOLOv8s detector: a sound
    # INT8 0.95, NVIDIA Model Optimizer's 0.88-0.89, the head in INT8 0.76; docs/quantization.md).
    # Box F1 at the model's threshold is reported, not gated: it counts a box whose score crosses
    # 0.25 as lost, and failed an INT8 whose mAP50 against FP32 was 1.0
    "map50_95": 0.85,
    # the tasks of issue 48: the same F1 as the boxes', objects paired on their own shape at 0.5
    # (OKS for keypoints, mask IoU, rotated IoU: COCO's and Ultralytics' AP50 pairing)
    "keypoint_f1": 0.9,
    "mask_f1": 0.9,
    "rbox_f1": 0.9,
    # with labelled boxes (--calib-labels): mAP50-95 against them at most 1 point below FP32's
    "labels_map_drop": 0.01,
    # encoders (the embed task): each hold-out sample's 10 nearest others under FP32 kept by the
    # candidate, and its vectors' spread (the health check's bound: not collapsed); the mean
    # cosine to FP32's vectors is the "cosine" rule above. Measured on MobileNetV2's pooled
    # features (benchmarks/embed_retrieval.py), on the build's hold-out: FP16 keeps 0.998; the
    # gated INT8s, each within 1 point of FP32's same-class recall@10, keep 0.84-0.98 (the zoo
    # photos 0.91); digits' INT8 with every node in INT8, 3.1 points below FP32, keeps 0.75
    "neighbour_recall": 0.8,
    "spread": 0.01,
}
LOWER_IS_BETTER = {"accuracy_drop", "max_abs", "labels_map_drop"}
# a detector whose mAP is not measured (the face detector: a cascade with its own thresholds, no
# score ranking every candidate) is gated on box F1
BOX_F1_DEFAULT = 0.9
# a candidate's detections are ranked for mAP from this score up (FP32's own, the reference,
# are those above the model's 0.25): a box of FP32's whose score INT8 drops 25-fold is a miss;
# lower (COCO's 0.001) only adds low-ranked boxes that cost the decode's NMS time at every choice
MAP_CONF = 0.01
_RULE = re.compile(r"^\s*([a-z_0-9]+)\s*(>=|<=)\s*([-+0-9.eE]+)\s*$")


def with_box_f1(rules: dict[str, float]) -> dict[str, float]:
    """``rules`` with box F1's default for a detector gated without mAP (none when gated off)."""
    return {"box_f1": BOX_F1_DEFAULT, **rules} if rules else {}


def parse_gate(text: str | None) -> dict[str, float]:
    """'cosine>=0.995,agreement>=0.9' -> thresholds merged over the defaults; 'off' -> {}."""
    gate = dict(DEFAULT_GATE)
    if not text:
        return gate
    if text.strip() == "off":
        return {}
    for part in text.split(","):
        m = _RULE.match(part)
        if not m:
            raise ValueError(
                f"gate rule {part.strip()!r} is not of the form metric>=value or metric<=value"
            )
        name, op, value = m.group(1), m.group(2), float(m.group(3))
        if (op == "<=") != (name in LOWER_IS_BETTER):
            raise ValueError(
                f"gate rule {part.strip()!r}: {name} must use {'<=' if name in LOWER_IS_BETTER else '>='}"
            )
        gate[name] = value
    return gate


@dataclass(frozen=True)
class Task:
    """What the gate judges a model's outputs as: the bundle's task and, for detectors, its class
    count (a YOLO head's layout is read with it, never guessed from the output's shape); with
    the bundle's manifest, its outputs are decoded as its task decodes a frame's (every head
    form; keypoints, masks, oriented boxes)."""

    name: str
    num_classes: int | None = None
    manifest: object = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, manifest) -> Task:
        labels = getattr(manifest, "labels", None)
        return cls(manifest.task, len(labels) if labels else None, manifest)


@dataclass
class Evaluation:
    metrics: dict[str, float]
    per_output: dict[str, dict[str, float]] = field(default_factory=dict)

    def unmeasured(self, gate: dict[str, float]) -> list[str]:
        """The gate's rules on the labels (``labels_*``) that nothing measured: labels were
        given (``labelled_boxes`` is reported) but they hold no box on the hold-out, so their
        mAPs are absent (never the 1.0 of "nothing judged"). Each is a failure: a rule that
        cannot be checked does not pass."""
        if "labelled_boxes" not in self.metrics or "labels_map50_95" in self.metrics:
            return []
        n = int(self.metrics.get("labelled_samples", 0))
        return [
            f"{name} is not measured: the labels hold no box on the {n} hold-out samples they label"
            for name in gate
            if name.startswith("labels_")
        ]

    def failures(self, gate: dict[str, float]) -> list[str]:
        out = self.unmeasured(gate)
        for name, limit in gate.items():
            if name not in self.metrics:
                continue
            value = self.metrics[name]
            bad = value > limit if name in LOWER_IS_BETTER else value < limit
            if bad:
                out.append(
                    f"{name} {value:.4f} {'>' if name in LOWER_IS_BETTER else '<'} {limit:g}"
                )
        return out

    def passes(self, gate: dict[str, float]) -> bool:
        return not self.failures(gate)

    def summary(self) -> str:
        return ", ".join(f"{k} {v:.4f}" for k, v in self.metrics.items())


def evaluate(
    ref: dict[str, np.ndarray],
    got: dict[str, np.ndarray],
    task: Task | str,
    labels: np.ndarray | list | None = None,
    num_classes: int | None = None,
) -> Evaluation:
    """Compare quantized outputs ``got`` with FP32 ``ref`` (dicts name -> [N, ...]). ``task``: a
    :class:`Task`, or its name with ``num_classes`` beside it. ``labels``: a classifier's class
    per sample, or a detector's labelled boxes per sample (model-input pixels, class ids; None
    for a sample without labels)."""
    manifest = None
    if isinstance(task, Task):
        task, num_classes, manifest = task.name, task.num_classes, task.manifest
    per_output = {}
    cosines = []
    for name, r in ref.items():
        g = got[name]
        c = cosine_rows(r, g)
        cosines.append(c.mean())
        per_output[name] = {"cosine": float(c.mean()), "max_abs": float(np.abs(r - g).max())}
    metrics = {
        "cosine": float(min(cosines)),
        "max_abs": float(max(v["max_abs"] for v in per_output.values())),
    }
    first = next(iter(ref))
    spec = TASK_SPECS.get(task)
    boxes = labels if isinstance(labels, list) else None
    if spec is not None and spec.class_scores:
        metrics.update(_classification(ref[first], got[first], labels))
    elif spec is not None and spec.decodes_boxes and manifest is not None:
        metrics.update(task_agreement(list(ref.values()), list(got.values()), manifest, boxes))
    elif spec is not None and spec.decodes_boxes:  # one engine's boxes
        metrics.update(_box_agreement(list(ref.values()), list(got.values()), num_classes, boxes))
    elif spec is not None and spec.measure is not None:  # an encoder's neighbours
        metrics.update(spec.measure(ref[first], got[first]))
    return Evaluation(metrics, per_output)


def _classification(
    ref: np.ndarray, got: np.ndarray, labels: np.ndarray | None
) -> dict[str, float]:
    ref = ref.reshape(len(ref), -1)
    got = got.reshape(len(got), -1)
    probs = ref if looks_like_probabilities(ref) else softmax(ref)
    r1, g1 = ref.argmax(axis=1), got.argmax(axis=1)
    confident = probs.max(axis=1) > 0.5
    top5 = np.argsort(-got, axis=1)[:, :5]
    out = {
        "agreement": float((r1 == g1).mean()),
        "agreement_confident": float((r1 == g1)[confident].mean()) if confident.any() else 1.0,
        "confident_fraction": float(confident.mean()),
        "top5_contains_fp32": float((top5 == r1[:, None]).any(axis=1).mean()),
    }
    if labels is not None:
        out["accuracy_fp32"] = float((r1 == labels).mean())
        out["accuracy"] = float((g1 == labels).mean())
        out["accuracy_drop"] = out["accuracy_fp32"] - out["accuracy"]
    return out


def box_agreement(ref: list[list], got: list[list]) -> dict[str, float]:
    """``box_f1`` of the detections ``got`` against ``ref`` (per sample; the detect task's own
    ``compare``, which the camera's swap check uses too, matching by class id here), and
    ``boxes_fp32``: ``ref``'s boxes per sample (0: the F1 of 1.0 judged nothing)."""
    if len(ref) != len(got):
        raise ValueError(f"{len(ref)} reference samples against {len(got)} compared ones")
    m = detect.compare(
        [Result.of_objects(r) for r in ref], [Result.of_objects(g) for g in got], by="class_id"
    )
    return {"box_f1": m["box_f1"], "boxes_fp32": m["boxes_per_frame"]}


def task_agreement(ref_outs: list, got_outs: list, manifest, truth=None) -> dict[str, float]:
    """A detector-family model's outputs decoded as its task decodes a frame's (the manifest's
    head, labels, input size), compared by its task's own ``compare`` (the camera's swap check
    uses it too), matching by class id: ``box_f1``, ``boxes_fp32``, and the task's own
    agreement (``keypoint_f1`` and ``keypoint_oks`` for pose, ``mask_f1`` and ``mask_iou``
    for instance masks, ``rbox_f1`` and ``rbox_iou`` for oriented boxes); with ``truth``
    (labelled boxes per sample), :func:`labels_map` too."""
    from edgert.runtime.tasks import decode_outputs, task_spec

    ref = decode_outputs(manifest, ref_outs)
    m = task_spec(manifest.task).compare(ref, decode_outputs(manifest, got_outs), by="class_id")
    ranked = decode_outputs(manifest, got_outs, conf=MAP_CONF)
    skip = ("frames", "box_f1", "boxes_per_frame", "rate_ratio")
    out = {
        "box_f1": m["box_f1"],
        "boxes_fp32": m["boxes_per_frame"],
        **box_map([r.objects for r in ref], [g.objects for g in ranked]),
        **{k: float(v) for k, v in m.items() if k not in skip},
    }
    if truth is not None:
        ref_ranked = decode_outputs(manifest, ref_outs, conf=MAP_CONF)
        out.update(labels_map([r.objects for r in ref_ranked], [g.objects for g in ranked], truth))
    return out


def box_map(ref: list[list], got: list[list]) -> dict[str, float]:
    """``map50`` and ``map50_95`` of the detections ``got`` (decoded at :data:`MAP_CONF`)
    against ``ref``'s boxes as ground truth, per class id (:mod:`.box_map`: COCO's evaluation)."""
    from .box_map import mean_average_precision

    m = mean_average_precision(
        [(_boxes(r), [d.class_id for d in r]) for r in ref],
        [(_boxes(g), [d.score for d in g], [d.class_id for d in g]) for g in got],
    )
    return {"map50": m["map50"], "map50_95": m["map50_95"]}


def _boxes(objs) -> np.ndarray:
    return np.array([d.box for d in objs], np.float64).reshape(-1, 4)


def labels_map(fp32: list[list], got: list[list], truth: list) -> dict[str, float]:
    """mAP50 and mAP50-95 of FP32's detections and of the candidate's (both decoded at
    :data:`MAP_CONF`) against labelled boxes (``truth``: per sample, boxes, class ids and the
    image's region of the input that detections are clipped to, or None: the samples without
    labels are left out); ``labels_map_drop``: FP32's mAP50-95 less the candidate's;
    ``labelled_samples`` and ``labelled_boxes``. Where the labelled samples hold no box, the
    mAPs are left out (not 1.0: against no box every detection is false, and nothing is
    judged): :meth:`Evaluation.unmeasured` fails a gate rule on them."""
    from .box_map import mean_average_precision

    keep = [i for i, t in enumerate(truth) if t is not None]
    gt = [(np.asarray(truth[i][0], np.float64).reshape(-1, 4), list(truth[i][1])) for i in keep]

    def clipped(i, objs):  # to the image's region of the input, as the app clips detections
        x1, y1, x2, y2 = truth[i][2]
        return _boxes(objs).clip([x1, y1, x1, y1], [x2, y2, x2, y2])

    def score(dets):
        return mean_average_precision(
            gt,
            [
                (clipped(i, dets[i]), [d.score for d in dets[i]], [d.class_id for d in dets[i]])
                for i in keep
            ],
        )

    counted = {
        "labelled_samples": float(len(keep)),
        "labelled_boxes": float(sum(len(b) for b, _ in gt)),
    }
    if not counted["labelled_boxes"]:
        return counted
    f, q = score(fp32), score(got)
    return {
        "labels_map50_fp32": f["map50"],
        "labels_map50_95_fp32": f["map50_95"],
        "labels_map50": q["map50"],
        "labels_map50_95": q["map50_95"],
        "labels_map_drop": f["map50_95"] - q["map50_95"],
        **counted,
    }


def _box_agreement(
    ref_outs: list[np.ndarray], got_outs: list[np.ndarray], num_classes: int | None, truth=None
) -> dict[str, float]:
    """:func:`box_agreement` and :func:`box_map` of a detector's outputs, decoded as the app
    decodes them (and :func:`labels_map` with ``truth``)."""
    from edgert.runtime.tasks.detection import decode_detections

    ref = decode_detections(ref_outs, num_classes=num_classes)
    ranked = decode_detections(got_outs, MAP_CONF, num_classes=num_classes)
    out = {
        **box_agreement(ref, decode_detections(got_outs, num_classes=num_classes)),
        **box_map(ref, ranked),
    }
    if truth is not None:
        fp32 = decode_detections(ref_outs, MAP_CONF, num_classes=num_classes)
        out.update(labels_map(fp32, ranked, truth))
    return out
