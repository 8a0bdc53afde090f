"""The small contract every backend implements: load, run, close.

Inputs are validated once, in :class:`edgert.runtime.engine.Engine`; a backend only runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np

from ..bundle import TensorSpec


class Backend(ABC):
    name: str = "base"

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    description: str  # e.g. the providers or the TensorRT device, for users

    @classmethod
    @abstractmethod
    def availability(cls) -> str | None:
        """None when this backend can run here, else the reason it cannot (with what to install)."""

    @classmethod
    @abstractmethod
    def load(cls, model: Path, *, device: int = 0, **options) -> Backend:
        """Load a model file this backend understands."""

    @abstractmethod
    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run validated, contiguous inputs; return outputs by name (owned by the caller)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release sessions and device memory; idempotent."""
