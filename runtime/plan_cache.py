"""The plan cache: ``engines/<key>.engine`` plus a ``<key>.json`` sidecar in the bundle, both
from one record (:class:`PlanKey`, in ``backends/plan_key.py`` with the plan selection).

The key hashes everything a plan depends on — ONNX bytes, precision, calibration, TensorRT
version, GPU name and compute capability, DLA core, shapes and builder options — so a plan is
never loaded where it was not built for: another GPU or TensorRT version simply has another key.
Writes are atomic and a per-key lock makes two processes building the same key do the work once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from . import atomic
from .backends.plan_key import PlanKey
from .bundle import MODEL
from .errors import BundleError, EdgertError
from .locks import file_lock

log = logging.getLogger(__name__)


class PlanCache:
    def __init__(self, engines_dir: str | Path) -> None:
        self.dir = Path(engines_dir)

    def path(self, key: PlanKey) -> Path:
        return self.dir / key.filename

    def get(self, key: PlanKey) -> Path | None:
        plan = self.path(key)
        return plan if plan.is_file() and plan.with_suffix(".json").is_file() else None

    def get_or_build(
        self, key: PlanKey, build: Callable[[], bytes], extra: dict | None = None
    ) -> tuple[Path, bool]:
        """(plan path, built_now). Two processes asking for one key: one builds, the other waits
        and reuses the file; neither sees a half-written plan."""
        plan = self.path(key)
        with file_lock(plan.with_suffix(".lock")):
            if self.get(key):
                return plan, False
            data = build()
            atomic.write_bytes(plan, data)
            sidecar = key.sidecar(len(data), extra)
            atomic.write_text(plan.with_suffix(".json"), json.dumps(sidecar, indent=2) + "\n")
            return plan, True

    def entries(self) -> list[tuple[Path, PlanKey | None, int]]:
        if not self.dir.is_dir():
            return []
        return [(p, PlanKey.read(p), p.stat().st_size) for p in sorted(self.dir.glob("*.engine"))]

    def clear(self, key_prefix: str | None = None) -> list[Path]:
        """Delete plans (all, or those whose file name starts with ``key_prefix``) with their
        sidecars; returns what was removed."""
        if key_prefix is not None and not key_prefix.strip():
            raise BundleError(
                "--key is empty; name part of a plan's key, or leave --key out to clear every plan"
            )
        removed = []
        for plan, _, _ in self.entries():
            if key_prefix and not plan.name.startswith(key_prefix) and key_prefix not in plan.stem:
                continue
            with file_lock(plan.with_suffix(".lock")):
                for p in (plan, plan.with_suffix(".json")):
                    if p.exists():
                        p.unlink()
            plan.with_suffix(".lock").unlink(missing_ok=True)
            removed.append(plan)
        return removed


def bundle_shapes(manifest, override: dict | None = None) -> dict:
    """Optimisation-profile shapes per dynamic input: ``override`` (from --shapes) or the bundle's
    recorded batch range (min / opt / max) on axis 0."""
    if override:
        return {k: [list(s) for s in v] for k, v in override.items()}
    batch = manifest.batch_range
    shapes = {}
    for spec in manifest.inputs:
        if not spec.dynamic:
            continue
        if any(d < 0 for d in spec.shape[1:]):
            raise EdgertError(
                f"input {spec.name} has dynamic axes beyond the batch; give --shapes min:opt:max"
            )
        rest = list(spec.shape[1:])
        shapes[spec.name] = [[batch.get(k, 1), *rest] for k in ("min", "opt", "max")]
    return shapes


def ensure_plan(
    bundle_dir: Path, precision: str, device: int = 0, options=None, extra: dict | None = None
) -> tuple[Path, bool, PlanKey]:
    """The plan for this bundle, precision, GPU and TensorRT: from the cache, or built now.

    Used by ``edgert build`` and by ``Engine.load`` (build on first use), so both agree on keys.
    """
    if options is not None and options.precision != precision:  # one source of precision
        raise EdgertError(
            f"the plan's options are for {options.precision}, not {precision}: the "
            "cache key and the build would disagree"
        )
    from .backends import plan_key
    from .backends import tensorrt_compat as compat
    from .backends.tensorrt_logger import import_tensorrt
    from .backends.tensorrt_plan import BuildOptions, build_plan
    from .bundle import Bundle, sha256_file
    from .device import jetson_module, probe_cuda

    trt = import_tensorrt()
    version = compat.parse_version(trt.__version__)
    bundle = Bundle(bundle_dir)
    # options are frozen: what is filled in here makes new ones (replace), the caller's stay
    options = options if options is not None else BuildOptions(precision=precision)
    vouched = bundle.manifest.hashes  # the models the bundle's manifest records
    dla = options.dla_core is not None
    source = compat.plan_source_model(version, precision, dla, available=vouched)
    onnx_file = bundle.path / source
    if dla and source == MODEL and precision == "int8":
        # DLA on JetPack 5/6 does not take Q/DQ: the FP32 model plus a calibration cache from our ranges
        from .backends.tensorrt_plan import calibration_cache_text

        ranges = bundle.path / "calibration" / "ranges.json"
        if not ranges.is_file():
            raise EdgertError(
                f"{ranges} is missing; run: edgert build {bundle.path} --precision int8"
            )
        thresholds = json.loads(ranges.read_text())["thresholds"]
        options = replace(options, calibration_cache=calibration_cache_text(version, thresholds))
    if not onnx_file.is_file():
        how = f"edgert build {bundle.path} --precision {precision}"
        raise EdgertError(f"{onnx_file.name} is missing from {bundle.path}; make it with: {how}")
    cuda = probe_cuda()
    if device >= len(cuda.devices):
        raise EdgertError(
            f"CUDA device {device} does not exist ({cuda.reason or len(cuda.devices)})"
        )
    dev = cuda.devices[device]
    if precision == "fp8":
        why_not = compat.fp8_unsupported_reason(version, dev.compute_capability)
        if why_not:
            raise EdgertError(f"no FP8 plan for {dev.name}: {why_not}")
    shapes = bundle_shapes(bundle.manifest, options.shapes or None)
    if dla:
        shapes, pinned = compat.dla_shapes(shapes)
        if pinned:
            log.warning(
                "DLA takes no dynamic shapes: the DLA plan is built for %s only (give --shapes "
                "for another batch)",
                ", ".join(pinned),
            )
    options = replace(options, shapes={k: tuple(tuple(s) for s in v) for k, v in shapes.items()})
    calib = bundle.manifest.quantization.get(precision)
    onnx_sha256 = sha256_file(onnx_file)
    recorded = bundle.manifest.hashes.get(onnx_file.name)
    if recorded != onnx_sha256:
        raise EdgertError(
            f"{onnx_file} does not match the SHA-256 recorded in its manifest"
            + (" (changed or damaged after it was written)" if recorded else " (not recorded)")
            + f"; make it again with: edgert build {bundle.path} --precision {precision}"
        )
    key = PlanKey(
        onnx_sha256=onnx_sha256,
        precision=precision,
        tensorrt=trt.__version__,
        device_name=dev.name,
        compute_capability=dev.cc,
        calibration_sha256=calib.calibration_sha256 if calib else None,
        dla_core=options.dla_core,
        shapes=shapes,
        builder=options.key_fields(),
        module=jetson_module(),
        multiprocessors=dev.multiprocessors,
    )
    if options.timing_cache is None:
        timing = plan_key.timing_cache_name(key.tensorrt, key.compute_capability, dev.name)
        options = replace(options, timing_cache=bundle.engines_dir / timing)
    path, built = PlanCache(bundle.engines_dir).get_or_build(
        key, lambda: build_plan(onnx_file, options, device), extra
    )
    return path, built, key
