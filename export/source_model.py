"""What export works from: a model ready to export, and the check of a state_dict against it.

Its own module so that the zoo entries and the source loaders both use it without importing each
other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgert.runtime.errors import ModelError
from edgert.runtime.images.preprocess import Preprocessing


@dataclass
class SourceModel:
    """A model ready to export: a torch module (or an ONNX file) plus what is known about it."""

    name: str
    kind: str  # zoo | factory | torchscript | exported_program | pickle | onnx
    spec: str
    module: Any = None  # torch.nn.Module, None for onnx sources
    onnx_path: Path | None = None
    input_shapes: list[tuple[int, ...]] | None = None
    input_names: list[str] | None = None
    output_names: list[str] | None = None
    task: str = "generic"
    preprocessing: Preprocessing | None = None
    labels: list[str] | None = None
    samples: np.ndarray | None = None  # real, preprocessed inputs (N, ...) for parity
    head: Any = None  # runtime.heads.Head of a detector-family model (its form, keypoints)
    read_from: str | None = None  # what was read from the model's own metadata, in a sentence
    hashes: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    keep: Any = None  # what must live as long as the source (a temporary folder of its ONNX)
    parity: Any = None  # a ParityReport made where the source was read (an Ultralytics .pt)


def check_state_dict(model, state: dict, what: str) -> None:
    """Raise ModelError listing a few missing/unexpected/mis-shaped keys when they do not match."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    mismatched = [
        f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}"
        for k in own
        if k in state
        and hasattr(state[k], "shape")
        and tuple(state[k].shape) != tuple(own[k].shape)
    ]
    if not (missing or unexpected or mismatched):
        return
    parts = []
    for label, keys in (
        ("missing", missing),
        ("unexpected", unexpected),
        ("wrong shape", mismatched),
    ):
        if keys:
            more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
            parts.append(f"{label}: {', '.join(keys[:3])}{more}")
    raise ModelError(f"weights in {what} do not match the architecture ({'; '.join(parts)})")
