"""TensorRT plans as files: each plan's record (``PlanKey``, its cache key and sidecar), which plan
of a bundle runs here (``select_plan``), and what TensorRT's refusal to load one means
(``explain_deserialize_failure``), as pure functions tested without TensorRT. Split from
:mod:`tensorrt_compat`, which keeps what differs between TensorRT versions.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..errors import ModelError
from ..precision import AUTO_ORDER
from ..regular import NotRegular, read_regular
from .tensorrt_compat import parse_version


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
        return cls.inspect(engine_path)[0]

    @classmethod
    def inspect(cls, engine_path: Path) -> tuple[PlanKey | None, str | None]:
        """(the record in a plan's sidecar, None) or (None, why there is none: "no sidecar",
        "its sidecar is not a regular file (a FIFO)", "its sidecar is not edgert's record")."""
        data, why = read_sidecar(engine_path)
        if data is None:
            return None, why
        key = cls._of(data)
        return (key, None) if key is not None else (None, "its sidecar is not edgert's record")

    @classmethod
    def _of(cls, data) -> PlanKey | None:
        try:
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
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
            return None


MAX_SIDECAR_BYTES = 1 << 20  # a sidecar is about 1 KB
# a plan is read whole into memory to deserialise it; the largest edge plans are a few hundred MB
MAX_PLAN_BYTES = 16 << 30


def read_sidecar(engine_path: Path) -> tuple[dict | None, str | None]:
    """(the JSON object of a plan's ``<file>.json`` sidecar, None), or (None, why not). Only a
    regular file within :data:`MAX_SIDECAR_BYTES` is read: a FIFO there hung plan selection for
    ever, and a link to /dev/zero filled memory (round 6, G14)."""
    sidecar = Path(engine_path).with_suffix(".json")
    if not os.path.lexists(sidecar):
        return None, "no sidecar"
    try:
        data = json.loads(read_regular(sidecar, MAX_SIDECAR_BYTES).decode("utf-8"))
    except NotRegular as exc:
        return None, f"its sidecar {exc}"
    except OSError as exc:
        return None, f"its sidecar cannot be read ({exc.strerror})"
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, "its sidecar is not JSON"
    if not isinstance(data, dict):
        return None, "its sidecar is not edgert's record"
    return data, None


def read_plan(plan: Path) -> bytes:
    """A plan file's bytes: only a regular file (where a link leads) within
    :data:`MAX_PLAN_BYTES`; ModelError for anything else (a FIFO would block the load for ever,
    a device never end)."""
    try:
        return read_regular(plan, MAX_PLAN_BYTES)
    except NotRegular as exc:
        raise ModelError(f"{plan} {exc}: not a TensorRT plan") from None
    except OSError as exc:
        raise ModelError(f"cannot read {plan}: {exc.strerror}") from exc


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
# collected from users' reports; tests/runtime/backends/test_tensorrt_backend_api.py holds each
# with its source): the first pattern found decides the kind and the sentence.
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
    # the lean runtime meets a plan that was not built version-compatible
    if "Unexpected call to stub" in text:
        return "version", (
            f"{path} needs TensorRT's full runtime (this is the lean runtime, which loads only "
            f"plans built version-compatible); {rebuild}"
        )
    version = _another_version(text)
    if version is not None:
        return "version", f"{path} was built by another TensorRT version{version}; {rebuild}"
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


def _another_version(text: str) -> str | None:
    """When TensorRT's messages say the plan comes from another TensorRT: what they tell of
    which (" (built by TensorRT X, this is Y)", or "" when they name none); else None."""
    m, tags = re.search(_GOT, text), re.search(_TAGS, text)
    said = re.search(
        r"not compatible with this version of TensorRT|Version tag does not match|"
        r"incompatible serialization version",
        text,
    )
    if not (m or tags or said):
        return None
    if "safeVersionRead" in text:  # the plan is for TensorRT's safety runtime
        return " (a plan for TensorRT's safety runtime)"
    if m:
        return f" (built by TensorRT {m.group(2)}, this is {m.group(1)})"
    if "incompatible serialization version" in text:  # 10.x's magic-tag check says no more
        return " (or a plan for the safety runtime, or no plan at all)"
    if tags:
        return f" (its serialization version {tags.group(2)}, this TensorRT reads {tags.group(1)})"
    return ""


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


def foreign_device_warning(messages: Iterable[str]) -> str | None:
    """TensorRT's warning that a plan was built on another model of device (same name and
    compute capability: Jetson modules of one family), or None."""
    return next((m for m in messages if "different models of devices" in m), None)


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
