"""``edgert export IMAGE_TOWER --task embed --text-tower TEXT.onnx --tokenizer tokenizer.json``:
a CLIP-style pair in one bundle. The image tower is exported as any encoder (the camera's
embedder); the text tower's ONNX and its HF ``tokenizers`` file are checked and copied beside it,
recorded in the manifest's ``text`` section (:mod:`edgert.runtime.text_tower`) and its hashes.

Checked before anything is written: the text tower takes one integer ids input [N or 1, L] (and
optionally an attention mask), L fixed in the graph or given by ``--context-length``; it gives
vectors of the image tower's size, finite, different for different texts (a tower whose vectors
are the same for every text would rank at random: refused, as the image tower's health check
refuses a collapsed encoder); whether it L2-normalises its output is measured on the probes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgert.runtime import text_tower
from edgert.runtime.errors import ModelError

MODEL, TOKENIZER = "text.onnx", "tokenizer.json"
PROBES = ("a photo of a person", "a red car", "a dog on the grass", "an empty street at night")
ENDS = ("<|endoftext|>", "</s>", "[SEP]", "<eos>")
PADS = ("<pad>", "[PAD]", "<|pad|>")
SAME = 0.9999  # probe texts whose vectors are all this similar: the tower ignores its text


@dataclass(frozen=True)
class TextTowerArgs:
    """What ``edgert export`` was given for the text tower."""

    model: str
    tokenizer: str
    context_length: int | None = None
    pad_id: int | None = None
    end_id: int | None = None


def _read(path: str, what: str) -> bytes:
    p = Path(path)
    if not p.is_file():
        raise ModelError(f"{what} {path} is not a file")
    return p.read_bytes()


def _io(model, context_length: int | None) -> tuple:
    """(ids input, mask input or None, output, context length) of the text tower's graph."""
    init = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in init]
    ints = (6, 7)  # int32, int64
    if not 1 <= len(inputs) <= 2 or any(i.type.tensor_type.elem_type not in ints for i in inputs):
        raise ModelError(
            "--text-tower takes token ids: its graph must have one int64 or int32 input [N, L] "
            "(and at most an attention mask beside it)"
        )
    ids = inputs[0]
    mask = inputs[1].name if len(inputs) == 2 else None
    if mask is not None and "mask" in ids.name.lower():
        ids, mask = inputs[1], inputs[0].name
    dims = ids.type.tensor_type.shape.dim
    if len(dims) != 2:
        raise ModelError(f"--text-tower's input {ids.name} has {len(dims)} dimensions, not [N, L]")
    fixed = dims[1].dim_value if dims[1].HasField("dim_value") else None
    if fixed and context_length and fixed != context_length:
        raise ModelError(f"--context-length {context_length}: the text tower's graph fixes {fixed}")
    length = fixed or context_length
    if not length:
        raise ModelError("the text tower's context length is not fixed: give --context-length")
    return ids.name, mask, model.graph.output[0].name, length


def _ids(tokenizer, given: int | None, names: tuple, fallback: int | None) -> int | None:
    """The id given (-1: none), else the first of ``names`` the tokenizer knows, else
    ``fallback``."""
    if given is not None:
        return None if given < 0 else given
    for name in names:
        found = tokenizer.token_to_id(name)
        if found is not None:
            return found
    return fallback


def _appended_end(tokenizer) -> int | None:
    """The special token the tokenizer's post-processor puts last (CLIP's <|endoftext|>,
    SigLIP's </s>, a BERT's [SEP]), or None when it appends none."""
    enc = tokenizer.encode(PROBES[0])
    if enc.ids and enc.special_tokens_mask and enc.special_tokens_mask[-1]:
        return enc.ids[-1]
    return None


def text_files(args: TextTowerArgs, image_size: int) -> tuple[dict, dict]:
    """``({file: bytes}, text section)`` of a checked text tower whose vectors have
    ``image_size`` values; ModelError, in one sentence, for one that does not fit."""
    import onnx

    model_bytes = _read(args.model, "--text-tower")
    tok_bytes = _read(args.tokenizer, "--tokenizer")
    try:
        graph = onnx.load_model_from_string(model_bytes)
    except Exception as exc:  # noqa: BLE001 - protobuf's parse errors
        raise ModelError(f"--text-tower {args.model} is not an ONNX model ({exc})") from None
    ids, mask, output, length = _io(graph, args.context_length)
    tokenizer = text_tower.load_tokenizer(Path(args.tokenizer))
    appended = _appended_end(tokenizer)
    end = _ids(tokenizer, args.end_id, () if appended is not None else ENDS, appended)
    pad = _ids(tokenizer, args.pad_id, PADS, end if end is not None else 0)
    spec = text_tower.TextSpec(
        MODEL, TOKENIZER, length, pad, end, False, image_size, ids, mask, output
    )
    session = text_tower.session_of(Path(args.model))
    raw = []
    for probe in PROBES:
        feeds = text_tower.feeds(session, spec, *text_tower.token_ids(tokenizer, spec, probe))
        raw.append(np.asarray(session.run([output], feeds)[0], np.float32).reshape(-1))
    if any(v.size != image_size for v in raw):
        raise ModelError(
            f"--text-tower gives vectors of {raw[0].size} values; the image tower's have "
            f"{image_size}: the two towers of one pair share one space"
        )
    if not all(np.isfinite(v).all() and np.linalg.norm(v) > 0 for v in raw):
        raise ModelError("--text-tower gives zero, NaN or infinite vectors for probe texts")
    unit = np.stack([v / np.linalg.norm(v) for v in raw])
    if float((unit @ unit.T).min()) > SAME:
        raise ModelError(
            f"--text-tower gives the same vector for {len(PROBES)} different probe texts: "
            "it would rank at random"
        )
    normalized = all(abs(float(np.linalg.norm(v)) - 1.0) < 1e-3 for v in raw)
    section = dict(spec.to_dict(), normalized=normalized)
    return {MODEL: model_bytes, TOKENIZER: tok_bytes}, section
