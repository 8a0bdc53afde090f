"""The small contract every backend implements: load, run, close.

Inputs are validated once, in :class:`edgert.runtime.engine.Engine`; a backend only runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..bundle import TensorSpec, engines_dir


@dataclass(frozen=True)
class Target:
    """What the user asked to load: a bundle folder, an .onnx or an .engine."""

    path: Path
    bundle_dir: Path | None = None
    onnx: Path | None = None
    engine: Path | None = None
    onnx_hashes: dict | None = None  # bundle file name -> sha256 (the manifest's hashes)
    # precision -> {"fp32": ms, precision: ms}: batch-1 ONNX Runtime CPU latency at build time
    cpu_speeds: dict | None = None
    dla_core: int | None = (
        None  # a DLA core's plans asked for (Engine.load(dla=N)); None: GPU first
    )

    @property
    def engines_dir(self) -> Path | None:
        """The plan cache's folder, by the bundle's rule (``EDGERT_PLAN_DIR`` included)."""
        if self.bundle_dir is None:
            return None
        return engines_dir(self.bundle_dir, (self.onnx_hashes or {}).get("model.onnx"))

    @property
    def legacy_engines_dir(self) -> Path | None:
        """Under ``EDGERT_PLAN_DIR``, the folder named as the bundle alone (before round 6)."""
        if self.bundle_dir is None:
            return None
        return engines_dir(self.bundle_dir, legacy=True)


class Backend(ABC):
    name: str = "base"
    OPTIONS: frozenset[str] = frozenset()  # keyword options load() takes besides device
    on_cpu: bool = False  # inference runs on the CPU's cores (what keeps them busy, not the GPU)

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    description: str  # e.g. the providers or the TensorRT device, for users

    @classmethod
    @abstractmethod
    def availability(cls) -> str | None:
        """None when this backend can run here, else the reason it cannot (with what to install)."""

    @classmethod
    @abstractmethod
    def select(cls, target: Target, precision: str, device: int) -> tuple[Path | None, str]:
        """The file this backend would load for ``target`` (or None) and why."""

    @classmethod
    @abstractmethod
    def load(cls, model: Path, *, device: int = 0, **options) -> Backend:
        """Load a model file this backend understands."""

    @abstractmethod
    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run validated, contiguous inputs; return outputs by name (owned by the caller)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release sessions and device memory; idempotent."""
