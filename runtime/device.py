"""What this machine offers: CUDA devices (through the driver API with ctypes, no PyCUDA or torch
needed), TensorRT, ONNX Runtime providers, and Jetson facts (L4T release, board model).

Every probe returns either facts or the reason they are absent; none raises.
"""

from __future__ import annotations

import ctypes
import importlib
import platform
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# CUdevice_attribute values from cuda.h
_ATTR_CC_MAJOR = 75
_ATTR_CC_MINOR = 76
_ATTR_INTEGRATED = 18
_ATTR_CAN_MAP_HOST_MEMORY = 19
_ATTR_MULTIPROCESSOR_COUNT = 16


@dataclass(frozen=True)
class CudaDevice:
    index: int
    name: str
    compute_capability: tuple[int, int]
    total_memory: int
    integrated: bool
    can_map_host_memory: bool
    multiprocessors: int
    pci_bus_id: str | None = None  # "0000:01:00.0": how NVML and the CUDA index are matched

    @property
    def sm(self) -> str:
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    @property
    def cc(self) -> str:
        """The compute capability as TensorRT and the plan cache write it: "8.7"."""
        return cc_string(self.compute_capability)


def cc_string(compute_capability: tuple[int, int]) -> str:
    """(8, 7) -> "8.7": the one spelling of a compute capability."""
    return f"{compute_capability[0]}.{compute_capability[1]}"


@dataclass(frozen=True)
class CudaProbe:
    devices: tuple[CudaDevice, ...]
    driver_version: str | None
    reason: str | None  # why there are no devices

    @property
    def available(self) -> bool:
        return bool(self.devices)


def _load_libcuda():
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@lru_cache(maxsize=None)
def probe_cuda() -> CudaProbe:
    """Enumerate CUDA devices with the driver API; explain why there are none."""
    lib = _load_libcuda()
    if lib is None:
        return CudaProbe((), None, "no CUDA driver (libcuda.so.1 not found)")
    rc = lib.cuInit(0)
    if rc != 0:
        return CudaProbe(
            (), None, f"the CUDA driver failed to initialise (CUresult {rc}: {_cu_error(lib, rc)})"
        )
    version = ctypes.c_int()
    driver = None
    if lib.cuDriverGetVersion(ctypes.byref(version)) == 0:
        driver = f"{version.value // 1000}.{version.value % 1000 // 10}"
    count = ctypes.c_int()
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0 or count.value == 0:
        return CudaProbe((), driver, "the CUDA driver reports no devices")
    devices = []
    for i in range(count.value):
        dev = ctypes.c_int()
        if lib.cuDeviceGet(ctypes.byref(dev), i) != 0:
            continue
        name = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(name, 256, dev)
        mem = ctypes.c_size_t()
        lib.cuDeviceTotalMem_v2(ctypes.byref(mem), dev)

        def attr(a: int, dev=dev) -> int:
            val = ctypes.c_int()
            return val.value if lib.cuDeviceGetAttribute(ctypes.byref(val), a, dev) == 0 else 0

        bus = ctypes.create_string_buffer(64)
        bus_id = bus.value.decode() if lib.cuDeviceGetPCIBusId(bus, 64, dev) == 0 else None
        devices.append(
            CudaDevice(
                index=i,
                name=name.value.decode(errors="replace"),
                compute_capability=(attr(_ATTR_CC_MAJOR), attr(_ATTR_CC_MINOR)),
                total_memory=mem.value,
                integrated=bool(attr(_ATTR_INTEGRATED)),
                can_map_host_memory=bool(attr(_ATTR_CAN_MAP_HOST_MEMORY)),
                multiprocessors=attr(_ATTR_MULTIPROCESSOR_COUNT),
                pci_bus_id=bus_id or None,
            )
        )
    return CudaProbe(tuple(devices), driver, None if devices else "no CUDA device could be queried")


def _cu_error(lib, rc: int) -> str:
    msg = ctypes.c_char_p()
    try:
        if lib.cuGetErrorString(rc, ctypes.byref(msg)) == 0 and msg.value:
            return msg.value.decode()
    except AttributeError:
        pass
    return "unknown error"


def module_version(name: str) -> tuple[str | None, str | None]:
    """(version, None) when importable, else (None, reason)."""
    try:
        mod = importlib.import_module(name)
    except ImportError as exc:
        return None, f"not installed ({exc})"
    except Exception as exc:  # noqa: BLE001 - e.g. a library failing to load its shared objects
        return None, f"fails to import: {type(exc).__name__}: {exc}"
    return str(getattr(mod, "__version__", "unknown")), None


def onnxruntime_providers() -> list[str]:
    try:
        import onnxruntime

        return list(onnxruntime.get_available_providers())
    except Exception:  # noqa: BLE001
        return []


def jetson_info(root: str | Path = "/") -> dict[str, str] | None:
    """L4T release and board model on a Jetson; None elsewhere."""
    root = Path(root)
    release = root / "etc/nv_tegra_release"
    if not release.is_file():
        return None
    info = {"l4t": release.read_text(errors="replace").splitlines()[0].strip()}
    model = root / "proc/device-tree/model"
    if model.is_file():
        info["model"] = model.read_bytes().rstrip(b"\0").decode(errors="replace")
    return info


def jetson_module(root: str | Path = "/") -> str | None:
    """The Jetson module this is, from the device tree's ``compatible`` list (NUL-separated,
    most specific first): the carrier+module entry, then the module's own part number, then the
    SoC, e.g. ``nvidia,p3737-0000+p3701-0000``, ``nvidia,p3701-0000``, ``nvidia,tegra234``
    (AGX Orin developer kit) or ``nvidia,p3768-0000+p3767-0000``, ``nvidia,p3767-0000``, ...
    (Orin NX). The module's own entry (no "+", not the SoC) is returned: the carrier does not
    change what a TensorRT plan runs on, the module (its SM count, its clocks) does. None off a
    Jetson or without a device tree."""
    path = Path(root) / "proc/device-tree/compatible"
    try:
        entries = [e.decode(errors="replace") for e in path.read_bytes().split(b"\0") if e]
    except OSError:
        return None
    modules = [e for e in entries if "+" not in e and not e.split(",")[-1].startswith("tegra")]
    return modules[0] if modules else None


def edgert_version() -> str:
    """The installed edgert's version."""
    from importlib import metadata

    try:
        return metadata.version("edgert")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def machine_summary() -> dict:
    """Everything ``edgert info`` shows, as plain data."""
    cuda = probe_cuda()
    facts: dict = {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cuda": {
            "driver": cuda.driver_version,
            "devices": [
                {
                    "index": d.index,
                    "name": d.name,
                    "compute_capability": d.cc,
                    "memory_gib": round(d.total_memory / 2**30, 1),
                    "integrated": d.integrated,
                }
                for d in cuda.devices
            ],
            "reason": cuda.reason,
        },
        "onnxruntime_providers": onnxruntime_providers(),
        "jetson": jetson_info(),
    }
    for name in ("numpy", "onnx", "onnxruntime", "cv2", "torch", "tensorrt", "pycuda", "pynvml"):
        ver, reason = module_version(name)
        facts[name] = {"version": ver, "reason": reason}
    return facts
