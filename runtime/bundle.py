"""The model bundle: a folder holding ``manifest.json``, ``model.onnx`` and ``engines/``.

See ``docs/bundle.md`` for the format. The manifest is the single source of truth for I/O specs,
preprocessing and labels; sections owned by other stages (parity, calibration, accuracy) are kept
as plain JSON in :attr:`Manifest.raw` and round-trip untouched.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from . import atomic
from .errors import BundleError
from .preprocess import Preprocessing

FORMAT = "edgert-bundle/1"
MANIFEST = "manifest.json"
MODEL = "model.onnx"
ENGINES = "engines"
TASKS = ("classify", "detect", "segment", "faces", "generic")


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
    def from_dict(cls, data: dict) -> TensorSpec:
        return cls(str(data["name"]), str(data["dtype"]), tuple(int(d) for d in data["shape"]))

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
        if data.get("format") != FORMAT:
            raise BundleError(
                f"{where} has format {data.get('format')!r}; this edgert reads {FORMAT!r}"
            )
        try:
            pre = data.get("preprocessing")
            labels = data.get("labels")
            return cls(
                name=str(data["name"]),
                task=str(data.get("task", "generic")),
                inputs=tuple(TensorSpec.from_dict(t) for t in data["inputs"]),
                outputs=tuple(TensorSpec.from_dict(t) for t in data["outputs"]),
                preprocessing=Preprocessing.from_dict(pre) if pre else None,
                labels=tuple(str(x) for x in labels) if labels else None,
                raw=data,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BundleError(f"{where} is missing or has an invalid field: {exc}") from exc


class Bundle:
    """An existing bundle folder, validated on open."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        manifest_path = self.path / MANIFEST
        if not self.path.is_dir():
            raise BundleError(f"{self.path} is not a bundle folder")
        if not manifest_path.is_file():
            raise BundleError(f"{self.path} is not an edgert bundle: it has no {MANIFEST}")
        try:
            data = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BundleError(f"{manifest_path} is not valid JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise BundleError(f"{manifest_path} does not hold a JSON object")
        self.manifest = Manifest.from_dict(data, where=str(manifest_path))
        if not self.onnx_path.is_file():
            raise BundleError(f"bundle {self.path} has no {MODEL}")

    @property
    def onnx_path(self) -> Path:
        return self.path / MODEL

    @property
    def engines_dir(self) -> Path:
        return self.path / ENGINES

    def __repr__(self) -> str:
        return f"Bundle({str(self.path)!r}, task={self.manifest.task!r})"


def is_bundle(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def write_manifest(folder: str | Path, data: dict) -> Path:
    """Validate ``data`` as a manifest and write it atomically into ``folder``."""
    Manifest.from_dict(data)
    path = Path(folder) / MANIFEST
    atomic.write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")
    return path


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
