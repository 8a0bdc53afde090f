"""Engine: one API over the backends (TensorRT, ONNX Runtime) with inputs validated once, here.

with Engine.load("mobilenet_v2.edgert") as engine:
    outputs = engine.infer(batch)          # dict name -> numpy array
    print(engine.backend, engine.backend_reason)
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np

from .backends import TABLE, Backend, backend_class
from .backends.base import Target
from .bundle import Bundle, Manifest, TensorSpec, verify_hash
from .errors import (
    BackendUnavailable,
    BundleError,
    EngineMismatch,
    ModelError,
    ShapeError,
    first_line,
)
from .images.preprocess import Preprocessing
from .precision import CHOICES

log = logging.getLogger(__name__)

BACKENDS = ("auto", *TABLE)
PRECISIONS = CHOICES  # auto: the best the bundle has for the backend


class Engine:
    """A loaded model on one backend. Use :meth:`load`.

    Thread safety: :meth:`infer` may be called from several threads at once. Calls on one engine
    run one at a time (the backend's buffers, I/O binding and stream are shared), and each call
    returns arrays that belong to its caller. For parallel inference, load one engine per thread.
    """

    def __init__(
        self,
        impl: Backend,
        reason: str,
        source: Path,
        manifest: Manifest | None = None,
        max_batch: int | None = None,
    ) -> None:
        self._impl = impl
        self.backend_reason = reason
        self.source = source
        self.manifest = manifest
        self.max_batch = max_batch
        self._warned_nonfinite = False
        self._closed = False
        self._lock = threading.Lock()
        # I/O a backend holds in a narrower type than the model (TensorRT 8.5 takes INT64 as
        # INT32): the model's type at this boundary, the backend's inside, converted here
        self._narrowed = _narrowed_io(manifest, impl)
        if self._narrowed:
            log.info(
                "%s holds %s as %s: converted at the engine's boundary",
                impl.name,
                ", ".join(self._narrowed),
                ", ".join(sorted({b for _, b in self._narrowed.values()})),
            )

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | Path | Bundle,
        backend: str = "auto",
        device: int = 0,
        precision: str = "auto",
        **options,
    ) -> Engine:
        """Load a bundle folder (its path, or a :class:`Bundle` already read), an ``.onnx`` or an
        ``.engine`` on the best (or the named) backend.

        ``auto`` tries the backends in table order (TensorRT with a plan for this GPU, then ONNX
        Runtime with TensorRT/CUDA execution providers where present, else on CPU) and records why
        it chose the one it did in :attr:`backend_reason`.
        """
        if backend not in BACKENDS:
            raise BackendUnavailable(
                f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}"
            )
        if precision not in PRECISIONS:
            raise ModelError(
                f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}"
            )
        _check_options(options, list(TABLE) if backend == "auto" else [backend])
        bundle = path if isinstance(path, Bundle) else None  # read once by the caller
        path = bundle.path if bundle is not None else Path(path)
        if not path.exists():
            raise ModelError(f"{path} does not exist")
        target, manifest, max_batch = _resolve(path, bundle)
        if options.get("dla") is not None:  # which plans to select and build: the target's
            target = replace(target, dla_core=int(options["dla"]))
        options.pop("dla", None)
        candidates = list(TABLE) if backend == "auto" else [backend]
        skipped = []
        for name in candidates:
            impl_cls = backend_class(name)
            model_file, why = _choose_file(impl_cls, target, precision, device)
            if model_file is None:
                if backend != "auto":
                    raise BackendUnavailable(f"backend {name} cannot run {path}: {why}")
                skipped.append(f"{name}: {why}")
                continue
            _verify_bundle_file(target, model_file)
            try:
                impl = impl_cls.load(model_file, device=device, **options)
            except (EngineMismatch, ModelError) as exc:
                # a plan this backend cannot run here (another module, an I/O type it cannot
                # feed): with auto, the next backend runs the bundle and the reason says why
                if backend != "auto" or target.bundle_dir is None or name == candidates[-1]:
                    raise
                skipped.append(f"{name}: {exc}")
                continue
            reason = f"{name} ({impl.description}; {why})"
            if skipped:
                reason += "; skipped " + "; ".join(skipped)
            log.info("backend %s", reason)
            return cls(impl, reason, model_file, manifest, max_batch)
        raise BackendUnavailable(f"no backend can run {path}: " + "; ".join(skipped))

    # -- properties ---------------------------------------------------------------------------
    @property
    def backend(self) -> str:
        return self._impl.name

    @property
    def on_cpu(self) -> bool:
        """Whether inference runs on the CPU (ONNX Runtime without a GPU provider)."""
        return self._impl.on_cpu

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self._model_types(self._impl.inputs)

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self._model_types(self._impl.outputs)

    def _model_types(self, specs) -> tuple[TensorSpec, ...]:
        n = self._narrowed
        if not n:
            return specs
        return tuple(TensorSpec(s.name, n[s.name][0], s.shape) if s.name in n else s for s in specs)

    @property
    def last_split_ms(self) -> dict[str, float] | None:
        """H2D / compute / D2H of the last call in ms, measured with CUDA events by the TensorRT
        backend when loaded with ``profile=True``; None elsewhere (ONNX Runtime copies and
        computes inside one call, and a CUDA graph replays them together)."""
        return getattr(self._impl, "last_split_ms", None)

    @property
    def preprocessing(self) -> Preprocessing | None:
        return self.manifest.preprocessing if self.manifest else None

    @property
    def labels(self) -> tuple[str, ...] | None:
        return self.manifest.labels if self.manifest else None

    # -- inference ----------------------------------------------------------------------------
    def infer(self, inputs: np.ndarray | dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one batch; returns a dict output name -> array (owned by the caller)."""
        feeds = self.validate(inputs)
        with self._lock:  # the backend's buffers and binding are shared: one call at a time
            if self._closed:
                raise ModelError("this engine is closed")
            outputs = self._impl.run(feeds)
        for name, (model, _) in self._narrowed.items():
            if name in outputs:
                outputs[name] = outputs[name].astype(model)
        if not self._warned_nonfinite:
            bad = [
                n for n, v in outputs.items() if v.dtype.kind == "f" and not np.isfinite(v).all()
            ]
            if bad:
                self._warned_nonfinite = True
                log.warning("output %s contains NaN or Inf (warned once)", ", ".join(bad))
        return outputs

    __call__ = infer

    def validate(self, inputs: np.ndarray | dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Check names, dtypes and shapes against the spec; return contiguous arrays by name."""
        specs = self.inputs
        if not isinstance(inputs, dict):
            if len(specs) != 1:
                names = ", ".join(s.name for s in specs)
                raise ShapeError(
                    f"the model has {len(specs)} inputs ({names}); pass a dict name -> array"
                )
            inputs = {specs[0].name: inputs}
        expected = {s.name for s in specs}
        unknown = [n for n in inputs if n not in expected]
        if unknown:
            raise ShapeError(
                f"unknown input {unknown[0]!r}; the model's inputs are {', '.join(sorted(expected))}"
            )
        feeds = {}
        for spec in specs:
            if spec.name not in inputs:
                raise ShapeError(f"missing input {spec.name!r} ({spec.describe()})")
            arr = np.asarray(inputs[spec.name])
            if arr.dtype.name != spec.dtype:
                raise ShapeError(
                    f"input {spec.name!r} has dtype {arr.dtype.name}; expected {spec.dtype}"
                )
            _check_shape(spec, arr.shape, self.max_batch)
            if spec.name in self._narrowed:
                arr = _narrow(spec.name, arr, self._narrowed[spec.name][1])
            feeds[spec.name] = np.ascontiguousarray(arr)
        return feeds

    # -- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:  # never free buffers under a call in flight
            if not self._closed:
                self._closed = True
                self._impl.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Engine({str(self.source)!r}, backend={self.backend!r})"


NARROWED = {("int64", "int32")}  # (the model's type, a backend's type) converted at the boundary


def _narrowed_io(manifest: Manifest | None, impl: Backend) -> dict[str, tuple[str, str]]:
    """name -> (model dtype, backend dtype) for the I/O a backend holds narrower than the model."""
    if manifest is None:
        return {}
    model = {s.name: s.dtype for s in (*manifest.inputs, *manifest.outputs)}
    return {
        s.name: (model[s.name], s.dtype)
        for s in (*impl.inputs, *impl.outputs)
        if (model.get(s.name), s.dtype) in NARROWED
    }


def _narrow(name: str, arr: np.ndarray, dtype: str) -> np.ndarray:
    """``arr`` in the backend's narrower type; ShapeError for a value that does not fit."""
    info = np.iinfo(dtype)
    if arr.size and (arr.min() < info.min or arr.max() > info.max):
        raise ShapeError(
            f"input {name!r} holds values outside {dtype} ({info.min}..{info.max}), which this "
            f"backend takes it as"
        )
    return arr.astype(dtype)


def _choose_file(impl_cls, target, precision: str, device: int) -> tuple:
    """The file ``impl_cls`` would run for ``target`` (built on first use where that backend
    builds) and why; or (None, why not)."""
    why_not = impl_cls.availability()
    if why_not is not None:
        return None, why_not
    model_file, why = impl_cls.select(target, precision, device)
    first_use = getattr(impl_cls, "first_use_precision", None)
    build_as = first_use(target, precision, device) if model_file is None and first_use else None
    if build_as is not None:
        model_file, why = _build_on_first_use(target, build_as, device, why)
    return model_file, why


def _build_on_first_use(target: Target, precision: str, device: int, why_none: str):
    """No plan for this GPU yet: build one into the bundle's plan cache and check it against the
    stored FP32 samples (the policy ``edgert build`` follows too), or say why not."""
    from .backends.plan_check import build_checked_plan
    from .errors import EdgertError

    log.warning(
        "%s; building a %s TensorRT plan now (once; it is cached in the bundle)",
        why_none,
        precision,
    )
    try:
        options = None
        if target.dla_core is not None:
            from .backends.tensorrt_plan import BuildOptions

            options = BuildOptions(precision=precision, dla_core=target.dla_core)
        plan, _, check = build_checked_plan(target.bundle_dir, precision, device, options)
    except EdgertError as exc:
        return None, f"{why_none}; building one failed: {exc}"
    checked = f", {check.summary}" if check else ""
    return plan, f"plan {plan.name} built now for this GPU and cached{checked}"


def _check_options(options: dict, backends: list[str]) -> None:
    """Options no candidate backend takes are a mistake (``provder=``), not something to ignore."""
    import difflib

    known = sorted(set().union(*(backend_class(n).OPTIONS for n in backends)))
    for name in options:
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ModelError(
                f"Engine.load got an unknown option {name!r}{hint} (backend {'/'.join(backends)} "
                f"takes: {', '.join(known) or 'none'})"
            )


def _check_shape(spec: TensorSpec, shape: tuple[int, ...], max_batch: int | None) -> None:
    want = "x".join("N" if d < 0 else str(d) for d in spec.shape)
    got = "x".join(str(d) for d in shape)
    if len(shape) != len(spec.shape) or any(w >= 0 and w != g for w, g in zip(spec.shape, shape)):
        raise ShapeError(f"input {spec.name!r} has shape {got}; expected {want}")
    if any(g == 0 for g in shape):
        raise ShapeError(f"input {spec.name!r} has an empty dimension ({got})")
    if max_batch is not None and spec.shape and spec.shape[0] < 0 and shape[0] > max_batch:
        raise ShapeError(f"batch {shape[0]} exceeds the bundle's maximum batch {max_batch}")


def _resolve(
    path: Path, bundle: Bundle | None = None
) -> tuple[Target, Manifest | None, int | None]:
    """(target, manifest or None, max batch or None) for a bundle folder (read here unless the
    caller passes its ``Bundle``), .onnx or .engine."""
    if path.is_dir():
        bundle = bundle or Bundle(path)
        m = bundle.manifest
        speeds = {p: q.cpu_ms for p, q in m.quantization.items() if q.cpu_ms is not None}
        target = Target(
            path, bundle_dir=path, onnx=bundle.onnx_path, onnx_hashes=m.hashes, cpu_speeds=speeds
        )
        return target, m, m.max_batch
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        return Target(path, onnx=path), _manifest_from_onnx(path), None
    if suffix in (".engine", ".plan", ".trt"):
        parent = path.parent.parent
        manifest = Bundle(parent).manifest if (parent / "manifest.json").is_file() else None
        return Target(path, engine=path), manifest, None
    raise ModelError(f"{path} is not a bundle folder, .onnx or .engine file")


def _verify_bundle_file(target: Target, model_file: Path) -> None:
    """A bundle's ONNX models must be the ones its manifest recorded: changed or damaged weights
    never run silently. Plans are chosen by the recorded hashes of the ONNX they were built from."""
    if target.bundle_dir is None or model_file.suffix.lower() != ".onnx":
        return
    if model_file.parent.resolve() != target.bundle_dir.resolve():
        return
    expected = (target.onnx_hashes or {}).get(model_file.name)
    if expected is None:
        raise BundleError(
            f"{model_file} is not recorded in the bundle's manifest (left by an interrupted "
            "build?); build it again with edgert build"
        )
    verify_hash(model_file, expected)


def _manifest_from_onnx(path: Path) -> Manifest | None:
    """Preprocessing and labels from an edgert-exported ONNX file's metadata, when present."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise ModelError(f"{path} is not a valid ONNX file: {first_line(exc, 200)}") from exc
    props = {p.key: p.value for p in model.metadata_props}
    if props.get("edgert.format") is None:
        return None
    try:
        data = {
            "format": props["edgert.format"],
            "name": props.get("edgert.name", path.stem),
            "task": props.get("edgert.task", "generic"),
            "inputs": [],
            "outputs": [],
            "preprocessing": json.loads(props.get("edgert.preprocessing", "null")),
            "labels": json.loads(props.get("edgert.labels", "null")),
        }
        return Manifest.from_dict(data, where=f"{path} metadata")
    except (ValueError, RecursionError, BundleError):  # JSON nested deeper than Python recurses
        log.warning("ignoring unreadable edgert metadata in %s", path)
        return None
