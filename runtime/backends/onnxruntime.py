"""ONNX Runtime backend: TensorRT / CUDA execution providers where present, else CPU.

Static-shape outputs are pre-allocated once and bound with I/O binding, so a call allocates
nothing but the copies it hands back.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from ..bundle import TensorSpec
from ..errors import ModelError, ShapeError, first_line
from ..precision import REDUCED, model_file
from .base import Backend, Target
from .tensorrt_compat import FP16_VARIANTS

log = logging.getLogger(__name__)

# ONNX Runtime 1.32's Q/DQ fusions reject FP8 zero points and compute Q/DQ with FP16 scales
# wrongly (measured: cosine 0.59 on MobileNetV2): such models run with the optimisations off. The
# bundle's FP8 / FP16-scaled files are known by name; any other .onnx, whatever it is called, is
# looked at (:func:`needs_unfused`, ~10 ms for MobileNetV2).
UNFUSED_MODELS = (model_file("fp8"), *FP16_VARIANTS.values())
PROVIDER_ORDER = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
_ORT_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}


def choose_providers(available: list[str], wanted: list[str] | None = None) -> list[str]:
    """Providers in edgert's preference order, restricted to what this onnxruntime offers."""
    order = wanted or list(PROVIDER_ORDER)
    chosen = [p for p in order if p in available]
    if "CPUExecutionProvider" in available and "CPUExecutionProvider" not in chosen:
        chosen.append("CPUExecutionProvider")
    return chosen


def fastest_on_cpu(speeds: dict, recorded: set[str]) -> tuple[str, str]:
    """(precision, why) for precision "auto" on ONNX Runtime CPU: the fastest of FP32 and the
    gated models the bundle records, by the batch-1 latencies measured when they were built."""
    times: dict[str, float] = {}
    for precision, measured in speeds.items():
        if not isinstance(measured, dict):
            continue
        if isinstance(measured.get("fp32"), (int, float)):
            times["fp32"] = min(times.get("fp32", float("inf")), float(measured["fp32"]))
        ms = measured.get(precision)
        if (
            precision != "fp32"
            and model_file(precision) in recorded
            and isinstance(ms, (int, float))
        ):
            times[precision] = float(ms)
    if len(times) < 2:
        return "fp32", "FP32 model"
    best = min(times, key=lambda p: times[p])
    table = ", ".join(f"{p} {ms:.2f} ms" for p, ms in sorted(times.items(), key=lambda kv: kv[1]))
    name = "FP32 model" if best == "fp32" else f"{best.upper()} model ({model_file(best)})"
    return best, f"{name}: the fastest gated model on ONNX Runtime CPU when built ({table})"


def _spec(arg) -> TensorSpec:
    dims = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape)
    return TensorSpec(arg.name, _ORT_TYPES.get(arg.type, arg.type), dims)


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    OPTIONS = frozenset({"providers", "intra_op_threads", "optimization", "spin"})

    @classmethod
    def availability(cls) -> str | None:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            return "onnxruntime is not installed: pip install onnxruntime (or onnxruntime-gpu)"
        return None

    @classmethod
    def select(cls, target: Target, precision: str, device: int) -> tuple[Path | None, str]:
        if target.onnx is None:
            return None, "a TensorRT plan (.engine) runs only on the TensorRT backend"
        if precision == "auto" and target.bundle_dir and target.cpu_speeds:
            import onnxruntime as ort

            if choose_providers(ort.get_available_providers()) == ["CPUExecutionProvider"]:
                precision, why = fastest_on_cpu(target.cpu_speeds, set(target.onnx_hashes or {}))
                if precision != "fp32":
                    return target.onnx.with_name(model_file(precision)), why
                return target.onnx, why
        if precision in REDUCED:
            variant = target.onnx.with_name(model_file(precision)) if target.bundle_dir else None
            if variant is None or not variant.is_file():
                return None, (
                    f"the bundle has no {precision.upper()} model; make one with: "
                    f"edgert build {target.path} --precision {precision}"
                )
            return variant, f"{precision.upper()} model ({variant.name})"
        return target.onnx, "FP32 model"

    @classmethod
    def load(
        cls,
        model: Path,
        *,
        device: int = 0,
        providers: list[str] | None = None,
        intra_op_threads: int | None = None,
        optimization: str = "all",
        spin: bool = True,
        **_: object,
    ) -> OnnxRuntimeBackend:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        levels = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }
        unfused = model.name in UNFUSED_MODELS or needs_unfused(model)
        opts.graph_optimization_level = levels["disable" if unfused else optimization]
        threads = (
            intra_op_threads
            if intra_op_threads is not None
            else int(os.environ.get("EDGERT_ORT_THREADS", 0))
        )
        opts.intra_op_num_threads = threads
        opts.log_severity_level = 3
        if not spin:  # worker threads sleep between runs instead of spinning (a power cap)
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        chosen = choose_providers(ort.get_available_providers(), providers)
        provider_opts = [
            {"device_id": device} if p != "CPUExecutionProvider" else {} for p in chosen
        ]
        try:
            session = ort.InferenceSession(
                str(model), sess_options=opts, providers=chosen, provider_options=provider_opts
            )
        except Exception as exc:
            raise ModelError(f"ONNX Runtime cannot load {model}: {first_line(exc)}") from exc
        return cls(session)

    def __init__(self, session) -> None:
        self.session = session
        self.inputs = tuple(_spec(i) for i in session.get_inputs())
        self.outputs = tuple(_spec(o) for o in session.get_outputs())
        self.providers = list(session.get_providers())
        self.description = "providers " + ", ".join(self.providers)
        # the first provider runs what it can; only CPU's leaves every node to the CPU
        self.on_cpu = self.providers[0] == "CPUExecutionProvider"
        self._binding = session.io_binding()
        self._static_out = {
            o.name: np.empty(o.shape, dtype=o.dtype) for o in self.outputs if not o.dynamic
        }
        # CPU with static outputs: bind the pre-allocated output buffers once; each call only binds inputs
        self._bound_outputs = self.providers == ["CPUExecutionProvider"] and len(
            self._static_out
        ) == len(self.outputs)
        if self._bound_outputs:
            for name, buf in self._static_out.items():
                self._binding.bind_output(name, "cpu", 0, buf.dtype, buf.shape, buf.ctypes.data)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._bound_outputs:
            for name, array in feeds.items():
                self._binding.bind_cpu_input(name, array)
            self._rejecting(lambda: self.session.run_with_iobinding(self._binding))
            return {name: buf.copy() for name, buf in self._static_out.items()}
        values = self._rejecting(lambda: self.session.run(None, feeds))
        return {o.name: v for o, v in zip(self.outputs, values)}

    @staticmethod
    def _rejecting(call):
        try:
            return call()
        except Exception as exc:
            raise ShapeError(f"ONNX Runtime rejected the inputs: {first_line(exc)}") from exc

    def close(self) -> None:
        self.session = None
        self._binding = None


def needs_unfused(model) -> bool:
    """Whether ONNX Runtime must run ``model`` (a path or an onnx ModelProto) with its graph
    optimisations off: a QuantizeLinear / DequantizeLinear with an FP8 zero point or an FP16 /
    BF16 scale. An unreadable file is left to the session to report."""
    import onnx
    from onnx import TensorProto

    if not isinstance(model, onnx.ModelProto):
        try:
            model = onnx.load(str(model), load_external_data=False)
        except Exception:  # noqa: BLE001 - the session says what is wrong with the file
            return False
    fp8 = {
        getattr(TensorProto, n)
        for n in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ")
        if hasattr(TensorProto, n)
    }
    half = {TensorProto.FLOAT16, TensorProto.BFLOAT16}
    types = {i.name: i.data_type for i in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 1:
            if types.get(n.input[1]) in half:
                return True
            if len(n.input) > 2 and types.get(n.input[2]) in fp8:
                return True
    return False
