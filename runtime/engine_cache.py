"""The engine cache: ``engines/<key>.engine`` plus a ``<key>.json`` sidecar in the bundle.

The key hashes everything a plan depends on — ONNX bytes, precision, calibration, TensorRT
version, GPU name and compute capability, DLA core, shapes and builder options — so a plan is
never loaded where it was not built for: another GPU or TensorRT version simply has another key.
Writes are atomic and a per-key lock makes two processes building the same key do the work once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from . import atomic
from .backends.tensorrt_compat import PlanInfo
from .locks import file_lock


@dataclass(frozen=True)
class PlanKey:
    onnx_sha256: str
    precision: str
    tensorrt: str
    device_name: str
    compute_capability: str
    calibration_sha256: str | None = None
    dla_core: int | None = None
    shapes: dict = field(default_factory=dict)  # input -> [min, opt, max]
    builder: dict = field(default_factory=dict)  # workspace, optimisation level, ...

    @property
    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    @property
    def filename(self) -> str:
        return f"{self.precision}-{self.digest}.engine"


class EngineCache:
    def __init__(self, engines_dir: str | Path) -> None:
        self.dir = Path(engines_dir)

    def path(self, key: PlanKey) -> Path:
        return self.dir / key.filename

    def get(self, key: PlanKey) -> Path | None:
        plan = self.path(key)
        return plan if plan.is_file() and plan.with_suffix(".json").is_file() else None

    def get_or_build(
        self, key: PlanKey, build: Callable[[], bytes], extra: dict | None = None
    ) -> tuple[Path, bool]:
        """(plan path, built_now). Two processes asking for one key: one builds, the other waits
        and reuses the file; neither sees a half-written plan."""
        plan = self.path(key)
        with file_lock(plan.with_suffix(".lock")):
            if self.get(key):
                return plan, False
            data = build()
            atomic.write_bytes(plan, data)
            sidecar = {
                "key": key.digest,
                "precision": key.precision,
                "tensorrt": key.tensorrt,
                "device": {"name": key.device_name, "compute_capability": key.compute_capability},
                "dla_core": key.dla_core,
                "onnx_sha256": key.onnx_sha256,
                "calibration_sha256": key.calibration_sha256,
                "shapes": key.shapes,
                "builder": key.builder,
                "bytes": len(data),
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                **(extra or {}),
            }
            atomic.write_text(plan.with_suffix(".json"), json.dumps(sidecar, indent=2) + "\n")
            return plan, True

    def entries(self) -> list[tuple[Path, PlanInfo | None, int]]:
        if not self.dir.is_dir():
            return []
        return [(p, PlanInfo.read(p), p.stat().st_size) for p in sorted(self.dir.glob("*.engine"))]

    def clear(self, key_prefix: str | None = None) -> list[Path]:
        """Delete plans (all, or those whose file name starts with ``key_prefix``) with their
        sidecars; returns what was removed."""
        removed = []
        for plan, _, _ in self.entries():
            if key_prefix and not plan.name.startswith(key_prefix) and key_prefix not in plan.stem:
                continue
            with file_lock(plan.with_suffix(".lock")):
                for p in (plan, plan.with_suffix(".json")):
                    if p.exists():
                        p.unlink()
            plan.with_suffix(".lock").unlink(missing_ok=True)
            removed.append(plan)
        return removed
