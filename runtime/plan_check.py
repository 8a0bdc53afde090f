"""A TensorRT plan checked against FP32: the plan runs the samples the host stored in the bundle
(``calibration/verify.npz``, written by ``edgert build``) and its outputs are compared with the
stored FP32 outputs. Apart from the cache (``plan_cache``), which never runs a model."""

from __future__ import annotations

from pathlib import Path

from .errors import EdgertError

VERIFY_FILE = "calibration/verify.npz"  # written by edgert build on the host


def run_stored_samples(bundle_dir: Path, plan: Path):
    """(FP32 reference outputs, the plan's outputs, sample count) on the samples the host stored
    in the bundle (``calibration/verify.npz``), or None when there are none."""
    import numpy as np

    from .engine import Engine

    stored_path = Path(bundle_dir) / VERIFY_FILE
    if not stored_path.is_file():
        return None
    with np.load(stored_path, allow_pickle=False) as stored:
        inputs = stored["inputs"]
        refs = {k[4:]: stored[k] for k in stored.files if k.startswith("ref_")}
    got: dict[str, list] = {k: [] for k in refs}
    with Engine.load(plan, backend="tensorrt") as engine:
        for x in inputs:
            out = engine.infer(x[None])
            for k in refs:
                got[k].append(out[k])
    return refs, {k: np.concatenate(v) for k, v in got.items()}, len(inputs)


def verify_plan(bundle_dir: Path, plan: Path, min_cosine: float = 0.99) -> str:
    """Run ``plan`` on the FP32 reference samples the host stored in the bundle and compare:
    the plan is deleted and EdgertError raised when an output's cosine is under ``min_cosine``.
    (``edgert build`` on the host applies the whole accuracy gate instead.)"""
    import numpy as np

    ran = run_stored_samples(bundle_dir, plan)
    if ran is None:
        return "no stored samples to verify against"
    refs, got, n = ran
    worst = 1.0
    for k, ref in refs.items():
        a = got[k].reshape(n, -1).astype(np.float64)
        b = ref.reshape(n, -1).astype(np.float64)
        denom = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
        cos = np.where(denom > 0, (a * b).sum(axis=1) / np.maximum(denom, 1e-30), 1.0)
        worst = min(worst, float(cos.min()))
    if worst < min_cosine:
        plan.unlink(missing_ok=True)
        plan.with_suffix(".json").unlink(missing_ok=True)
        raise EdgertError(
            f"the TensorRT plan's outputs differ from FP32: cosine {worst:.5f} < {min_cosine} on "
            f"{n} stored samples (plan deleted)"
        )
    return f"cosine {worst:.5f} vs FP32 on {n} stored samples"
