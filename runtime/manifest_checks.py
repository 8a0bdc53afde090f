"""What a manifest may say, checked before anything reads it as a path, a size or a line to
print: names (files, models, tensors), labels, and the sections other code opens files or sizes
by, and a detector's head (its layout: :class:`Head`, which ``tasks/heads.py`` decodes). A
bundle comes from someone else's machine: each check refuses with a BundleError sentence
naming the manifest's place. Used by :mod:`.bundle` when it reads a manifest, and by export for
what it is about to write."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import BundleError

MAX_BATCH_LIMIT = 4096
FORMS = ("yolo", "end2end", "detr")  # a detector head's layouts (tasks/heads.py decodes each)
MAX_LABELS = 100_000
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_UNSAFE_TEXT = re.compile(r'[\x00-\x1f\x7f"\\]')
# what a terminal acts on (C0, DEL, C1: line breaks, ANSI escapes): never in a label it prints
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def safe_name(value: object, what: str) -> str:
    """``value`` if it is a safe file or model name (letters, digits, ``_ - .``; not starting with
    a dot, so never ``.`` or ``..``; no separators; at most 128 characters), else BundleError."""
    if not isinstance(value, str) or not _SAFE_NAME.fullmatch(value):
        raise BundleError(
            f"{what} {value!r} is not a safe name (letters, digits, '_', '-', '.', not starting "
            "with '.', at most 128 characters)"
        )
    return value


def tensor_name(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 256 or _UNSAFE_TEXT.search(value):
        raise BundleError(
            f"{where}: tensor name {str(value)[:60]!r} must be 1-256 characters without quotes, "
            "backslashes or control characters"
        )
    return value


def valid_labels(labels: object, where: str) -> tuple[str, ...] | None:
    """A manifest's labels (None, or a non-empty list of one-line strings), or BundleError."""
    if labels is None:
        return None
    if not isinstance(labels, list) or len(labels) > MAX_LABELS:
        raise BundleError(f"{where}: labels must be a list of at most {MAX_LABELS} strings")
    if not labels:
        raise BundleError(
            f"{where}: labels is an empty list; a model names at least one class (or the "
            "manifest leaves labels out)"
        )
    for label in labels:
        if not isinstance(label, str) or len(label) > 1000 or CONTROL.search(label):
            raise BundleError(
                f"{where}: label {str(label)[:40]!r} must be a string of at most 1000 characters "
                "on one line, without control characters"
            )
    return tuple(labels)


def check_sections(data: dict, where: str) -> None:
    """The sections other code reads as paths or sizes: file names, hashes, the batch range."""
    for section in ("export", "hashes", "models", "quantization", "detector", "text"):
        if data.get(section) is not None and not isinstance(data[section], dict):
            raise BundleError(f"{where}: {section} must be an object")
    if data.get("head") is not None:
        Head.from_dict(data["head"], where)
    batch = (data.get("export") or {}).get("batch")
    valid = isinstance(batch, dict) and all(
        type(batch.get(k, 1)) is int and 1 <= batch.get(k, 1) <= MAX_BATCH_LIMIT
        for k in ("min", "opt", "max")
    )
    if batch is not None and not valid:
        raise BundleError(
            f"{where}: export.batch must hold min/opt/max integers from 1 to {MAX_BATCH_LIMIT}"
        )
    for file, digest in (data.get("hashes") or {}).items():
        # keys name bundle files or the sources they came from (weights/pnet.pt): relative
        # names of safe parts, never absolute, never a ".." out of the bundle; only bundle files
        # are ever opened, by their own (validated) names
        if not isinstance(file, str) or len(file) > 256 or _UNSAFE_TEXT.search(file):
            raise BundleError(f"{where}: the hashes name an invalid file {str(file)[:60]!r}")
        if not all(_SAFE_NAME.fullmatch(part) for part in file.split("/")):
            raise BundleError(
                f"{where}: the hashes name {file[:60]!r}, not a file name of the bundle "
                "(parts of letters, digits, '_', '-', '.' joined by '/'; never absolute, never '..')"
            )
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise BundleError(f"{where}: the hash of {file} is not a SHA-256 hex digest")
    for model, spec in (data.get("models") or {}).items():
        safe_name(model, f"{where}: the model")
        if not isinstance(spec, dict):
            raise BundleError(f"{where}: models.{model} must be an object")
        safe_name(spec.get("file"), f"{where}: the file of {model}")


@dataclass(frozen=True)
class Head:
    """How a detector-family model's first output is laid out: its form, the keypoints' shape
    (K, D) of a pose model, and where this was read from (``Ultralytics metadata``, the output
    shapes, the user's flags)."""

    form: str = "yolo"
    kpt_shape: tuple[int, int] | None = None
    source: str | None = None

    def to_dict(self) -> dict:
        out: dict = {"form": self.form}
        if self.kpt_shape is not None:
            out["kpt_shape"] = list(self.kpt_shape)
        if self.source:
            out["from"] = self.source
        return out

    @classmethod
    def from_dict(cls, data: object, where: str = "manifest") -> Head:
        """The manifest's ``head`` section (a bundle from someone else's machine: checked)."""
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise BundleError(f"{where}: head must be an object")
        form = data.get("form", "yolo")
        if form not in FORMS:
            raise BundleError(f"{where}: head.form {form!r} is not one of {', '.join(FORMS)}")
        kpt = data.get("kpt_shape")
        if kpt is not None and not (
            isinstance(kpt, list)
            and len(kpt) == 2
            and all(type(v) is int for v in kpt)
            and 1 <= kpt[0] <= 1000
            and kpt[1] in (2, 3)
        ):
            raise BundleError(
                f"{where}: head.kpt_shape {str(kpt)[:40]} must be [K, D]: K keypoints (1-1000), "
                "D = 2 (x, y) or 3 (x, y, visibility)"
            )
        source = data.get("from")
        return cls(
            form,
            tuple(kpt) if kpt is not None else None,
            source if isinstance(source, str) else None,
        )
