"""TensorRT version and plan-compatibility decisions, as pure functions (tested without TensorRT).

Every difference between TensorRT 8.5, 10.x and 11.x that edgert cares about is decided here, once,
from the version tuple, so no ``if trt10:`` branches are scattered through the code.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..errors import ModelError
from ..precision import AUTO_ORDER, PRECISIONS, QDQ, REDUCED, model_file

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


# -- plans ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanKey:
    """One plan's record: everything it depends on, hashed into its cache key (``digest``, in its
    file name) and written beside it as the sidecar ``<file>.json``, which :meth:`read` reads
    back. Another GPU or TensorRT version simply has another key, so a plan is never loaded
    where it was not built for."""

    precision: str
    tensorrt: str
    device_name: str
    compute_capability: str
    onnx_sha256: str | None = None  # the model file the plan was built from
    calibration_sha256: str | None = None
    dla_core: int | None = None
    shapes: dict = field(default_factory=dict)  # input -> [min, opt, max]
    builder: dict = field(default_factory=dict)  # workspace, optimisation level, ...
    # what tells Jetson modules of one family apart: they report one CUDA name and compute
    # capability ("Orin" 8.7 on AGX Orin, Orin NX and Orin Nano) but not one module or SM count
    module: str | None = None  # the device tree's module, e.g. "nvidia,p3701-0000"
    multiprocessors: int | None = None

    @property
    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    @property
    def filename(self) -> str:
        return f"{self.precision}-{self.digest}.engine"

    def sidecar(self, size: int, extra: dict | None = None) -> dict:
        """The ``<file>.json`` written beside the plan (``extra``: what the build adds)."""
        return {
            "key": self.digest,
            "precision": self.precision,
            "tensorrt": self.tensorrt,
            "device": {
                "name": self.device_name,
                "compute_capability": self.compute_capability,
                "module": self.module,
                "multiprocessors": self.multiprocessors,
            },
            "dla_core": self.dla_core,
            "onnx_sha256": self.onnx_sha256,
            "calibration_sha256": self.calibration_sha256,
            "shapes": self.shapes,
            "builder": self.builder,
            "bytes": size,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **(extra or {}),
        }

    @classmethod
    def read(cls, engine_path: Path) -> PlanKey | None:
        """The record in a plan's sidecar, or None when it is missing or unreadable (a plan of
        unknown origin: never selected)."""
        sidecar = Path(engine_path).with_suffix(".json")
        try:
            data = json.loads(sidecar.read_text(encoding="utf-8"))
            dla = data.get("dla_core")
            sms = data["device"].get("multiprocessors")
            return cls(
                precision=str(data["precision"]),
                tensorrt=str(data["tensorrt"]),
                device_name=str(data["device"]["name"]),
                compute_capability=str(data["device"]["compute_capability"]),
                onnx_sha256=_text_or_none(data.get("onnx_sha256")),
                calibration_sha256=_text_or_none(data.get("calibration_sha256")),
                dla_core=None if dla is None else int(dla),
                shapes=dict(data.get("shapes") or {}),
                builder=dict(data.get("builder") or {}),
                module=_text_or_none(data["device"].get("module")),
                multiprocessors=None if sms is None else int(sms),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _text_or_none(value) -> str | None:
    return None if value is None else str(value)


def plan_mismatch(
    info: PlanKey,
    tensorrt: str,
    device_name: str,
    compute_capability: str,
    module: str | None = None,
    multiprocessors: int | None = None,
) -> str | None:
    """Why a plan cannot run here (None when it can). Plans are tied to the exact TensorRT
    version and to the GPU they were built on: its name and compute capability, and where both
    sides know them, the Jetson module and the SM count (an Orin Nano plan on an AGX Orin is
    "Orin" 8.7 on both; TensorRT only warns that it "is likely to affect performance or even
    cause errors")."""
    if parse_version(info.tensorrt) != parse_version(tensorrt):
        return f"it was built by TensorRT {info.tensorrt} and this is TensorRT {tensorrt}"
    if info.compute_capability != compute_capability or info.device_name != device_name:
        return (
            f"it was built for {info.device_name} (compute {info.compute_capability}) and this GPU is "
            f"{device_name} (compute {compute_capability})"
        )
    if info.module and module and info.module != module:
        return f"it was built on the module {info.module} and this is {module}"
    if info.multiprocessors and multiprocessors and info.multiprocessors != multiprocessors:
        return (
            f"it was built for a {device_name} with {info.multiprocessors} SMs and this one has "
            f"{multiprocessors}"
        )
    return None


def select_plan(
    engines_dir: Path,
    precision: str,
    tensorrt: str,
    device_name: str,
    compute_capability: str,
    onnx_sha256: dict[str, str] | None = None,
    *,
    dla_onnx_sha256: dict[str, str] | None = None,
    dla: int | None = None,
    module: str | None = None,
    multiprocessors: int | None = None,
) -> tuple[Path | None, str]:
    """Pick the plan in a bundle's engines/ that runs here: (path, why) or (None, why not).

    ``onnx_sha256`` / ``dla_onnx_sha256``: precision -> the hash of the model a GPU / DLA plan
    of it is built from (:func:`plan_source_model`). ``dla``: None prefers a GPU plan and takes
    a DLA plan where there is no GPU plan of that precision; N takes only DLA core N's plans.
    Within one kind the choice never depends on file names."""
    if not engines_dir.is_dir():
        return None, "the bundle has no engines/ folder"
    wanted = AUTO_ORDER if precision == "auto" else (precision,)
    rejected = []
    known = [(e, PlanKey.read(e)) for e in sorted(engines_dir.glob("*.engine"))]
    known = [(e, i) for e, i in known if i is not None]
    if dla is None:  # a GPU plan first; a DLA plan where the bundle has none for the GPU
        plans = [p for p in known if p[1].dla_core is None]
        plans += [p for p in known if p[1].dla_core is not None]
    else:
        plans = [p for p in known if p[1].dla_core == dla]
    for prec in wanted:
        for engine, info in plans:
            if info.precision != prec:
                continue
            why = plan_mismatch(
                info, tensorrt, device_name, compute_capability, module, multiprocessors
            )
            hashes = dla_onnx_sha256 if info.dla_core is not None else onnx_sha256
            expected_hash = (hashes or {}).get(prec)
            if (
                why is None
                and expected_hash
                and info.onnx_sha256
                and info.onnx_sha256 != expected_hash
            ):
                why = "it was built from an older version of the model"
            if why is None:
                where = info.device_name + (
                    f", DLA core {info.dla_core}" if info.dla_core is not None else ""
                )
                return engine, f"plan {engine.name} ({prec}, TensorRT {info.tensorrt}, {where})"
            rejected.append(f"{engine.name}: {why}")
    if rejected:
        return None, "no plan for this GPU and TensorRT (" + "; ".join(rejected[:3]) + ")"
    kind = "" if precision == "auto" else precision + " "
    on = f" for DLA core {dla}" if dla is not None else ""
    return None, f"the bundle has no {kind}TensorRT plan{on} yet"


# What TensorRT logs when deserialize_cuda_engine returns None (its wording in 8.5, 8.6 and 10.x,
# collected from users' reports; tests/runtime/test_tensorrt_backend_api.py holds each with its
# source): the first pattern found decides the kind and the sentence.
_GOT = r"expecting library version (\d[\d.]*\d) got (\d[\d.]*\d)"
_TAGS = r"Current Version: (\d+), Serialized Engine Version: (\d+)"
_PLUGIN = r"(?:could not find plugin:?|Cannot find plugin:)\s*([\w.-]+),? version:? ?([\w.]*)"


def explain_deserialize_failure(messages: list[str], path: Path) -> tuple[str, str]:
    """Classify TensorRT's logged errors after deserialize_cuda_engine returned None.

    Returns (kind, sentence) with kind in {"version", "device", "plugin", "memory", "corrupt"}:
    the first two mean the plan must be rebuilt here, "plugin" that this process lacks a plugin
    the plan uses, "memory" that the GPU had no room, "corrupt" that it is not a readable plan.
    """
    text = " ".join(messages)
    rebuild = (
        f"rebuild it on this device: edgert build BUNDLE --precision P (it replaces {path.name})"
    )
    m = re.search(r"expecting compute (\d+\.\d+) got compute (\d+\.\d+)", text)
    if m or "incompatible device" in text:
        detail = f" (built for compute {m.group(2)}, this GPU is compute {m.group(1)})" if m else ""
        return "device", f"{path} was built for another GPU{detail}; {rebuild}"
    if "Platform specific tag mismatch" in text:
        return "device", f"{path} was built on another platform (OS or CPU); {rebuild}"
    if (
        "Unexpected call to stub" in text
    ):  # the lean runtime meets a plan that is not version-compatible
        return "version", (
            f"{path} needs TensorRT's full runtime (this is the lean runtime, which loads only "
            f"plans built version-compatible); {rebuild}"
        )
    m, tags = re.search(_GOT, text), re.search(_TAGS, text)
    if (
        m
        or tags
        or re.search(
            r"not compatible with this version of TensorRT|Version tag does not match|incompatible serialization version",
            text,
        )
    ):
        detail = f" (built by TensorRT {m.group(2)}, this is {m.group(1)})" if m else ""
        if "incompatible serialization version" in text:  # 10.x's magic-tag check says no more
            detail = " (or a plan for the safety runtime, or no plan at all)"
        if "safeVersionRead" in text:  # the plan is for TensorRT's safety runtime
            detail = " (a plan for TensorRT's safety runtime)"
        elif tags and not m:
            detail = (
                f" (its serialization version {tags.group(2)}, this TensorRT reads {tags.group(1)})"
            )
        return "version", f"{path} was built by another TensorRT version{detail}; {rebuild}"
    m = re.search(_PLUGIN, text)
    if m or "IPluginCreator not found" in text:
        name = f" {m.group(1)}" + (f" (version {m.group(2)})" if m.group(2) else "") if m else ""
        return "plugin", (
            f"{path} uses the TensorRT plugin{name or 's'} that this process has not registered: "
            "load the library that provides it before edgert (or rebuild the model without it)"
        )
    if re.search(r"out of memory|OutOfMemory", text, re.IGNORECASE):
        return (
            "memory",
            f"the GPU has no room to load {path}: free GPU memory or use a smaller plan",
        )
    if "does not match archive size" in text:
        return (
            "corrupt",
            f"{path} is truncated or damaged (its size differs from what its header says); copy it again or {rebuild}",
        )
    first = next((m for m in messages if "Engine deserialization failed" not in m), text)
    return (
        "corrupt",
        f"{path} is not a TensorRT plan TensorRT can read (corrupt or not a plan): {first[:200] or 'no detail'}",
    )


def split_plan_header(data: bytes) -> tuple[dict | None, bytes]:
    """A plan file as Ultralytics writes its ``.engine`` exports: a 4-byte little-endian length
    and that much JSON metadata (task, names, imgsz, ...) before the plan, which TensorRT alone
    refuses ("magic tag does not match"). Returns (the metadata, the plan) for such a file,
    (None, data) for any other (a TensorRT plan starts with its magic tag, never with JSON)."""
    if len(data) < 6:
        return None, data
    size = int.from_bytes(data[:4], "little")
    if not 2 <= size <= len(data) - 4 or data[4:5] != b"{":
        return None, data
    try:
        meta = json.loads(data[4 : 4 + size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None, data
    return (meta, data[4 + size :]) if isinstance(meta, dict) else (None, data)


# TensorRT's DataType members by version (python/src/infer/pyFoundationalTypes.cpp of
# release/8.5, release/10.3 and main): 8.5 has no INT64 (its ONNX parser takes int64 I/O as
# INT32); 8.6 adds FP8, 10 BF16, INT64, INT4, 10.8 FP4 and E8M0. Held to the real bindings of
# 8.6.1, 10.3, 10.13 and 11.4 by tests/runtime/test_tensorrt_real_api.py (8.6's FP8 and 10.13's
# FP4 / E8M0 were wrong here before it: 8.6 and 10.13 read as 8.5 and 10.0); FP4 is in 10.8's
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


def foreign_device_warning(messages: Iterable[str]) -> str | None:
    """TensorRT's warning that a plan was built on another model of device (same name and
    compute capability: Jetson modules of one family), or None."""
    return next((m for m in messages if "different models of devices" in m), None)


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


def runtime_dla_core(info: PlanKey | None) -> int | None:
    """The DLA core an ``IRuntime`` must be set to before deserialising a plan: the core the plan
    was built for (``IRuntime.DLA_core`` defaults to 0, so a plan built with ``--dla 1`` would
    otherwise run on core 0), or None for a GPU plan."""
    if info is None or info.dla_core is None:
        return None
    core = int(info.dla_core)
    if core < 0:
        raise ValueError(f"invalid DLA core {core} recorded for the plan")
    return core


def timing_cache_name(tensorrt: str, compute_capability: str, device_name: str) -> str:
    """The timing-cache file for one TensorRT version and GPU model: two GPUs of the same compute
    capability (an RTX 4090 and an L4, both 8.9) time tactics differently, and TensorRT refuses
    the other's cache."""
    gpu = re.sub(r"[^A-Za-z0-9]+", "-", device_name).strip("-").lower() or "gpu"
    cc = compute_capability.replace(".", "")
    return f"timing-{tensorrt}-sm{cc}-{gpu}.cache"
