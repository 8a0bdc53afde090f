"""Choosing the calibration method and, when the gate fails, what to keep in higher precision.

- Method: every candidate (minmax, percentile, entropy) quantizes the model; the one whose outputs
  are closest to FP32 (cosine, then top-1 agreement) on a validation split of the calibration data
  wins. The hold-out is never used for choosing.
- Fallback: each quantizable node's sensitivity is the cosine loss when it alone is quantized
  (validation split); the most sensitive nodes go back to FP32 one at a time until the gate passes
  on the hold-out, or the budget (half the nodes) is spent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import evaluate, gate, int8, ranges

MAX_FALLBACK_FRACTION = 0.5


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
    task: str,
    forced: str | None,
    say: Callable[[str], None],
) -> MethodChoice:
    candidates = [forced] if forced else list(ranges.METHODS)
    scores = {}
    for method in candidates:
        q = int8.quantize(model, stats.thresholds(method), validation)
        ev = gate.evaluate(ref, evaluate.run(q, validation), task)
        scores[method] = {k: round(v, 5) for k, v in ev.metrics.items()}
        say(f"  calibration {method:<10} validation {ev.summary()}")
    if forced:
        return MethodChoice(forced, "asked for with --calib-method", scores)

    def rank(m):
        s = scores[m]
        return (s["cosine"], s.get("agreement", 0.0))

    best = max(scores, key=rank)
    runner_up = sorted(scores, key=rank)[-2] if len(scores) > 1 else None
    why = f"highest validation cosine ({scores[best]['cosine']:.4f}"
    why += f" vs {runner_up} {scores[runner_up]['cosine']:.4f})" if runner_up else ")"
    return MethodChoice(best, why, scores)


@dataclass
class FallbackResult:
    kept_fp32: list[str]
    sensitivity: list[tuple[str, float]]
    steps: list[dict] = field(default_factory=list)


def sensitivity(
    model, thresholds: dict[str, float], nodes: list[str], validation: np.ndarray, ref, say
) -> list[tuple[str, float]]:
    """(node, cosine loss when only that node is quantized), most sensitive first."""
    out = []
    for i, name in enumerate(nodes):
        q = int8.quantize(model, thresholds, validation, only=[name])
        got = evaluate.run(q, validation)
        loss = 1.0 - min(float(gate.cosine_rows(ref[k], got[k]).mean()) for k in ref)
        out.append((name, loss))
        if (i + 1) % 10 == 0 or i + 1 == len(nodes):
            say(f"  sensitivity: {i + 1}/{len(nodes)} nodes measured")
    out.sort(key=lambda t: -t[1])
    return out


def fallback(
    model,
    thresholds: dict[str, float],
    nodes: list[str],
    validation: np.ndarray,
    ref_validation,
    holdout: np.ndarray,
    ref_holdout,
    task: str,
    labels,
    gate_rules: dict[str, float],
    say,
) -> tuple[object, gate.Evaluation, FallbackResult]:
    """Keep the most sensitive nodes in FP32, one at a time, until the gate passes."""
    ranked = sensitivity(model, thresholds, nodes, validation, ref_validation, say)
    result = FallbackResult([], ranked)
    budget = max(1, int(len(nodes) * MAX_FALLBACK_FRACTION))
    q, ev = None, None
    for name, loss in ranked[:budget]:
        result.kept_fp32.append(name)
        q = int8.quantize(model, thresholds, validation, exclude=result.kept_fp32)
        ev = gate.evaluate(ref_holdout, evaluate.run(q, holdout), task, labels)
        result.steps.append(
            {
                "kept": name,
                "sensitivity": round(loss, 6),
                **{k: round(v, 5) for k, v in ev.metrics.items()},
            }
        )
        say(f"  keep {name} in FP32 (sensitivity {loss:.5f}): {ev.summary()}")
        if ev.passes(gate_rules):
            break
    return q, ev, result
