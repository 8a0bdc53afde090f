"""The plan cache: ``engines/<key>.engine`` plus a ``<key>.json`` sidecar in the bundle, both
from one record (:class:`PlanKey`, in ``backends/plan_key.py`` with the plan selection).

The key hashes everything a plan depends on — ONNX bytes, precision, calibration, TensorRT
version, GPU name and compute capability, DLA core, shapes and builder options — so a plan is
never loaded where it was not built for: another GPU or TensorRT version simply has another key.
Writes are atomic and a per-key lock makes two processes building the same key do the work once.
The sidecar also names the bundle the plan was built for (``bundle``: its folder name and its
``model.onnx``'s SHA-256), so clearing a shared folder (``EDGERT_PLAN_DIR``) removes only this
bundle's own plans: never a link, a file without edgert's sidecar, or another bundle's plan.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from .. import atomic
from ..bundle import MODEL
from ..errors import BundleError, EdgertError
from ..locks import file_lock
from .plan_key import PlanKey, read_sidecar

log = logging.getLogger(__name__)


def owner_of(bundle) -> dict:
    """What a plan's sidecar records of the bundle it was built for (``bundle``: a
    :class:`~.bundle.Bundle`): its folder's name and its model.onnx's SHA-256."""
    hashes = bundle.manifest.hashes
    return {"name": bundle.path.resolve().name, "model_sha256": hashes.get(MODEL)}


def cache_of(bundle) -> PlanCache:
    """The plan cache of ``bundle``: its engines/, or its folder under ``EDGERT_PLAN_DIR``, where
    :meth:`PlanCache.clear` removes only the plans built for it (old sidecars: from one of its
    model files)."""
    from ..bundle import engines_dir

    owner = None
    if engines_dir(bundle.path, legacy=True) is not None:  # a folder bundles may share
        owner = {**owner_of(bundle), "hashes": set(bundle.manifest.hashes.values())}
    return PlanCache(bundle.engines_dir, owner)


class PlanCache:
    def __init__(self, engines_dir: str | Path, owner: dict | None = None) -> None:
        """``owner`` (:func:`owner_of`): the bundle whose plans :meth:`clear` may remove from a
        folder bundles share (``EDGERT_PLAN_DIR``); None for the bundle's own engines/, where
        every plan with edgert's sidecar is the bundle's."""
        self.dir = Path(engines_dir)
        self.owner = owner

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
        return [(p, info, size) for p, info, _, size in self.inspect()]

    def inspect(self) -> list[tuple[Path, PlanKey | None, str | None, int]]:
        """Every ``*.engine`` here: (path, its record or None, why it has none, its size in
        bytes, the link's own for a link). Sidecars are read only as regular files of bounded
        size (a FIFO hung ``edgert cache list`` for ever)."""
        if not self.dir.is_dir():
            return []
        out = []
        for p in sorted(self.dir.glob("*.engine")):
            info, why = PlanKey.inspect(p)
            try:
                size = os.lstat(p).st_size
            except OSError:
                continue  # removed meanwhile
            out.append((p, info, why, size))
        return out

    def clear(self, key_prefix: str | None = None) -> tuple[list[Path], list[tuple[Path, str]]]:
        """Delete this bundle's plans (all, or those whose file name contains ``key_prefix``)
        with their sidecars: regular files (never a link, never what a link leads to) with
        edgert's sidecar, built for this bundle (:attr:`owner`). Returns (what was removed,
        [(what was left, why)])."""
        if key_prefix is not None and not key_prefix.strip():
            raise BundleError(
                "--key is empty; name part of a plan's key, or leave --key out to clear every plan"
            )
        removed, left = [], []
        for plan, info, why, _ in self.inspect():
            if key_prefix and not plan.name.startswith(key_prefix) and key_prefix not in plan.stem:
                continue
            why = self._not_ours(plan, info, why)
            if why:
                left.append((plan, why))
                continue
            with file_lock(plan.with_suffix(".lock")):
                for p in (plan, plan.with_suffix(".json")):
                    if os.path.lexists(p):
                        p.unlink()  # a link itself, never where it leads
            plan.with_suffix(".lock").unlink(missing_ok=True)
            removed.append(plan)
        return removed, left

    def _not_ours(self, plan: Path, info: PlanKey | None, why: str | None) -> str | None:
        """Why :meth:`clear` leaves ``plan`` (None: it is this bundle's plan)."""
        try:
            mode = os.lstat(plan).st_mode
        except OSError as exc:
            return f"cannot be read ({exc.strerror})"
        if stat.S_ISLNK(mode):
            return "a link"
        if not stat.S_ISREG(mode):
            return "not a regular file"
        if info is None:
            return why or "no sidecar"
        if self.owner is None:
            return None
        built_for = (read_sidecar(plan)[0] or {}).get("bundle")
        mine = self.owner.get("model_sha256")
        if isinstance(built_for, dict):
            ok = mine is not None and built_for.get("model_sha256") == mine
        else:  # a sidecar of an older edgert: the model file it was built from
            ok = info.onnx_sha256 is not None and info.onnx_sha256 in self.owner.get("hashes", ())
        return None if ok else "another bundle's plan"


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


def _dla_calibration_cache(bundle, version) -> str:
    """DLA on JetPack 5/6 does not take Q/DQ: the FP32 model plus a calibration cache from the
    ranges the INT8 build recorded (calibration/ranges.json)."""
    from .tensorrt_plan import calibration_cache_text

    ranges = bundle.path / "calibration" / "ranges.json"
    if not ranges.is_file():
        raise EdgertError(f"{ranges} is missing; run: edgert build {bundle.path} --precision int8")
    thresholds = json.loads(ranges.read_text())["thresholds"]
    return calibration_cache_text(version, thresholds)


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
    from ..bundle import Bundle, sha256_file
    from ..device import jetson_module, probe_cuda
    from . import plan_key
    from . import tensorrt_compat as compat
    from .tensorrt_logger import import_tensorrt
    from .tensorrt_plan import BuildOptions, build_plan

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
        options = replace(options, calibration_cache=_dla_calibration_cache(bundle, version))
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
    extra = {"bundle": owner_of(bundle), **(extra or {})}  # which bundle's (cache clear)
    path, built = PlanCache(bundle.engines_dir).get_or_build(
        key, lambda: build_plan(onnx_file, options, device), extra
    )
    return path, built, key
