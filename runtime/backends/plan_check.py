"""A TensorRT plan checked against FP32, in one place: the plan runs the samples the host stored
in the bundle (``calibration/verify.npz``, written by ``edgert build``), its outputs are judged
against the stored FP32 outputs, and a plan that fails is deleted (with its sidecar) and said in
one sentence. ``edgert build`` judges with its accuracy gate's metrics; on the device (and by
default) the judge is each output's cosine. Apart from the cache (``plan_cache``), which never
runs a model."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Tuple

from ..errors import GateFailed

VERIFY_FILE = "calibration/verify.npz"  # written by edgert build on the host
MIN_COSINE = 0.99


@dataclass
class PlanCheck:
    """What the check found: ``summary`` for a log line, ``metrics`` for a report."""

    samples: int
    summary: str
    metrics: dict = field(default_factory=dict)


# judge(FP32 outputs, the plan's outputs) -> (failures, summary, metrics); typing's generics: the
# alias is evaluated on import, and JetPack 5's Python 3.8 cannot subscript the builtins
Judge = Callable[[dict, dict], Tuple[List[str], str, dict]]


def run_stored_samples(bundle_dir: Path, plan: Path):
    """(FP32 reference outputs, the plan's outputs, sample count) on the samples the host stored
    in the bundle (``calibration/verify.npz``), or None when there are none."""
    import numpy as np

    # the backend itself, not an Engine: Engine.load's first-use build checks its plan here
    from .tensorrt import TensorRTBackend

    stored_path = Path(bundle_dir) / VERIFY_FILE
    if not stored_path.is_file():
        return None
    with np.load(stored_path, allow_pickle=False) as stored:
        inputs = stored["inputs"]
        refs = {k[4:]: stored[k] for k in stored.files if k.startswith("ref_")}
    got: dict[str, list] = {k: [] for k in refs}
    backend = TensorRTBackend.load(plan)
    try:
        name = backend.inputs[0].name
        for x in inputs:
            out = backend.run({name: np.ascontiguousarray(x[None])})
            for k in refs:
                got[k].append(out[k])
    finally:
        backend.close()
    return refs, {k: np.concatenate(v) for k, v in got.items()}, len(inputs)


def cosine_judge(min_cosine: float = MIN_COSINE) -> Judge:
    """The device's judge: every output's per-sample cosine against FP32 at least ``min_cosine``."""
    from ..compare import cosine_rows

    def judge(refs: dict, got: dict) -> tuple[list[str], str, dict]:
        worst = min((float(cosine_rows(got[k], ref).min()) for k, ref in refs.items()), default=1.0)
        failures = [f"cosine {worst:.5f} < {min_cosine}"] if worst < min_cosine else []
        return failures, f"cosine {worst:.5f}", {"cosine": worst}

    return judge


def verify_plan(bundle_dir: Path, plan: Path, judge: Judge | None = None) -> PlanCheck | None:
    """Run ``plan`` on the FP32 reference samples the host stored in the bundle and judge it
    (default: :func:`cosine_judge`); None when the bundle stores no samples. A plan that fails
    is deleted with its sidecar and GateFailed raised."""
    ran = run_stored_samples(bundle_dir, plan)
    if ran is None:
        return None
    refs, got, n = ran
    failures, summary, metrics = (judge or cosine_judge())(refs, got)
    if failures:
        plan.unlink(missing_ok=True)
        plan.with_suffix(".json").unlink(missing_ok=True)
        raise GateFailed(
            f"the TensorRT plan's outputs differ from FP32: {'; '.join(failures)} on {n} stored "
            "samples (plan deleted)"
        )
    return PlanCheck(n, f"{summary} vs FP32 on {n} stored samples", metrics)


def build_checked_plan(
    bundle_dir: Path, precision: str, device: int = 0, options=None, check_cached: bool = False
) -> tuple[Path, bool, PlanCheck | None]:
    """The one policy for a plan made on this device, for ``edgert build`` and an Engine's
    first use alike: the plan from the bundle's cache or built now (:func:`ensure_plan`), then a
    plan just built (and a cached one with ``check_cached``) checked against the stored FP32
    samples. (plan, built, check or None without samples); GateFailed, the plan deleted, when it
    fails."""
    from .plan_cache import ensure_plan

    plan, built, _ = ensure_plan(Path(bundle_dir), precision, device, options)
    check = verify_plan(Path(bundle_dir), plan) if built or check_cached else None
    return plan, built, check
