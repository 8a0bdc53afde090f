"""Jetson power modes: the modes in /etc/nvpmodel.conf (by name: IDs differ across boards), the
current mode, and whether jetson_clocks has pinned the clocks. Read-only: changing modes needs root
and is opt-in (``edgert bench --nvpmodel NAME``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import SensorError

_MODE = re.compile(r"<\s*POWER_MODEL\s+ID\s*=\s*(\d+)\s+NAME\s*=\s*([^\s>]+)", re.IGNORECASE)
_STATUS = re.compile(r"pmode:\s*0*(\d+)")


@dataclass(frozen=True)
class PowerModes:
    modes: dict[int, str]  # id -> name
    current_id: int | None
    jetson_clocks: str  # "on", "off" or "unknown (...)"

    @property
    def current_name(self) -> str | None:
        return self.modes.get(self.current_id) if self.current_id is not None else None

    def id_of(self, name: str) -> int:
        for mid, mname in self.modes.items():
            if mname.lower() == name.lower():
                return mid
        raise SensorError(
            f"no power mode named {name!r}; this board has: {', '.join(self.modes.values()) or 'none'}"
        )


def parse_conf(text: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(2) for m in _MODE.finditer(text)}


def read(root: str | Path = "/") -> PowerModes | None:
    """None when the board has no nvpmodel.conf (not a Jetson)."""
    root = Path(root)
    conf = root / "etc/nvpmodel.conf"
    if not conf.is_file():
        return None
    modes = parse_conf(conf.read_text(errors="replace"))
    current = None
    status = root / "var/lib/nvpmodel/status"
    if status.is_file():
        m = _STATUS.search(status.read_text(errors="replace"))
        current = int(m.group(1)) if m else None
    return PowerModes(modes, current, _clocks_state(root))


def _clocks_state(root: Path) -> str:
    cpu = root / "sys/devices/system/cpu/cpu0/cpufreq"
    try:
        lo = int((cpu / "scaling_min_freq").read_text())
        hi = int((cpu / "scaling_max_freq").read_text())
    except (OSError, ValueError):
        return "unknown (cpufreq not readable)"
    return "on" if lo == hi else "off"


def set_mode(name: str, modes: PowerModes) -> None:
    """Switch power mode (root only); used by ``bench --nvpmodel``."""
    if shutil.which("nvpmodel") is None:
        raise SensorError("nvpmodel is not installed on this system")
    mode_id = modes.id_of(name)
    proc = subprocess.run(
        ["nvpmodel", "-m", str(mode_id)], capture_output=True, text=True, input="YES\n"
    )
    if proc.returncode != 0:
        raise SensorError(
            f"nvpmodel -m {mode_id} failed (it needs root): {proc.stderr.strip()[:200]}"
        )
