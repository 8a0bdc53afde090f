"""Choosing how to prepare the model and calibrate it, and, when the gate fails, what to keep in
higher precision.

- Preparation: each candidate (``none``, ``equalize``, ``bias``, ``equalize+bias``; see
  :mod:`equalize`) makes an FP32 model INT8 then quantizes; the one closest to FP32 on the
  validation split (with its best calibration method) wins: techniques are kept only where they
  measure better.
- Method: every candidate (minmax, percentile, entropy) quantizes the model; the one closest to
  FP32 (cosine, then top-1 agreement) on the validation split wins (the hold-out never chooses).
- Head: a detector's head (:mod:`head`: its output convolutions and DFL) stays out of INT8 by
  rule, unless the same preparation with the head in INT8 measures better on the validation split.
- Fallback: each quantizable node's sensitivity is the loss of the task's measure when it alone is
  quantized (validation split; mAP50-95 against FP32's boxes for a detector where FP32 finds boxes,
  else the cosine; ties broken by the cosine); the most sensitive nodes leave INT8 one at a time
  (FP16 on TensorRT, FP32 on ONNX Runtime) until the gate passes on the hold-out, or the budget
  (half the nodes) is spent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from . import equalize, evaluate, gate, int8, progress, ranges, shift
from .head import Head

MAX_FALLBACK_FRACTION = 0.5
PREPARATIONS = ("none", "equalize", "bias", "equalize+bias")  # what "auto" tries
# adaptive rounding: asked for by name only (minutes on 2 cores; see docs/quantization.md)
SLOW_PREPARATIONS = ("adaround", "equalize+adaround", "equalize+bias+adaround")
# shifting non-negative activations (:mod:`shift`): asked for by name only until its cost on
# TensorRT (a Sub before shifted inputs, an Add after padded convolutions) is measured on a device
SHIFT_PREPARATIONS = ("shift+bias", "equalize+shift+bias")
ALL_PREPARATIONS = PREPARATIONS + SLOW_PREPARATIONS + SHIFT_PREPARATIONS


def keeping(quantize: Callable, keep) -> Callable:
    """``quantize`` with the nodes ``keep`` always left out (a detector's head, by rule)."""
    if not keep:
        return quantize
    kept = list(keep)

    def quantize_keeping(model, thresholds, sample, exclude=(), only=None):
        return quantize(model, thresholds, sample, exclude=[*kept, *exclude], only=only)

    return quantize_keeping


def split_validation(cal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(calibration samples to fit ranges on, the validation split that chooses the method and
    the preparation and ranks nodes): a fifth of them, 4 to 64."""
    n_val = max(4, min(64, len(cal) // 5))
    return cal[n_val:], cal[:n_val]


@dataclass
class MethodChoice:
    method: str
    why: str
    scores: dict[str, dict[str, float]]


def choose_method(
    model,
    stats: ranges.ActivationStats,
    validation: np.ndarray,
    ref: dict[str, np.ndarray],
    task: gate.Task | str,
    forced: str | None,
    say: Callable[[str], None],
    quantize: Callable = int8.quantize,
    truth: list | None = None,
) -> MethodChoice:
    candidates = [forced] if forced else list(ranges.METHODS)
    scores = {}
    for method in progress.each(candidates, "calibration methods", len(candidates)):
        q = quantize(model, stats.thresholds(method), validation)
        got = evaluate.run(q, validation, what=f"{method} on the validation split")
        ev = gate.evaluate(ref, got, task, truth)
        scores[method] = _scores(ev)
        say(f"  calibration {method:<10} validation {ev.summary()}")
    if forced:
        return MethodChoice(forced, "asked for with --calib-method", scores)

    best = max(scores, key=lambda m: _rank(scores[m]))
    runner_up = sorted(scores, key=lambda m: _rank(scores[m]))[-2] if len(scores) > 1 else None
    key, what = _measure(scores[best])
    why = f"highest validation {what} ({scores[best][key]:.4f}"
    why += f" vs {runner_up} {scores[runner_up][key]:.4f})" if runner_up else ")"
    return MethodChoice(best, why, scores)


MIN_LABELLED = 8  # labelled validation samples for the labels to take part in the choices


def _scores(ev: gate.Evaluation) -> dict[str, float]:
    """A candidate's validation metrics, rounded; with labelled boxes on at least
    :data:`MIN_LABELLED` validation samples, ``map50_95_both``: the mean of its mAP50-95 against
    the labels and against FP32's boxes (what the choices then go by)."""
    s = {k: round(v, 5) for k, v in ev.metrics.items()}
    if "map50_95" in s and "labels_map50_95" in s and s.get("labelled_samples", 0) >= MIN_LABELLED:
        s["map50_95_both"] = round((s["map50_95"] + s["labels_map50_95"]) / 2, 5)
    return s


def _measure(scores: dict) -> tuple[str, str]:
    """The measure a choice is made by: a detector's mAP50-95 against FP32's boxes where FP32
    found boxes (the task's own measure: the cosine of raw outputs can prefer a candidate whose
    boxes moved), averaged with its mAP50-95 against the labels where the validation split is
    labelled (``--calib-labels``: a candidate closer to FP32 can still be one that finds the
    labelled objects worse, and FP32's own boxes steady the few labelled samples); else the
    outputs' cosine."""
    if scores.get("boxes_fp32", 0) > 0 and "map50_95_both" in scores:
        return "map50_95_both", "mAP50-95 (mean of against the labels and FP32's boxes)"
    if scores.get("boxes_fp32", 0) > 0 and "map50_95" in scores:
        return "map50_95", "mAP50-95 against FP32's boxes"
    return "cosine", "cosine"


def _rank(scores: dict) -> tuple[float, float]:
    key, _ = _measure(scores)
    if key == "cosine":
        return (scores["cosine"], scores.get("agreement", 0.0))
    return (scores[key], scores["cosine"])


@dataclass
class Preparation:
    """A prepared FP32 model, its activation statistics and calibration choice, and how close to
    FP32 its INT8 model came on the validation split."""

    name: str
    model: object
    stats: ranges.ActivationStats
    choice: MethodChoice
    scores: dict[str, float]
    base: object  # the model before bias correction (sensitivity and fallback rebuild from it)
    report: dict = field(default_factory=dict)
    round_weights: Callable | None = None  # how the format rounds weights (bias correction)
    keep: tuple[str, ...] = ()  # nodes out of INT8 by rule (a detector's head): never corrected

    def rebuild(self, fit: np.ndarray, kept: list[str]):
        """This preparation with ``kept`` nodes (and :attr:`keep`) left unquantized: no bias
        correction for them, and their original weights instead of adaptively rounded ones."""
        if not kept or self.name in ("none", "equalize"):
            return self.model
        import onnx

        if "bias" in self.name:
            skip = {*kept, *self.keep}
            out = equalize.correct_bias(self.base, fit, skip, self.round_weights)[0]
        else:
            out = onnx.ModelProto()
            out.CopyFrom(self.base)
        if "adaround" in self.name:  # the learned weights of the nodes still quantized
            learned = {i.name: i for i in self.model.graph.initializer}
            weights = {n.input[1] for n in ranges.quantizable_nodes(out) if n.name not in set(kept)}
            for init in out.graph.initializer:
                if init.name in weights and init.name in learned:
                    init.CopyFrom(learned[init.name])
        return out


@dataclass
class PreparationSearch:
    """The preparation kept, every candidate's scores and seconds, and each candidate's activation
    statistics (``"none"``: the unprepared model's, which the DLA path calibrates with)."""

    best: Preparation
    table: dict[str, dict]
    stats: dict[str, ranges.ActivationStats]


def choose_preparation(
    model,
    fit: np.ndarray,
    validation: np.ndarray,
    ref: dict[str, np.ndarray],
    task: gate.Task | str,
    forced_method: str | None,
    candidates: tuple[str, ...],
    say: Callable[[str], None],
    quantize: Callable = int8.quantize,
    round_weights: Callable | None = None,
    keep: tuple[str, ...] = (),
    truth: list | None = None,
    also: tuple[str, ...] = (),
) -> PreparationSearch:
    """The candidate preparation whose quantized model (``quantize``: INT8 or FP8) is closest to
    FP32 on ``validation``, and every candidate's scores and seconds. ``keep``: nodes left out
    of it by rule (neither quantized nor bias-corrected). ``also``: more tensors of the
    unprepared model whose statistics the ``none`` candidate's pass collects as well (the DLA
    path's: every float tensor), in ``stats["none"]``; one pass, not two."""
    quantize = keeping(quantize, keep)
    known = ALL_PREPARATIONS
    unknown = [c for c in candidates if c not in known]
    if unknown:
        raise ValueError(f"unknown preparation {unknown[0]!r}; choose from {', '.join(known)}")
    equalized = None
    table: dict[str, dict] = {}
    all_stats: dict[str, ranges.ActivationStats] = {}
    best: Preparation | None = None
    for name in progress.each(candidates, "preparations", len(candidates)):
        t0 = time.perf_counter()
        report: dict = {}
        base = model
        if "equalize" in name:
            if equalized is None:
                equalized = equalize.equalize(model, fit)
            twin = name.replace("equalize+", "") if "+" in name else "none"
            if not equalized[1].get("pairs") and twin in table:  # the model is twin's: no rerun
                table[name] = {**table[twin], "same_as": twin, "seconds": 0.0}
                say(f"  preparation {name:<14} nothing to equalize: the same model as {twin}")
                continue
            base, report["equalize"] = equalized
        pins: dict[str, float] = {}
        if "shift" in name:  # around the thresholds the percentile method (or the forced one) gives
            before = ranges.collect(
                base, fit, ranges.activation_inputs(base, ranges.quantizable_nodes(base))
            )
            base, report["shift"], pins = shift.shift_activations(
                base, before.thresholds(forced_method or "percentile"), fit[:1]
            )
        prepared = base
        if "bias" in name:
            prepared, report["bias"] = equalize.correct_bias(
                base, fit, set(keep), quantize_weight=round_weights
            )
        nodes = ranges.quantizable_nodes(prepared)
        tensors = ranges.activation_inputs(prepared, nodes)
        more = [t for t in also if t not in set(tensors)] if name == "none" else []
        stats = ranges.collect(
            prepared, fit, tensors + more, say=lambda line, n=name: say(f"  {n}: {line}")
        )
        all_stats[name] = stats
        stats = shift.pinned(stats.subset(tensors) if more else stats, pins)
        if "adaround" in name:  # learned with the inputs quantized as the percentile method would
            from . import adaround

            prepared, report["adaround"] = adaround.adaround(
                prepared, fit, stats.thresholds(forced_method or "percentile"), say=say
            )
        choice = choose_method(
            prepared, stats, validation, ref, task, forced_method, lambda line: say(f"  {line}"),
            quantize, truth,
        )  # fmt: skip
        scores = choice.scores[choice.method]
        table[name] = {
            "method": choice.method,
            **scores,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        say(
            f"  preparation {name:<14} best method {choice.method:<10} validation cosine "
            f"{scores['cosine']:.4f}"
            + (f", agreement {scores['agreement']:.3f}" if "agreement" in scores else "")
            + (f", mAP50-95 {scores['map50_95']:.3f}" if "map50_95" in scores else "")
            + (f" (labels {scores['labels_map50_95']:.3f})" if "map50_95_both" in scores else "")
        )
        if best is None or _rank(scores) > _rank(best.scores):
            best = Preparation(
                name, prepared, stats, choice, scores, base, report, round_weights, tuple(keep)
            )
    return PreparationSearch(best, table, all_stats)


@dataclass
class HeadChoice:
    """Whether a detector's head stayed out of INT8, why, and both measurements."""

    head: Head
    kept_out: bool
    why: str
    scores: dict[str, dict[str, float]]

    def record(self) -> dict:
        return {
            "nodes": self.head.nodes,
            "found": self.head.describe(),
            "kept_out": self.kept_out,
            "why": self.why,
            "validation": self.scores,
        }


def choose_head(
    prep: Preparation,
    head: Head,
    fit: np.ndarray,
    validation: np.ndarray,
    ref: dict[str, np.ndarray],
    task: gate.Task | str,
    quantize: Callable = int8.quantize,
    truth: list | None = None,
) -> tuple[Preparation, HeadChoice]:
    """``prep`` (made with ``head`` out of it) against the same preparation and calibration with
    the head quantized, on the validation split by the task's measure: the head goes into INT8
    only where it measures better there."""
    model = prep.model
    if "bias" in prep.name and "adaround" not in prep.name:  # correct the head's rounding too
        model = equalize.correct_bias(prep.base, fit, quantize_weight=prep.round_weights)[0]
    q = quantize(model, prep.stats.thresholds(prep.choice.method), validation)
    got = evaluate.run(q, validation, what="the head in INT8 on the validation split")
    ev = gate.evaluate(ref, got, task, truth)
    inside = _scores(ev)
    scores = {"out_of_int8": prep.scores, "int8": inside}
    key, what = _measure(prep.scores)
    compared = f"validation {what} {prep.scores[key]:.4f} out of INT8, {inside[key]:.4f} in INT8"
    if _rank(inside) > _rank(prep.scores):
        chosen = replace(prep, model=model, scores=inside, keep=())
        return chosen, HeadChoice(head, False, f"measured better in INT8 ({compared})", scores)
    return prep, HeadChoice(head, True, f"by rule ({compared})", scores)


@dataclass
class FallbackResult:
    kept_fp32: list[str]  # out of INT8: FP16 on TensorRT, FP32 on ONNX Runtime
    sensitivity: list[tuple[str, float]]
    steps: list[dict] = field(default_factory=list)
    measure: str = "cosine"


def sensitivity(
    model,
    thresholds: dict[str, float],
    nodes: list[str],
    validation: np.ndarray,
    ref,
    say,
    quantize: Callable = int8.quantize,
    task: gate.Task | str | None = None,
    truth: list | None = None,
) -> tuple[list[tuple[str, float]], str]:
    """((node, loss of the task's measure when only that node is quantized), most sensitive
    first; the measure). The measure is :func:`_measure`'s for ``task`` on each candidate
    (mAP50-95 against FP32's boxes for a detector where FP32 finds boxes), ties broken by the
    cosine; without ``task``, the cosine."""
    out, measures = [], set()
    for i, name in enumerate(progress.each(nodes, "sensitivity", len(nodes), "nodes")):
        q = quantize(model, thresholds, validation, only=[name])
        got = evaluate.run(q, validation)
        if task is None:
            scores = {"cosine": min(float(gate.cosine_rows(ref[k], got[k]).mean()) for k in ref)}
        else:
            scores = _scores(gate.evaluate(ref, got, task, truth))
        key, what = _measure(scores)
        measures.add(what)
        out.append((name, 1.0 - scores[key], 1.0 - scores["cosine"]))
        if (i + 1) % 10 == 0 or i + 1 == len(nodes):
            say(f"  sensitivity: {i + 1}/{len(nodes)} nodes measured")
    out.sort(key=lambda t: (-t[1], -t[2]))
    return [(name, loss) for name, loss, _ in out], " / ".join(sorted(measures)) or "cosine"


def fallback(
    model,
    thresholds: dict[str, float],
    nodes: list[str],
    validation: np.ndarray,
    ref_validation,
    holdout: np.ndarray,
    ref_holdout,
    task: gate.Task | str,
    labels,
    gate_rules: dict[str, float],
    say,
    rebuild: Callable[[list[str]], object] | None = None,
    quantize: Callable = int8.quantize,
    validation_truth: list | None = None,
) -> tuple[object, gate.Evaluation, FallbackResult]:
    """Keep the most sensitive nodes out of INT8, one at a time, until the gate passes. ``model``
    is ranked; ``rebuild(kept)`` gives the model to quantize with ``kept`` left out (a
    bias-corrected model corrects only what is quantized), default ``model``."""
    ranked, measure = sensitivity(
        model, thresholds, nodes, validation, ref_validation, say, quantize, task, validation_truth
    )
    result = FallbackResult([], ranked, measure=measure)
    budget = max(1, int(len(nodes) * MAX_FALLBACK_FRACTION))
    q, ev = None, None
    steps = progress.each(ranked[:budget], "fallback", budget, "nodes", name=lambda t: t[0])
    for name, loss in steps:
        result.kept_fp32.append(name)
        source = rebuild(result.kept_fp32) if rebuild else model
        q = quantize(source, thresholds, validation, exclude=result.kept_fp32)
        got = evaluate.run(q, holdout, what=f"the gate with {name} kept out, on the hold-out")
        ev = gate.evaluate(ref_holdout, got, task, labels)
        result.steps.append(
            {
                "kept": name,
                "sensitivity": round(loss, 6),
                **{k: round(v, 5) for k, v in ev.metrics.items()},
            }
        )
        say(f"  keep {name} out of it ({measure} loss {loss:.5f}): {ev.summary()}")
        if ev.passes(gate_rules):
            break
    return q, ev, result
