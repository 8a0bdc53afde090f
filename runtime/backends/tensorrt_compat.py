"""TensorRT version and plan-compatibility decisions, as pure functions (tested without TensorRT).

Every difference between TensorRT 8.5, 10.x and 11.x that edgert cares about is decided here, once,
from the version tuple, so no ``if trt10:`` branches are scattered through the code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import ModelError
from ..precision import PRECISIONS, QDQ, REDUCED, model_file

MIN_VERSION = (8, 5)


@dataclass(frozen=True)
class TrtFeatures:
    """What a TensorRT version offers or requires."""

    version: tuple[int, ...]
    explicit_batch_flag: bool  # 8.x: networks must be created with EXPLICIT_BATCH (ignored from 10)
    weak_typing: bool  # FP16/INT8 builder flags exist (removed in 11: strongly typed only)
    strongly_typed_flag: bool  # NetworkDefinitionCreationFlag.STRONGLY_TYPED exists (10+)
    fp16_needs_fp16_onnx: bool  # 11: FP16 comes from an FP16 ONNX model, not a builder flag
    int8_builder_flag_for_qdq: bool  # 8.5/10 weakly typed Q/DQ networks need BuilderFlag.INT8
    progress_monitor: bool  # IProgressMonitor (10.0+)
    device_memory_attr: str  # ICudaEngine device memory size property
    implicit_int8_calibration: bool  # IInt8Calibrator / calibration caches (gone in 11)
    max_onnx_opset: int | None  # newest ONNX opset known to parse (8.5: 17); None: no known limit


def parse_version(text: str) -> tuple[int, ...]:
    """'10.3.0.26' -> (10, 3, 0, 26); tolerates suffixes such as '8.5.2.2+cuda11.4'."""
    nums = re.findall(r"\d+", text.split("+")[0])
    if not nums:
        raise ValueError(f"not a TensorRT version: {text!r}")
    return tuple(int(n) for n in nums)


def features(version: tuple[int, ...]) -> TrtFeatures:
    major = version[0]
    minor = version[1] if len(version) > 1 else 0
    return TrtFeatures(
        version=tuple(version),
        explicit_batch_flag=major < 10,
        weak_typing=major < 11,
        strongly_typed_flag=major >= 10,
        fp16_needs_fp16_onnx=major >= 11,
        int8_builder_flag_for_qdq=major < 11,
        progress_monitor=major >= 10,
        device_memory_attr="device_memory_size_v2"
        if (major, minor) >= (10, 1)
        else "device_memory_size",
        implicit_int8_calibration=major < 11,
        max_onnx_opset=17 if major < 10 else None,
    )


def opset_note(opset: int | None) -> str | None:
    """What an ONNX opset means for the TensorRT releases JetPack ships (None: every one parses
    it). Ultralytics 8.4 exports opset 22 by default; JetPack 5's TensorRT 8.5 parses 17."""
    limit = features(MIN_VERSION).max_onnx_opset
    if opset is None or limit is None or opset <= limit:
        return None
    return (
        f"opset {opset}: TensorRT 10 (JetPack 6 and 7) parses it, TensorRT 8.5 (JetPack 5) only "
        f"up to {limit}: for a JetPack 5 device export it again at opset {limit} (Ultralytics: "
        f"yolo export model=best.pt format=onnx opset={limit}; PyTorch: edgert export --opset "
        f"{limit})"
    )


def unsupported_reason(version: tuple[int, ...]) -> str | None:
    """Why edgert cannot use this TensorRT (None when it can)."""
    if tuple(version[:2]) < MIN_VERSION:
        found = ".".join(map(str, version))
        return f"TensorRT {found} is older than 8.5, the first with the name-based tensor API edgert uses"
    return None


def network_flag_names(version: tuple[int, ...], strongly_typed: bool) -> list[str]:
    """NetworkDefinitionCreationFlag names to set for create_network()."""
    f = features(version)
    flags = []
    if f.explicit_batch_flag:
        flags.append("EXPLICIT_BATCH")
    if f.strongly_typed_flag and strongly_typed and f.weak_typing:
        flags.append("STRONGLY_TYPED")  # in 11 strong typing is the only mode and the default
    return flags


def cleared_builder_flag_names(version: tuple[int, ...], precision: str) -> list[str]:
    """BuilderFlag names to clear. TF32 is on by default in every TensorRT (BuilderFlag.TF32:
    "Enabled by default"), so an "fp32" plan on Ampere and later (Orin sm_87, Thor) would run its
    matrix products on TF32 tensor cores with 10-bit mantissas; edgert's fp32 is FP32, the
    reference the other precisions are gated against (Polygraphy clears it unless asked too)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}")
    return ["TF32"] if precision == "fp32" else []


def builder_flag_names(version: tuple[int, ...], precision: str, qdq_model: bool) -> list[str]:
    """BuilderFlag names for a precision. TensorRT 11 takes none: types come from the model."""
    f = features(version)
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}")
    if not f.weak_typing:
        return []
    flags = []
    if precision in REDUCED:
        flags.append("FP16")  # quantized engines keep unquantized layers in FP16 where faster
    if precision == "int8" and (qdq_model and f.int8_builder_flag_for_qdq):
        flags.append("INT8")
    if precision == "fp8":
        flags.append("FP8")  # weakly typed FP8 Q/DQ networks (10.x)
    return flags


FP8_MIN_VERSION = (10, 0)
FP8_MIN_COMPUTE = (8, 9)


def fp8_unsupported_reason(version: tuple[int, ...], compute: tuple[int, int]) -> str | None:
    """Why an FP8 plan cannot be built with this TensorRT on this GPU (None when it can): FP8
    tensor cores start at compute capability 8.9 (Ada; Hopper 9.0, Blackwell 10.x/12.x, Jetson
    Thor 11.0; Jetson Orin is 8.7), and edgert builds FP8 Q/DQ from TensorRT 10."""
    if tuple(version[:2]) < FP8_MIN_VERSION:
        found = ".".join(map(str, version))
        return f"TensorRT {found} does not build FP8 Q/DQ ONNX models (TensorRT 10 or later does)"
    if tuple(compute) < FP8_MIN_COMPUTE:
        cc = ".".join(map(str, compute))
        return (
            f"this GPU (compute capability {cc}) has no FP8 tensor cores; FP8 needs 8.9 or later "
            "(Ada, Hopper, Blackwell, Jetson Thor); use --precision int8 or fp16"
        )
    return None


def calibration_cache_tag(version: tuple[int, ...]) -> int:
    """NV_TENSORRT_VERSION as calibration caches' header writes it: 8.5.2 -> 8502, 10.3.0 -> 100300."""
    major, minor, patch = (*version, 0, 0)[:3]
    return major * 1000 + minor * 100 + patch if major < 10 else major * 10000 + minor * 100 + patch


INT8_FP16_ONNX = model_file("int8", "fp16")  # INT8 Q/DQ, everything else FP16 (TensorRT 11)
FP8_FP16_ONNX = model_file("fp8", "fp16")  # FP8 Q/DQ, everything else FP16 (TensorRT 11)
FP16_VARIANTS = {p: model_file(p, "fp16") for p in QDQ}


def onnx_for_precision(
    version: tuple[int, ...], precision: str, available: Iterable[str] | None = None
) -> str:
    """Which bundle model a build of ``precision`` starts from. ``available``: the bundle's model
    files; an INT8 or FP8 build on TensorRT 11 prefers its FP16 variant (:data:`FP16_VARIANTS`: a
    strongly typed network runs whatever is not INT8/FP8 in the model's own type: FP16 there, FP32
    in model.int8.onnx / model.fp8.onnx) and takes the plain Q/DQ model where the bundle has no
    variant (older bundles)."""
    variant = FP16_VARIANTS.get(precision)
    have = available is None or variant in set(available)
    if variant and features(version).fp16_needs_fp16_onnx and have:
        return variant
    if precision in QDQ:
        return model_file(precision)
    if precision == "fp16" and features(version).fp16_needs_fp16_onnx:
        return model_file("fp16")
    return model_file("fp32")


def plan_source_model(
    version: tuple[int, ...], precision: str, dla: bool, available: Iterable[str] | None = None
) -> str:
    """The bundle model a plan of ``precision`` is built from, on the GPU or on DLA: a DLA INT8
    plan on TensorRT < 11 is built from the FP32 ``model.onnx`` with a calibration cache (DLA
    takes no Q/DQ there), everything else as :func:`onnx_for_precision` says. The build and the
    plan's selection both ask here, so a plan's recorded model is the one selection expects."""
    if dla and precision == "int8" and features(version).implicit_int8_calibration:
        return model_file("fp32")
    return onnx_for_precision(version, precision, available)


def dla_shapes(shapes: dict) -> tuple[dict, list[str]]:
    """A DLA build's profile: DLA takes no dynamic dimensions ("the profile's min, max, and opt
    values must be equal", TensorRT's DLA restrictions), so each input's profile is pinned to
    its opt shape. Returns (shapes, the inputs that were pinned, for a warning)."""
    pinned, names = {}, []
    for name, (lo, opt, hi) in shapes.items():
        pinned[name] = [list(opt), list(opt), list(opt)]
        if list(lo) != list(opt) or list(hi) != list(opt):
            names.append(f"{name} {'x'.join(map(str, opt))}")
    return pinned, names


# TensorRT's DataType members by version (python/src/infer/pyFoundationalTypes.cpp of
# release/8.5, release/10.3 and main): 8.5 has no INT64 (its ONNX parser takes int64 I/O as
# INT32); 8.6 adds FP8, 10 BF16, INT64, INT4, 10.8 FP4 and E8M0. Held to the real bindings of
# 8.6.1, 10.3, 10.13 and 11.4 by tests/runtime/backends/test_tensorrt_real_api.py (8.6's FP8
# and 10.13's FP4 / E8M0 were wrong here before it: 8.6 and 10.13 read as 8.5 and 10.0); FP4 is in 10.8's
# release notes, E8M0 taken to come with it (MXFP8's scale type); 11 adds none (its 11.4
# bindings: the same twelve)
DATA_TYPES = {
    (8, 5): ("FLOAT", "HALF", "INT8", "INT32", "BOOL", "UINT8"),
    (8, 6): ("FLOAT", "HALF", "INT8", "INT32", "BOOL", "UINT8", "FP8"),
    (10, 0): ("FLOAT", "HALF", "INT8", "INT32", "BOOL", "UINT8", "BF16", "INT64", "FP8", "INT4"),
    (10, 8): (
        "FLOAT",
        "HALF",
        "INT8",
        "INT32",
        "BOOL",
        "UINT8",
        "BF16",
        "INT64",
        "FP8",
        "INT4",
        "FP4",
        "E8M0",
    ),
}
_NUMPY_DTYPES = {
    "FLOAT": "float32",
    "HALF": "float16",
    "INT8": "int8",
    "INT32": "int32",
    "INT64": "int64",
    "BOOL": "bool",
    "UINT8": "uint8",
}


def data_types(version: tuple[int, ...]) -> tuple[str, ...]:
    """The DataType members of this TensorRT version."""
    known = [v for v in DATA_TYPES if tuple(version[:2]) >= v]
    return DATA_TYPES[max(known)] if known else DATA_TYPES[(8, 5)]


def numpy_dtype(trt_dtype_name: str, tensor: str = "") -> str:
    """TensorRT DataType name (e.g. 'FLOAT', 'DataType.HALF') -> numpy dtype name; ModelError (one
    sentence, so ``auto`` goes on to ONNX Runtime) for the types numpy has no dtype for: BF16,
    FP8, INT4, FP4, E8M0 (a plan edgert did not build: its FP16 and Q/DQ models keep FP32 I/O)."""
    name = trt_dtype_name.rsplit(".", 1)[-1]
    try:
        return _NUMPY_DTYPES[name]
    except KeyError:
        what = f"{tensor} is" if tensor else "an input or output is"
        raise ModelError(
            f"this plan's {what} {name}, which has no numpy type edgert could feed or read; "
            "give the model FP32/FP16/integer inputs and outputs"
        ) from None


DLA_PRECISIONS = ("fp16", "int8")


def dla_refusal(precision: str, dla_core: int | None, cores: int | None = None) -> str | None:
    """Why a plan cannot be built on DLA core ``dla_core`` (None when it can, or no DLA is
    asked for): DLA runs FP16 and INT8 only, and the core must exist (``cores``: how many the
    device has, None while unknown). The one DLA check, before a build and inside it."""
    if dla_core is None:
        return None
    if dla_core < 0:
        return f"--dla {dla_core}: a DLA core is numbered from 0"
    if precision not in DLA_PRECISIONS:
        return "DLA runs FP16 or INT8 only; use --precision fp16 or int8 with --dla"
    if cores is not None and cores <= dla_core:
        return f"DLA core {dla_core} requested but this device has {cores} DLA core(s)"
    return None
