"""Parity: the same inputs through PyTorch and ONNX Runtime, compared output by output."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from edgert.runtime.errors import ExportError


@dataclass(frozen=True)
class OutputParity:
    """Errors of one output. ``max_rel`` is taken over elements with |reference| > atol (elsewhere
    relative error is meaningless); ``passed`` means |onnx - torch| <= atol + rtol * |torch| everywhere."""

    name: str
    max_abs: float
    max_rel: float
    cosine: float
    passed: bool


@dataclass(frozen=True)
class ParityCase:
    label: str
    batch: int
    outputs: tuple[OutputParity, ...]

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)


@dataclass(frozen=True)
class ParityReport:
    atol: float
    rtol: float
    cases: tuple[ParityCase, ...]
    skipped: str | None = None
    title: str | None = None  # what was compared, where it is not PyTorch against ONNX Runtime

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    @property
    def max_abs(self) -> float:
        return max((o.max_abs for c in self.cases for o in c.outputs), default=0.0)

    @property
    def min_cosine(self) -> float:
        return min((o.cosine for c in self.cases for o in c.outputs), default=1.0)

    @property
    def worst_failure(self) -> OutputParity | None:
        """The failing output of the largest max abs error; None when every case passed."""
        failed = [o for c in self.cases for o in c.outputs if not o.passed]
        return max(failed, key=lambda o: o.max_abs, default=None)

    def to_dict(self) -> dict:
        return {
            "atol": self.atol,
            "rtol": self.rtol,
            "passed": self.passed,
            "max_abs": self.max_abs,
            "min_cosine": self.min_cosine,
            "skipped": self.skipped,
            "title": self.title,
            "cases": [
                {"label": c.label, "batch": c.batch, "outputs": [asdict(o) for o in c.outputs]}
                for c in self.cases
            ],
        }

    def lines(self) -> list[str]:
        if self.skipped:
            return [f"parity: skipped ({self.skipped})"]
        out = [
            f"{self.title}:"
            if self.title
            else f"parity vs PyTorch (atol {self.atol:g}, rtol {self.rtol:g}):"
        ]
        for c in self.cases:
            for o in c.outputs:
                mark = "ok" if o.passed else "FAIL"
                out.append(
                    f"  {c.label:<24} {o.name:<12} max_abs {o.max_abs:.3e}  max_rel {o.max_rel:.3e}"
                    f"  cosine {o.cosine:.8f}  {mark}"
                )
        return out


def compare(name: str, ref: np.ndarray, got: np.ndarray, atol: float, rtol: float) -> OutputParity:
    ref = np.asarray(ref, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if ref.shape != got.shape:
        return OutputParity(name, float("inf"), float("inf"), 0.0, False)
    finite = bool(np.isfinite(got).all() and np.isfinite(ref).all())
    diff = np.abs(got - ref)
    max_abs = float(diff.max()) if diff.size else 0.0
    big = np.abs(ref) > atol
    max_rel = float((diff[big] / np.abs(ref[big])).max()) if big.any() else 0.0
    denom = np.linalg.norm(ref) * np.linalg.norm(got)
    if denom > 0:
        cosine = float(np.dot(ref.ravel(), got.ravel()) / denom)
    else:
        cosine = 1.0 if max_abs == 0 else 0.0
    passed = finite and bool(np.all(diff <= atol + rtol * np.abs(ref)))
    return OutputParity(name, max_abs, max_rel, cosine, passed)


def run_cases(
    reference: Callable[[list[np.ndarray]], list[np.ndarray]],
    candidate: Callable[[list[np.ndarray]], list[np.ndarray]],
    output_names: Sequence[str],
    cases: Sequence[tuple[str, list[np.ndarray]]],
    atol: float,
    rtol: float,
) -> ParityReport:
    """Feed each case's inputs to both functions and compare every output."""
    results = []
    for label, feeds in cases:
        ref = reference(feeds)
        for n, r in zip(output_names, ref, strict=True):
            if not np.isfinite(np.asarray(r, dtype=np.float64)).all():
                raise ExportError(
                    f"the model's own output {n!r} is not finite (NaN or inf) on the {label} input, "
                    "before any ONNX: fix the model (the export cannot be checked against it)"
                )
        got = candidate(feeds)
        outputs = tuple(
            compare(n, r, g, atol, rtol) for n, r, g in zip(output_names, ref, got, strict=True)
        )
        results.append(ParityCase(label, int(feeds[0].shape[0]), outputs))
    return ParityReport(atol, rtol, tuple(results))


def random_inputs(shapes: Sequence[tuple[int, ...]], batch: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((batch, *s[1:])).astype(np.float32) for s in shapes]


def uniform_inputs(shapes: Sequence[tuple[int, ...]], batch: int, seed: int) -> list[np.ndarray]:
    """Inputs in [0, 1): what an image scaled by 1/255 looks like, all positive."""
    rng = np.random.default_rng(seed)
    return [rng.random((batch, *s[1:]), dtype=np.float32) for s in shapes]
