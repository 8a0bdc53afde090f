"""TensorRT backend: name-based API (8.5+), PyCUDA buffers on the primary context, one stream,
zero-copy mapped memory on integrated GPUs, optional CUDA graph of copy + execute.

Thin by design: version decisions live in :mod:`tensorrt_compat` (pure functions, tested without
TensorRT); GPU memory, streams and graphs in :mod:`edgert.runtime.cuda`. Every boolean TensorRT
returns is checked.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np

from ..bundle import TensorSpec
from ..device import cc_string
from ..errors import (
    BackendUnavailable,
    CudaError,
    EngineMismatch,
    ModelError,
    ShapeError,
    first_line,
)
from ..precision import PRECISIONS
from . import plan_key
from . import tensorrt_compat as compat
from .base import Backend, Target
from .tensorrt_io import TensorIO, check_capacity, check_profile, describe_io
from .tensorrt_logger import import_tensorrt, init_plugins, process_logger

log = logging.getLogger(__name__)


# explain_deserialize_failure's kinds: a plan to rebuild here, no room on the GPU, else ModelError
_REFUSALS = {"version": EngineMismatch, "device": EngineMismatch, "memory": CudaError}


class TensorRTBackend(Backend):
    name = "tensorrt"
    OPTIONS = frozenset({"use_graph", "profile", "spin", "dla"})

    @classmethod
    def availability(cls) -> str | None:
        try:
            trt = import_tensorrt()
        except BackendUnavailable as exc:
            return str(exc)
        version = compat.parse_version(trt.__version__)
        reason = compat.unsupported_reason(version)
        if reason:
            return reason
        from ..cuda.driver import availability

        return availability()

    @classmethod
    def select(cls, target: Target, precision: str, device: int) -> tuple[Path | None, str]:
        """The plan to load: the .engine given, or the bundle's plan for this GPU and TensorRT."""
        if target.engine is not None:
            return target.engine, f"plan {target.engine.name}"
        if target.bundle_dir is None:
            return (
                None,
                f"an .onnx needs a TensorRT plan first: edgert build {target.path} --precision fp16",
            )
        from ..device import jetson_module, probe_cuda

        trt = import_tensorrt()
        cuda = probe_cuda()
        if device >= len(cuda.devices):
            return None, f"CUDA device {device} does not exist"
        dev = cuda.devices[device]
        version = compat.parse_version(trt.__version__)
        hashes = target.onnx_hashes or {}

        def expected(dla: bool) -> dict:
            return {
                p: hashes.get(compat.plan_source_model(version, p, dla, available=hashes))
                for p in PRECISIONS
            }

        def select(folder: Path) -> tuple[Path | None, str]:
            return plan_key.select_plan(
                folder,
                precision,
                trt.__version__,
                dev.name,
                dev.cc,
                expected(False),
                dla_onnx_sha256=expected(True),
                dla=target.dla_core,
                module=jetson_module(),
                multiprocessors=dev.multiprocessors,
            )

        found = select(target.engines_dir)
        legacy = target.legacy_engines_dir  # EDGERT_PLAN_DIR's folder of an older edgert
        if found[0] is None and legacy is not None and legacy.is_dir():
            older = select(legacy)  # a plan of this very model only: its hash is checked
            return older if older[0] is not None else found
        return found

    @classmethod
    def first_use_precision(cls, target: Target, precision: str, device: int) -> str | None:
        """When :meth:`select` found no plan for a bundle on an existing GPU: the precision to
        build one in now (``Engine.load`` builds it: what trtexec users do by hand); else None."""
        from ..device import probe_cuda

        if target.engine is not None or target.bundle_dir is None:
            return None
        if device >= len(probe_cuda().devices):
            return None
        if precision != "auto":
            return precision
        if target.dla_core is not None:
            return "fp16"  # DLA runs FP16 or INT8
        version = compat.parse_version(import_tensorrt().__version__)
        fp16_onnx = target.bundle_dir / compat.onnx_for_precision(version, "fp16")
        return "fp16" if fp16_onnx.is_file() else "fp32"

    @classmethod
    def load(
        cls,
        model: Path,
        *,
        device: int = 0,
        use_graph: bool = False,
        profile: bool = False,
        spin: bool = True,
        **_: object,
    ) -> TensorRTBackend:
        return cls(model, device, use_graph, profile, spin)

    def __init__(
        self, plan: Path, device: int, use_graph: bool, profile: bool = False, spin: bool = True
    ) -> None:
        from ..cuda.driver import PrimaryContext
        from ..cuda.stream import Stream

        trt = import_tensorrt()
        self.trt = trt
        self.version = compat.parse_version(trt.__version__)
        self.ctx = PrimaryContext.get(device)
        self._lock = threading.Lock()
        self._graph = None
        self._graph_shapes = None
        self._graph_failed: str | None = None
        self.use_graph = use_graph
        # profile: CUDA events around the copies and the launch give the H2D / compute / D2H split
        self.profile = profile
        self.spin = spin  # False: wait for the GPU by blocking sync (no CPU core spinning)
        self.last_split_ms: dict[str, float] | None = None
        self._events = None
        self.logger = process_logger()  # one per process: the plugin library keeps its pointer
        info = self._sidecar(plan)
        data = plan_key.read_plan(plan)  # a regular file of bounded size only
        # an Ultralytics .engine export: its metadata before the plan, read as Ultralytics does
        self.plan_metadata, data = plan_key.split_plan_header(data)
        with self.ctx.active():
            self.cuda_engine = self._deserialize(plan, info, data)
            self.context = self.cuda_engine.create_execution_context()
            if self.context is None:
                raise ModelError(
                    f"TensorRT could not create an execution context for {plan} (out of GPU memory?)"
                )
            self.stream = Stream()
            self.io = []
            try:
                self.io = self._describe_io()
                self._allocate()
            except BaseException:  # free what was allocated here, on this thread, in context
                self._free()
                raise
        self.inputs = tuple(TensorSpec(t.name, t.dtype, t.shape) for t in self.io if t.is_input)
        self.outputs = tuple(
            TensorSpec(t.name, t.dtype, t.shape) for t in self.io if not t.is_input
        )
        zero = all(t.buffers.zero_copy for t in self.io)
        self.description = (
            f"TensorRT {trt.__version__} on {self.ctx.name}, {'zero-copy mapped memory' if zero else 'pinned copies'}"
            + (", CUDA graph" if use_graph else "")
            + (", Ultralytics' metadata header skipped" if self.plan_metadata else "")
        )
        self._current_shapes: dict[str, tuple[int, ...]] = {}

    # -- set-up -------------------------------------------------------------------------------
    def _sidecar(self, plan: Path) -> plan_key.PlanKey | None:
        """The plan's record, when it has one; EngineMismatch when it says another TensorRT or
        GPU built it (before TensorRT is asked to read it)."""
        info = plan_key.PlanKey.read(plan)
        if info is not None:
            cc = cc_string(self.ctx.compute_capability)
            why = plan_key.plan_mismatch(info, self.trt.__version__, self.ctx.name, cc)
            if why:
                raise EngineMismatch(
                    f"{plan} cannot run here: {why}; rebuild it with: edgert build BUNDLE --precision {info.precision}"
                )
        return info

    def _deserialize(self, plan: Path, info: plan_key.PlanKey | None, data: bytes):
        """TensorRT's ICudaEngine of ``data`` (the context current), on the DLA core the plan
        was built for; a refusal as one sentence of what TensorRT logged."""
        init_plugins()
        mark = self.logger.mark()
        self.runtime = self.trt.Runtime(self.logger)
        dla_core = plan_key.runtime_dla_core(info)
        if dla_core is not None:  # before deserialising: else the plan runs on core 0
            self.runtime.DLA_core = dla_core
        engine = self.runtime.deserialize_cuda_engine(data)
        if engine is None:
            errors = self.logger.since(mark)
            kind, sentence = plan_key.explain_deserialize_failure(errors, plan)
            raise _REFUSALS.get(kind, ModelError)(sentence)
        if plan_key.foreign_device_warning(self.logger.warnings_since(mark)):
            raise EngineMismatch(
                f"{plan} was built on another model of {self.ctx.name} (TensorRT warns it "
                "is likely to affect performance or even cause errors); rebuild it here: "
                f"edgert build BUNDLE --precision {info.precision if info else 'P'}"
            )
        return engine

    def _describe_io(self) -> list[TensorIO]:
        return describe_io(self.trt, self.cuda_engine, self.context, self._set_input_shape)

    def _allocate(self) -> None:
        from ..cuda.memory import TensorBuffers

        for t in self.io:
            t.buffers = TensorBuffers(t.name, t.max_shape, t.dtype, zero_copy=self.ctx.zero_copy)
            if t.buffers.fallback_reason:
                log.warning("%s: %s", t.name, t.buffers.fallback_reason)
            if not self.context.set_tensor_address(t.name, t.buffers.device_ptr):
                raise ModelError(f"TensorRT refused the buffer address for {t.name}")

    def _set_input_shape(self, name: str, shape: tuple[int, ...]) -> None:
        if not self.context.set_input_shape(name, shape):
            raise ShapeError(
                f"TensorRT rejected shape {'x'.join(map(str, shape))} for input {name}"
            )

    # -- inference ----------------------------------------------------------------------------
    def _apply_shapes(self, feeds: dict[str, np.ndarray]) -> bool:
        """Set input shapes when they changed; returns True if they did. Every input's profile
        is checked before any shape is set, and until all are set and the output shapes inferred
        and checked the shapes are unknown: a change that fails part-way (a multi-input model)
        leaves no half-applied shapes that the next call would take for its own."""
        shapes = {n: tuple(a.shape) for n, a in feeds.items()}
        if shapes == self._current_shapes:
            return False
        inputs = [t for t in self.io if t.is_input]
        for t in inputs:
            check_profile(t, shapes[t.name])
        self._current_shapes = {}  # unknown until the whole change succeeded
        for t in inputs:
            self._set_input_shape(t.name, shapes[t.name])
        try:
            missing = self.context.infer_shapes()
        except RuntimeError as exc:  # TensorRT raises on an error code
            raise ShapeError(
                f"TensorRT could not infer the output shapes for inputs {shapes}: {first_line(exc)}"
            ) from exc
        if missing:
            raise ShapeError(f"TensorRT could not infer shapes for {', '.join(missing)}")
        for t in self.io:
            if not t.is_input:
                check_capacity(t, tuple(int(d) for d in self.context.get_tensor_shape(t.name)))
        self._current_shapes = shapes
        return True

    def _enqueue(self, feeds: dict[str, np.ndarray]) -> None:
        self._upload(feeds)
        self._execute()

    def _upload(self, feeds: dict[str, np.ndarray]) -> None:
        for t in self.io:
            if t.is_input:
                t.buffers.upload(feeds[t.name], self.stream)

    def _execute(self) -> None:
        mark = self.logger.mark()
        if not self.context.execute_async_v3(self.stream.handle):
            raise ModelError(
                "TensorRT execute_async_v3 failed: " + "; ".join(self.logger.since(mark)[-2:])
            )

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._lock, self.ctx.active():
            changed = self._apply_shapes(feeds)
            events = self._profile_events() if self.profile else None
            # decided once: a capture that fails inside _run_graph ran the work without events
            graph = self.use_graph and self._graph_failed is None
            if graph:
                self._run_graph(feeds, changed)
            elif events:
                events[0].record(self.stream.pycuda)
                self._upload(feeds)
                events[1].record(self.stream.pycuda)
                self._execute()
                events[2].record(self.stream.pycuda)
            else:
                self._enqueue(feeds)
            out_shapes = {
                t.name: tuple(int(d) for d in self.context.get_tensor_shape(t.name))
                for t in self.io
                if not t.is_input
            }
            views = {
                t.name: t.buffers.download(out_shapes[t.name], self.stream)
                for t in self.io
                if not t.is_input
            }
            timed = bool(events) and not graph
            if timed:
                events[3].record(self.stream.pycuda)
            self.stream.synchronize(blocking=not self.spin)
            if timed:
                self.last_split_ms = {
                    "h2d": events[1].time_since(events[0]),
                    "compute": events[2].time_since(events[1]),
                    "d2h": events[3].time_since(events[2]),
                }
            return {name: view.copy() for name, view in views.items()}

    def _profile_events(self):
        """Four CUDA events (created once): before the uploads, before the launch, after it, after
        the downloads. A CUDA graph replays copies and launch together: no split then."""
        if self._events is None:
            from ..cuda.driver import pycuda_driver

            cuda = pycuda_driver()
            self._events = [cuda.Event() for _ in range(4)]
        return self._events

    def _run_graph(self, feeds: dict[str, np.ndarray], shapes_changed: bool) -> None:
        """Copy-in + execute replayed from a CUDA graph; captured again when shapes change."""
        from ..cuda.graph import CudaGraph, GraphCaptureFailed, clear_runtime_error

        if self._graph is None or shapes_changed:
            if self._graph is not None:
                self._graph.free()
                self._graph = None
            self._enqueue(feeds)  # TensorRT needs one plain run before capture
            self.stream.synchronize()
            try:
                self._graph = CudaGraph.capture(self.stream.handle, lambda: self._enqueue(feeds))
            except GraphCaptureFailed as exc:
                self._graph_failed = str(exc)
                # the failed enqueue left the CUDA runtime's last error set; trtexec clears it
                # (cudaGetLastError) so the next TensorRT call does not report it as its own
                stale = clear_runtime_error()
                log.warning(
                    "CUDA graph capture failed, running without graphs: %s%s",
                    exc,
                    f" (cleared the CUDA runtime's pending error {stale})" if stale else "",
                )
                return  # this call's work ran in the plain run before the capture
        else:
            for t in self.io:  # the graph replays copies from the pinned buffers: refresh them
                if t.is_input:
                    np.copyto(t.buffers.host_view(feeds[t.name].shape), feeds[t.name], casting="no")
        self._graph.launch(self.stream.handle)

    @property
    def graph_status(self) -> str:
        if not self.use_graph:
            return "off"
        return (
            f"failed: {self._graph_failed}"
            if self._graph_failed
            else ("captured" if self._graph else "pending")
        )

    def close(self) -> None:
        if getattr(self, "cuda_engine", None) is None:
            return
        with self.ctx.active():
            self._free()
            self.context = None
            self.cuda_engine = None
            self.runtime = None

    def _free(self) -> None:
        """Every CUDA object of this backend, freed now on this thread with the context current
        (inside ``ctx.active()``): left to the garbage collector on another thread, PyCUDA can
        only warn "out-of-thread context could not be cleaned up" and leak them."""
        if self._graph is not None:
            self._graph.free()
            self._graph = None
        for t in self.io:
            if t.buffers is not None:
                t.buffers.free()
                t.buffers = None
        self._events = None  # dropped here: their destructors run with the context current
        if getattr(self, "stream", None) is not None:
            self.stream.free()
