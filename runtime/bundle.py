"""The model bundle: a folder holding ``manifest.json``, ``model.onnx`` and ``engines/``.

See ``docs/bundle.md`` for the format. The manifest is the single source of truth for I/O specs,
preprocessing and labels; sections owned by other stages (parity, calibration, accuracy) are kept
as plain JSON in :attr:`Manifest.raw` and round-trip untouched.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from . import atomic, regular
from .errors import BundleError
from .images.preprocess import Preprocessing
from .manifest_checks import (  # noqa: F401 - also edgert.runtime.bundle's names
    CONTROL,
    MAX_BATCH_LIMIT,
    MAX_LABELS,
    Head,
    check_sections,
    safe_name,
    tensor_name,
    valid_labels,
)
from .regular import NotRegular, read_regular

FORMAT = "edgert-bundle/1"
MANIFEST = "manifest.json"
MODEL = "model.onnx"
MAX_MANIFEST_BYTES = 64 << 20  # 50,000 labels make a manifest of about 1.2 MB
MAX_DIM = 2**31 - 1  # TensorRT's dimensions are 32-bit
ENGINES = "engines"
TASKS = (
    "classify",
    "detect",
    "pose",
    "segment-instances",
    "obb",
    "segment",
    "embed",
    "faces",
    "generic",
)
DTYPES = ("float32", "float16", "float64", "int8", "uint8", "int16", "int32", "int64", "bool")


# A bundle comes from someone else's machine: every name that becomes a path or a line must be tame.
@dataclass(frozen=True)
class TensorSpec:
    """One input or output: name, numpy dtype name, shape with -1 for dynamic axes."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def dynamic(self) -> bool:
        return any(d < 0 for d in self.shape)

    def to_dict(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, data: dict, where: str = "manifest") -> TensorSpec:
        if not isinstance(data, dict):
            raise BundleError(f"{where}: each input and output must be an object")
        name = tensor_name(data.get("name"), where)
        dtype = data.get("dtype")
        if dtype not in DTYPES:
            raise BundleError(f"{where}: tensor {name!r} has unknown dtype {dtype!r}")
        shape = data.get("shape")
        if (
            not isinstance(shape, list)
            or len(shape) > 8
            or not all(type(d) is int and -1 <= d <= MAX_DIM and d != 0 for d in shape)
        ):
            raise BundleError(
                f"{where}: tensor {name!r} has an invalid shape {str(shape)[:60]} (a list of at "
                "most 8 positive integers, -1 for dynamic axes)"
            )
        return cls(name, dtype, tuple(shape))

    def describe(self) -> str:
        dims = "x".join("?" if d < 0 else str(d) for d in self.shape)
        return f"{self.name}: {self.dtype}[{dims}]"


@dataclass(frozen=True)
class Manifest:
    name: str
    task: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    preprocessing: Preprocessing | None
    labels: tuple[str, ...] | None
    raw: dict

    @classmethod
    def from_dict(cls, data: dict, where: str = "manifest") -> Manifest:
        if not isinstance(data, dict):
            raise BundleError(f"{where} does not hold a JSON object")
        if data.get("format") != FORMAT:
            raise BundleError(
                f"{where} has format {data.get('format')!r}; this edgert reads {FORMAT!r}"
            )
        if "name" not in data:
            raise BundleError(f"{where} has no name")
        name = safe_name(data["name"], f"{where}: the model name")
        task = data.get("task", "generic")
        if task not in TASKS:
            raise BundleError(f"{where}: unknown task {task!r}; expected one of {', '.join(TASKS)}")
        specs = {}
        for kind in ("inputs", "outputs"):
            items = data.get(kind)
            if not isinstance(items, list):
                raise BundleError(f"{where}: {kind} must be a list")
            specs[kind] = tuple(TensorSpec.from_dict(t, where) for t in items)
            names = [t.name for t in specs[kind]]
            if len(set(names)) != len(names):
                raise BundleError(f"{where}: {kind} repeat a tensor name")
        pre = data.get("preprocessing")
        if pre is not None and not isinstance(pre, dict):
            raise BundleError(f"{where}: preprocessing must be an object")
        check_sections(data, where)
        manifest = cls(
            name=name,
            task=task,
            inputs=specs["inputs"],
            outputs=specs["outputs"],
            preprocessing=Preprocessing.from_dict(pre) if pre else None,
            labels=valid_labels(data.get("labels"), where),
            raw=data,
        )
        return manifest

    @property
    def batch_range(self) -> dict[str, int]:
        """``{"min", "opt", "max"}`` the export recorded for a dynamic batch (validated on load;
        empty for a fixed batch): the one reader of it, for profiles, Triton and input checks."""
        return dict((self.raw.get("export") or {}).get("batch") or {})

    @property
    def max_batch(self) -> int | None:
        """The largest batch the export recorded for a dynamic-batch model."""
        return self.batch_range.get("max")

    @property
    def hashes(self) -> dict[str, str]:
        """Bundle file name -> SHA-256 recorded when the file was written."""
        return dict(self.raw.get("hashes") or {})

    @property
    def quantization(self) -> dict[str, Quantization]:
        """Precision -> what its ``edgert build`` recorded (typed; the whole report in ``raw``)."""
        found = self.raw.get("quantization") or {}
        return {p: Quantization.of(p, sec) for p, sec in found.items() if isinstance(sec, dict)}

    @property
    def models(self) -> dict[str, Network]:
        """Network name -> its entry in a bundle of several networks (a face detector's P-Net,
        R-Net and O-Net); empty for one model. File names were validated on open."""
        found = self.raw.get("models") or {}
        return {name: Network(name, spec["file"]) for name, spec in found.items()}

    @property
    def source(self) -> Source:
        """Where the model came from; empty when the manifest has none, or something else than
        an object there (a bundle from someone else's machine)."""
        found = self.raw.get("source")
        found = found if isinstance(found, dict) else {}
        return Source(_text(found.get("kind")), _text(found.get("spec")))

    @functools.cached_property
    def head(self):
        """How a detector-family model's output is laid out (:class:`~.manifest_checks.Head`;
        checked on load, read once: every frame's decode asks): its form (YOLO, end-to-end,
        DETR) and a pose model's keypoint shape."""
        return Head.from_dict(self.raw.get("head"))

    @property
    def detector(self) -> dict:
        """The detector's settings a multi-network task records (thresholds, pyramid)."""
        return dict(self.raw.get("detector") or {})


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class Quantization:
    """One precision's section of the manifest (``quantization.<precision>``, written by
    ``edgert build``): the fields code reads, typed; the whole report in ``raw``."""

    precision: str
    calibration_sha256: str | None  # what the plan cache keys an INT8 / FP8 plan on
    cpu_ms: dict | None  # ONNX Runtime CPU latency per batch size, measured at build time
    raw: dict

    @classmethod
    def of(cls, precision: str, section: dict) -> Quantization:
        speeds = section.get("onnxruntime_cpu_ms")
        return cls(
            precision,
            _text(section.get("calibration_sha256")),
            dict(speeds) if isinstance(speeds, dict) else None,
            dict(section),
        )


@dataclass(frozen=True)
class Network:
    """One network of a bundle of several (``models.<name>``): its file in the bundle."""

    name: str
    file: str


@dataclass(frozen=True)
class Source:
    """Where a bundle's model came from (``source``): ``kind`` (zoo, torchscript, onnx, ...) and
    ``spec`` (what was given: ``zoo:mobilenet_v2``, a path)."""

    kind: str | None = None
    spec: str | None = None

    @property
    def zoo(self) -> str | None:
        """The zoo entry's name for a zoo model, else None."""
        return self.spec[4:] if self.spec and self.spec.startswith("zoo:") else None


class Bundle:
    """An existing bundle folder, validated on open."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        manifest_path = self.path / MANIFEST
        if not self.path.exists():
            atomic.recover(self.path)  # a crash mid-replacement may have left it aside
        if not self.path.is_dir():
            raise BundleError(f"{self.path} is not a bundle folder")
        if not manifest_path.is_file():
            raise BundleError(f"{self.path} is not an edgert bundle: it has no {MANIFEST}")
        try:
            data = json.loads(_read_manifest(manifest_path).decode("utf-8-sig"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BundleError(f"{manifest_path} is not valid JSON ({exc})") from exc
        self.manifest = Manifest.from_dict(data, where=str(manifest_path))
        if not self.onnx_path.is_file():
            raise BundleError(f"bundle {self.path} has no {MODEL}")

    @property
    def onnx_path(self) -> Path:
        return self.path / MODEL

    @property
    def engines_dir(self) -> Path:
        return engines_dir(self.path, self.manifest.hashes.get(MODEL))

    def __repr__(self) -> str:
        return f"Bundle({str(self.path)!r}, task={self.manifest.task!r})"


def engines_dir(
    bundle_path: Path, model_sha256: str | None = None, legacy: bool = False
) -> Path | None:
    """Where the TensorRT plans of the bundle at ``bundle_path`` are cached: its ``engines/``
    folder, or, with ``EDGERT_PLAN_DIR`` set (a read-only bundle in a container, plans on the
    node's disk), that folder's subfolder named as the bundle and the first 12 digits of its
    ``model.onnx``'s SHA-256 (``model_sha256``, the manifest's): two bundles of one name in two
    folders (``a/model.edgert``, ``b/model.edgert``) share no folder, so clearing one never
    touches the other's plans. ``legacy``: the folder named as the bundle alone, where edgert
    before round 6 put them (read for plans still there; None without EDGERT_PLAN_DIR)."""
    shared = os.environ.get("EDGERT_PLAN_DIR")
    if not shared:
        return None if legacy else Path(bundle_path) / ENGINES
    name = Path(bundle_path).resolve().name
    if legacy or not model_sha256:
        return Path(shared) / name
    return Path(shared) / f"{name}-{model_sha256[:12]}"


def _read_manifest(path: Path) -> bytes:
    """The manifest's bytes, read only from a regular file (a FIFO or a device would block or
    never end) and at most ``MAX_MANIFEST_BYTES`` of it; BundleError for one over that (not a
    manifest) or not a regular file."""
    try:
        return read_regular(path, MAX_MANIFEST_BYTES)
    except NotRegular as exc:
        raise BundleError(f"{path} {exc}: not an edgert manifest") from None


def is_bundle(path: str | Path) -> bool:
    """True for a folder whose manifest.json declares edgert's bundle format (not any folder that
    happens to hold a manifest.json, such as a web app's)."""
    try:
        data = json.loads(_read_manifest(Path(path) / MANIFEST).decode("utf-8-sig"))
    except (OSError, UnicodeDecodeError, ValueError, BundleError):
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


_verified: dict[tuple, str] = {}
_verified_lock = threading.Lock()


def verify_hash(path: Path, expected: str) -> None:
    """BundleError unless ``path`` has the SHA-256 the manifest recorded. A file already checked in
    this process is not hashed again while its size, modification time and inode are unchanged."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror}") from exc
    key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _verified_lock:
        known = _verified.get(key)
    if known is None:
        try:  # only a regular file: hashing a FIFO would block, a device never end
            with regular.open_regular(path) as fh:
                known = _sha256_of(fh)
        except regular.NotRegular as exc:
            raise BundleError(f"{path} {exc}: not a bundle file") from None
        except OSError as exc:
            raise BundleError(f"cannot read {path}: {exc.strerror}") from exc
        with _verified_lock:
            _verified[key] = known
    if known != expected:
        raise BundleError(
            f"{path} does not match the SHA-256 recorded in its manifest (changed or damaged "
            "after it was written); export or build the bundle again"
        )


def write_manifest(folder: str | Path, data: dict) -> Path:
    """Validate ``data`` as a manifest and write it atomically into ``folder``."""
    Manifest.from_dict(data)
    path = Path(folder) / MANIFEST
    atomic.write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")
    return path


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    with open(path, "rb") as fh:
        return _sha256_of(fh, chunk)


def _sha256_of(fh, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    while block := fh.read(chunk):
        h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
