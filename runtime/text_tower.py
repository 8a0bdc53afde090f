"""A CLIP-style text tower beside an embed bundle's image tower: text -> one unit vector in the
image vectors' space (``GET /api/search?text=``, ``edgert events query --text``).

A bundle carries it as two more files the manifest's ``text`` section names and its ``hashes``
record (a tampered file is refused as the model's is)::

    "text": {"model": "text.onnx", "tokenizer": "tokenizer.json", "tokenizer_kind":
             "hf-tokenizers", "context_length": 77, "pad_id": 0, "end_id": 49407,
             "normalized": false, "size": 512, "input": "ids", "mask": null, "output": "v"}

The text is bounded (:data:`MAX_CHARS`), tokenised by HF ``tokenizers`` (its ``tokenizer.json``,
the file CLIP / OpenCLIP / SigLIP pairs ship), cut to the context length (the last id then the
end id: CLIP's tower pools at the end token) and padded with the pad id, then run on ONNX
Runtime's CPU provider (one short call per query, loaded only when a text is first asked: no
TensorRT plan is built for it), and L2-normalised by edgert whether or not the graph did.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import BundleError, ModelError
from .manifest_checks import safe_name

MAX_CHARS = 300  # a query's text, at most (a sentence; the tower reads tens of tokens)
MAX_CONTEXT = 4096
KIND = "hf-tokenizers"
EXTRA = "pip install 'edgert[text]'"


class TextError(ModelError):
    """A text or text tower refused, in one sentence (400 on the API, exit 2 on the CLI)."""


class NoTextTower(TextError):
    """The bundle carries no text tower."""


def tokenizers_module():
    """HF ``tokenizers``, or TextError naming the extra that installs it."""
    try:
        import tokenizers
    except ImportError:
        raise TextError(
            f"text search needs the tokenizers library, which is not installed: {EXTRA}"
        ) from None
    return tokenizers


def check_text(text) -> str:
    """The query's text, stripped; TextError when empty or over :data:`MAX_CHARS`."""
    text = (text or "").strip() if isinstance(text, str) else ""
    if not text:
        raise TextError("the text to search for is empty")
    if len(text) > MAX_CHARS:
        raise TextError(f"the text has {len(text)} characters; at most {MAX_CHARS}")
    return text


@dataclass(frozen=True)
class TextSpec:
    """The manifest's ``text`` section, checked."""

    model: str
    tokenizer: str
    context_length: int
    pad_id: int
    end_id: int | None
    normalized: bool
    size: int
    input: str
    mask: str | None
    output: str
    kind: str = KIND

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "tokenizer": self.tokenizer,
            "tokenizer_kind": self.kind,
            "context_length": self.context_length,
            "pad_id": self.pad_id,
            "end_id": self.end_id,
            "normalized": self.normalized,
            "size": self.size,
            "input": self.input,
            "mask": self.mask,
            "output": self.output,
        }

    @classmethod
    def of(cls, manifest, where: str) -> TextSpec:
        """The ``text`` section of ``manifest`` (a Manifest); NoTextTower when it has none."""
        data = manifest.raw.get("text")
        if data is None:
            raise NoTextTower(f"{where} carries no text tower (export it with --text-tower)")
        if not isinstance(data, dict) or data.get("tokenizer_kind") != KIND:
            raise BundleError(f"{where}: the text section must be an object of kind {KIND}")
        ints = {k: data.get(k) for k in ("context_length", "pad_id", "size")}
        end = data.get("end_id")
        if not all(type(v) is int and v >= 0 for v in ints.values()) or not (
            end is None or (type(end) is int and end >= 0)
        ):
            raise BundleError(f"{where}: the text section's sizes and ids must be whole numbers")
        if not 1 <= ints["context_length"] <= MAX_CONTEXT or ints["size"] < 1:
            raise BundleError(f"{where}: the text tower's context length or size is out of range")
        names = [data.get(k) for k in ("input", "output")]
        if not all(isinstance(n, str) and 0 < len(n) <= 256 for n in names):
            raise BundleError(f"{where}: the text section names no input or output")
        mask = data.get("mask")
        return cls(
            safe_name(data.get("model"), f"{where}: the text tower's file"),
            safe_name(data.get("tokenizer"), f"{where}: the tokenizer's file"),
            ints["context_length"],
            ints["pad_id"],
            end,
            bool(data.get("normalized")),
            ints["size"],
            names[0],
            mask if isinstance(mask, str) else None,
            names[1],
        )


def token_ids(tokenizer, spec: TextSpec, text: str) -> tuple[np.ndarray, int]:
    """[1, context_length] ids of ``text`` and how many are the text's: the tokenizer's (its
    own start and end tokens, when its post-processor adds them), cut to the context length
    with the end id last, padded with the pad id."""
    ids = list(tokenizer.encode(text).ids)
    n = spec.context_length
    if len(ids) > n:
        ids = ids[:n]
        if spec.end_id is not None:
            ids[-1] = spec.end_id
    if not ids:
        raise TextError("the text has no token the tokenizer knows")
    return np.array([ids + [spec.pad_id] * (n - len(ids))], np.int64), len(ids)


def feeds(session, spec: TextSpec, ids: np.ndarray, length: int) -> dict:
    """The session's inputs for ``ids`` (in the graph's integer type): the ids, and a mask of
    ones over the ``length`` real tokens where the graph takes one."""
    types = {i.name: i.type for i in session.get_inputs()}
    cast = np.int32 if types.get(spec.input) == "tensor(int32)" else np.int64
    out = {spec.input: ids.astype(cast)}
    if spec.mask is not None:
        mask = np.zeros_like(ids)
        mask[:, :length] = 1
        out[spec.mask] = mask.astype(np.int32 if types[spec.mask] == "tensor(int32)" else np.int64)
    return out


def run_tower(session, spec: TextSpec, tokenizer, text: str) -> np.ndarray:
    """The unit vector of ``text`` (float32 [size]); TextError for a vector not finite or not
    of the size the manifest says."""
    ids, real = token_ids(tokenizer, spec, text)
    out = session.run([spec.output], feeds(session, spec, ids, real))[0]
    v = np.asarray(out, np.float32).reshape(-1)
    if v.size != spec.size:
        raise TextError(
            f"the text tower gave {v.size} values, not the {spec.size} of the image tower"
        )
    norm = float(np.linalg.norm(v))
    if not np.isfinite(v).all() or norm == 0:
        raise TextError("the text tower gave a zero, NaN or infinite vector for this text")
    return v / norm


def session_of(path: Path):
    """An ONNX Runtime session of the tower on the CPU, one thread (a query's one call)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    try:
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime's own errors: one sentence
        raise BundleError(f"{path}: ONNX Runtime cannot load the text tower ({exc})") from None


def load_tokenizer(path: Path):
    """The tokenizer of ``tokenizer.json``, with its own padding and truncation off (the
    manifest's context length decides them)."""
    tok = tokenizers_module()
    try:
        tokenizer = tok.Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - the library's parse errors
        raise BundleError(f"{path} is not a tokenizers' tokenizer.json ({exc})") from None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


class TextTower:
    """A bundle's text tower, loaded (files checked against the manifest's hashes)."""

    def __init__(self, path) -> None:
        from .bundle import Bundle, verify_hash

        b = Bundle(path)
        self.name, self.path = b.manifest.name, b.path
        self.spec = TextSpec.of(b.manifest, str(b.path))
        hashes = b.manifest.hashes
        for file in (self.spec.model, self.spec.tokenizer):
            if file not in hashes:
                raise BundleError(f"{b.path / file} is not recorded in the manifest")
            verify_hash(b.path / file, hashes[file])
        self.tokenizer = load_tokenizer(b.path / self.spec.tokenizer)
        self.session = session_of(b.path / self.spec.model)
        self.lock = threading.Lock()

    def encode(self, text: str) -> np.ndarray:
        """The unit vector of ``text`` (checked: :func:`check_text`)."""
        text = check_text(text)
        with self.lock:
            return run_tower(self.session, self.spec, self.tokenizer, text)


def has_text(manifest) -> bool:
    """Whether a bundle's manifest names a text tower."""
    return manifest is not None and isinstance(manifest.raw.get("text"), dict)
