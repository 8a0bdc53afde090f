"""Where each Jetson exposes the clocks ``--clocks`` may set, found under a sysfs root: the
GPU's devfreq node and its table, the memory controller's (EMC) cap and its rates
(:func:`find`). Setting them and putting them back is :mod:`.clocks`.

Where each board exposes them (the GPU node is found through ``/sys/class/devfreq`` by its known
names, as :func:`.thermal.gpu_clock` does):

==================  =============================================  ==========================================
board / release     GPU (devfreq, Hz)                              EMC cap (Hz)
==================  =============================================  ==========================================
Orin, JetPack 5     ``17000000.ga10b``: min_freq, max_freq,        ``/sys/kernel/nvpmodel_emc_cap/emc_iso_cap``
                    available_frequencies                          (``drivers/nvpmodel/nvpmodel_emc_cap.c``)
Orin, JetPack 6     ``17000000.gpu`` (the nvpmodel confs' path     ``/sys/kernel/nvpmodel_clk_cap/emc``
                    ``.../17000000.gpu/devfreq_dev/``)             (``nvpmodel-clk-cap.c``: a write is rounded
                                                                   to a rate the clock has; reading gives it)
Thor, JetPack 7     ``gpu-gpc-0``                                  devfreq ``bwmgr``: max_freq,
                                                                   available_frequencies
==================  =============================================  ==========================================

The GPU's candidates are its ``available_frequencies`` at or under the ``max_freq`` in force (and
at or over ``min_freq`` unless jetson_clocks pinned min = max, in which case the minimum follows
the maximum: the clock is pinned at each candidate, as NVIDIA's MLPerf "MaxQ" confs do). The EMC's
candidates under a cap file are the rates NVIDIA's own nvpmodel modes cap it at (``EMC MAX_FREQ``
in ``/etc/nvpmodel.conf``, which are rates of the memory's table) and its maximum (BPMP's
``max_rate`` in debugfs), at or under the cap in force; on Thor the devfreq table.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import SensorError
from .sensors import sysfs_root

EMC_CAPS = (
    "sys/kernel/nvpmodel_clk_cap/emc",  # Orin, JetPack 6 (r36)
    "sys/kernel/nvpmodel_emc_cap/emc_iso_cap",  # Orin, JetPack 5 (r35)
)
EMC_DEVFREQ = "sys/class/devfreq/bwmgr"  # Thor (r38)
EMC_MAX_RATE = "sys/kernel/debug/bpmp/debug/clk/emc/max_rate"  # BPMP's clock (debugfs, root)
_EMC_CONF = re.compile(r"^\s*EMC\s+MAX_FREQ\s+(-?\d+)\s*$", re.MULTILINE)


class ClockError(SensorError):
    """The clocks cannot be set here (no node, no permission, another process holds them)."""


@dataclass(frozen=True)
class Domain:
    """One clock edgert may limit: ``kind`` "devfreq" (a folder with min_freq / max_freq) or
    "cap" (one file holding a maximum)."""

    name: str  # "gpu" or "emc"
    kind: str
    node: Path
    available: tuple  # Hz, ascending
    source: str  # where the table came from

    def files(self) -> list:
        if self.kind == "devfreq":
            return [self.node / "min_freq", self.node / "max_freq"]
        return [self.node]

    def limits(self) -> tuple:
        """(minimum, maximum) in force, Hz (a cap's minimum is None; a cap of 0 or less: none)."""
        if self.kind == "devfreq":
            return read_int(self.node / "min_freq"), read_int(self.node / "max_freq")
        cap = read_int(self.node)
        return None, (cap if cap > 0 else max(self.available))

    def candidates(self, start: tuple) -> list:
        """The table's rates inside the envelope in force at ``start`` (its (min, max)),
        descending: at or under the maximum, and at or over the minimum unless pinned."""
        lo, hi = start
        pinned = lo is not None and lo == hi
        return sorted(
            (f for f in self.available if f <= hi and (pinned or lo is None or f >= lo)),
            reverse=True,
        )

    def writes(self, hz: int, start: tuple) -> list:
        """[(file, value)] that set this clock's maximum to ``hz``, in an order devfreq takes."""
        if self.kind != "devfreq":
            return [(self.node, str(hz))]
        lo0, hi0 = start
        new_min = hz if lo0 == hi0 else min(lo0, hz)  # pinned: follow; else only never above
        cur_min, _ = self.limits()
        mn, mx = (self.node / "min_freq", str(new_min)), (self.node / "max_freq", str(hz))
        return [mn, mx] if hz < cur_min else [mx, mn]

    def to_dict(self, start: tuple | None = None) -> dict:
        lo, hi = self.limits() if start is None else start
        return {
            "name": self.name,
            "node": str(self.node),
            "available_mhz": [round(f / 1e6, 3) for f in self.available],
            "min_mhz": None if lo is None else round(lo / 1e6, 3),
            "max_mhz": round(hi / 1e6, 3),
            "table_from": self.source,
        }


MAX_HZ = 10_000_000_000  # no Jetson clock runs near 10 GHz (EMC: 3.2 GHz Orin, 4.3 GHz Thor)


def hz(text: str) -> int | None:
    """A frequency a driver writes (Hz, an integer, maybe as a float), None for anything else:
    not a number, not finite, or outside what a board's clock can be (0 or less: "no cap",
    kept as the drivers mean it; over MAX_HZ: junk)."""
    try:
        value = float(text)
    except ValueError:
        return None
    if value != value or abs(value) > MAX_HZ:  # NaN, inf, 1e17
        return None
    return int(value)


def read_int(path: Path) -> int:
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise ClockError(f"cannot read {path}: {exc.strerror or exc}") from None
    value = hz(text.split()[0]) if text else None
    if value is None:
        raise ClockError(f"{path} does not hold a frequency ({text[:40]!r})")
    return value


def _table(path: Path) -> tuple:
    """``available_frequencies``: one line of Hz values (sorted here: drivers list their own way;
    what cannot be a clock's rate is left out)."""
    try:
        values = {hz(v) for v in path.read_text().split()}
    except OSError:
        return ()
    return tuple(sorted(v for v in values if v is not None and v > 0))


@dataclass(frozen=True)
class Controls:
    """The clocks this board lets edgert limit (either may be None), and why one is absent."""

    gpu: Domain | None
    emc: Domain | None
    reasons: tuple = ()

    @property
    def domains(self) -> list:
        return [d for d in (self.gpu, self.emc) if d is not None]


def find(root=None) -> Controls:
    """The GPU's devfreq node and the EMC cap under ``root`` (``/`` or ``--sysfs-root``)."""
    from .thermal import gpu_devfreq_node

    base = sysfs_root(root)
    reasons = []
    gpu = None
    node = gpu_devfreq_node(root)
    if node is None:
        reasons.append("no GPU devfreq node (not a Jetson, or its GPU driver is not loaded)")
    else:
        table = _table(node / "available_frequencies")
        if len(table) < 2:
            reasons.append(f"{node}/available_frequencies lists no frequencies to choose from")
        else:
            gpu = Domain("gpu", "devfreq", node, table, f"{node}/available_frequencies")
    emc = None
    bwmgr = base / EMC_DEVFREQ
    if bwmgr.is_dir():
        table = _table(bwmgr / "available_frequencies")
        if len(table) >= 2:
            emc = Domain("emc", "devfreq", bwmgr, table, f"{bwmgr}/available_frequencies")
    else:
        for rel in EMC_CAPS:
            cap = base / rel
            if cap.is_file():
                rates = _emc_rates(base, cap)
                if len(rates) >= 2:
                    emc = Domain(
                        "emc", "cap", cap, rates, "the EMC caps of /etc/nvpmodel.conf's modes"
                    )
                break
    if emc is None:
        reasons.append("no EMC cap with rates to choose from")
    return Controls(gpu, emc, tuple(reasons))


def _emc_rates(base: Path, cap: Path) -> tuple:
    """The rates NVIDIA's modes cap the EMC at (``EMC MAX_FREQ`` in nvpmodel.conf; -1 / 0 mean
    none), BPMP's maximum, and the cap in force."""
    rates = set()
    with contextlib.suppress(OSError):
        conf = (base / "etc/nvpmodel.conf").read_text(errors="replace")
        rates.update(int(v) for v in _EMC_CONF.findall(conf) if 0 < int(v) <= MAX_HZ)
    for path in (base / EMC_MAX_RATE, cap):
        with contextlib.suppress(ClockError):
            value = read_int(path)
            if value > 0:
                rates.add(value)
    return tuple(sorted(rates))
