"""Building TensorRT plans from ONNX (thin; every version decision comes from tensorrt_compat).

Follows NVIDIA's documented Python API: Builder -> create_network(flags) -> OnnxParser ->
BuilderConfig (workspace pool, precision flags, optimisation profile, timing cache, optimisation
level, progress monitor, DLA) -> build_serialized_network.
"""

from __future__ import annotations

import logging
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .. import atomic
from ..errors import BuildError, ModelError
from . import tensorrt_compat as compat
from .tensorrt_logger import import_tensorrt, init_plugins, process_logger

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuildOptions:
    """How to build one plan; immutable: ``ensure_plan`` derives the filled-in options with
    ``dataclasses.replace`` (its precision is the one the cache key holds)."""

    precision: str = "fp16"
    workspace_bytes: int | None = None
    opt_level: int | None = None
    shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=dict
    )
    dla_core: int | None = None
    timing_cache: Path | None = None
    calibration_cache: bytes | None = None  # INT8 on DLA (implicit quantization, TensorRT < 11)
    progress: bool = True

    def key_fields(self) -> dict:
        return {"workspace_bytes": self.workspace_bytes, "opt_level": self.opt_level}

    @classmethod
    def from_request(
        cls,
        precision: str,
        workspace_gib: float | None = None,
        opt_level: int | None = None,
        shapes: dict | None = None,
        dla: int | None = None,
        first_input: str | None = None,
    ) -> BuildOptions:
        """The options of ``edgert build`` (``--workspace GIB``, ``--opt-level``, ``--shapes``,
        ``--dla``), the same on the host and on a JetPack 5 device. A profile given without an
        input name (``""``) is ``first_input``'s (the bundle's first input)."""
        shapes = dict(shapes or {})
        if "" in shapes:
            shapes[first_input or "input"] = shapes.pop("")
        return cls(
            precision=precision,
            workspace_bytes=int(workspace_gib * 2**30) if workspace_gib else None,
            opt_level=opt_level,
            shapes=shapes,
            dla_core=dla,
        )


def calibration_cache_text(version: tuple[int, ...], thresholds: dict[str, float]) -> bytes:
    """A TensorRT calibration cache from edgert's ranges: one 'tensor: hex(float32 scale)' line per
    tensor (big-endian IEEE-754 bits), scale = threshold / 127, under TensorRT's header."""
    tag = compat.calibration_cache_tag(version)
    lines = [f"TRT-{tag}-EntropyCalibration2"]
    for name, threshold in sorted(thresholds.items()):
        lines.append(f"{name}: {struct.pack('>f', threshold / 127.0).hex()}")
    return ("\n".join(lines) + "\n").encode()


def _progress_monitor(trt):
    class Bar(trt.IProgressMonitor):
        """TensorRT build phases as a one-line progress bar on stderr."""

        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)
            self.steps: dict[str, int] = {}

        def phase_start(self, phase_name, parent_phase, num_steps) -> None:
            self.steps[phase_name] = max(int(num_steps), 1)

        def step_complete(self, phase_name, step) -> bool:
            total = self.steps.get(phase_name, 1)
            done = int(20 * (step + 1) / total)
            sys.stderr.write(
                f"\r  {phase_name[:40]:<40} [{'#' * done}{'.' * (20 - done)}] {step + 1}/{total}"
            )
            sys.stderr.flush()
            return True  # False would cancel the build

        def phase_finish(self, phase_name) -> None:
            self.steps.pop(phase_name, None)
            if not self.steps:
                sys.stderr.write("\r" + " " * 80 + "\r")

    return Bar()


def _calibrator(trt, cache: bytes):
    class CacheOnly(trt.IInt8EntropyCalibrator2):
        """Feeds TensorRT edgert's calibration cache; never asks for data."""

        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)

        def get_batch_size(self) -> int:
            return 1

        def get_batch(self, names):
            return None

        def read_calibration_cache(self):
            return cache

        def write_calibration_cache(self, data) -> None:
            return None

    return CacheOnly()


def parser_errors(trt_version: str, parser) -> str:
    """All parser errors as one sentence, with node names where TensorRT gives them."""
    parts = []
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        where = ""
        if hasattr(err, "node_name") and err.node_name():
            op = err.node_operator() if hasattr(err, "node_operator") else ""
            where = f"node {err.node_name()}" + (f" ({op})" if op else "")
        elif err.node() >= 0:
            where = f"node #{err.node()}"
        parts.append(f"{where}: {err.desc()}" if where else err.desc())
    return f"TensorRT {trt_version} cannot parse the model: " + "; ".join(parts[:3])


def build_plan(onnx_path: Path, options: BuildOptions, device: int = 0) -> bytes:
    """Parse ``onnx_path`` and build a serialized plan (bytes) for CUDA device ``device``: the
    build runs with that device's primary context current, so the CUDA runtime TensorRT uses
    builds for it (and not for device 0) on a host with several GPUs."""
    from ..cuda.driver import PrimaryContext

    with PrimaryContext.get(device).active():
        return _build_plan(onnx_path, options)


def _build_plan(onnx_path: Path, options: BuildOptions) -> bytes:
    trt = import_tensorrt()
    version = compat.parse_version(trt.__version__)
    feats = compat.features(version)
    logger = process_logger()
    # the standard plugins (EfficientNMS_TRT, ROIAlign_TRT, ...): the 8.5 ONNX parser registered
    # them itself; from 10 the parser creates them but no longer registers them (NVIDIA's own
    # builder samples call init_libnvinfer_plugins before parsing)
    init_plugins()
    mark = logger.mark()
    builder = trt.Builder(logger)
    flags = 0
    for name in compat.network_flag_names(version, strongly_typed=not feats.weak_typing):
        flags |= 1 << int(getattr(trt.NetworkDefinitionCreationFlag, name))
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        raise BuildError(parser_errors(trt.__version__, parser))
    config = builder.create_builder_config()
    if options.workspace_bytes:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(options.workspace_bytes))
    if options.opt_level is not None:
        if not hasattr(config, "builder_optimization_level"):
            raise BuildError(f"TensorRT {trt.__version__} has no builder optimisation level (8.6+)")
        config.builder_optimization_level = int(options.opt_level)
    qdq = options.precision == "int8" and options.calibration_cache is None
    for flag in compat.builder_flag_names(version, options.precision, qdq_model=qdq):
        config.set_flag(getattr(trt.BuilderFlag, flag))
    for flag in compat.cleared_builder_flag_names(version, options.precision):
        if hasattr(trt.BuilderFlag, flag):
            config.clear_flag(getattr(trt.BuilderFlag, flag))
    if options.precision == "int8" and options.calibration_cache is not None:
        if not feats.implicit_int8_calibration:
            raise BuildError(
                f"TensorRT {trt.__version__} has no implicit INT8 calibration; DLA INT8 needs TensorRT < 11"
            )
        config.set_flag(trt.BuilderFlag.INT8)
        config.int8_calibrator = _calibrator(trt, options.calibration_cache)
    _add_profile(trt, builder, network, config, options.shapes)
    if options.dla_core is not None:
        refusal = compat.dla_refusal(options.precision, options.dla_core, builder.num_DLA_cores)
        if refusal:
            raise BuildError(refusal)
        config.default_device_type = trt.DeviceType.DLA
        config.DLA_core = int(options.dla_core)
        config.set_flag(trt.BuilderFlag.GPU_FALLBACK)
    cache_bytes = (
        options.timing_cache.read_bytes()
        if options.timing_cache and options.timing_cache.is_file()
        else b""
    )
    # a truncated or foreign cache file: create_timing_cache may give None (trtexec checks for
    # it), and set_timing_cache(None) would raise a TypeError instead of starting afresh
    timing_cache = config.create_timing_cache(cache_bytes)
    if timing_cache is None or not config.set_timing_cache(timing_cache, ignore_mismatch=False):
        # a cache from another GPU (same compute capability) or TensorRT: start a fresh one
        log.warning(
            "TensorRT refused the timing cache %s; starting a fresh one", options.timing_cache
        )
        fresh = config.create_timing_cache(b"")
        if fresh is None or not config.set_timing_cache(fresh, ignore_mismatch=False):
            raise BuildError("TensorRT refused even an empty timing cache")
    if options.progress and feats.progress_monitor:
        config.progress_monitor = _progress_monitor(trt)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        detail = "; ".join(logger.since(mark)[-3:]) or "no detail from TensorRT"
        hint = (
            " (try a larger --workspace)"
            if "memory" in detail.lower() or "workspace" in detail.lower()
            else ""
        )
        raise BuildError(f"TensorRT {trt.__version__} failed to build the engine: {detail}{hint}")
    if options.timing_cache:
        atomic.write_bytes(options.timing_cache, bytes(config.get_timing_cache().serialize()))
    return bytes(plan)


def _add_profile(trt, builder, network, config, shapes: dict) -> None:
    dynamic = []
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        if any(d < 0 for d in tensor.shape):
            dynamic.append(tensor)
    if not dynamic:
        return
    profile = builder.create_optimization_profile()
    for tensor in dynamic:
        if tensor.name not in shapes:
            raise ModelError(
                f"input {tensor.name} has dynamic dimensions {list(tensor.shape)}; give --shapes min:opt:max"
            )
        lo, opt, hi = shapes[tensor.name]
        profile.set_shape(tensor.name, lo, opt, hi)
    config.add_optimization_profile(profile)
