"""``--clocks auto`` and a sweep's clock axes: the clock session a run sets limits through, the
search for the GPU / EMC limits with the least energy per inference at a target rate, and
:class:`RateHold`, which steps them up when the run falls behind. The camera shares these."""

from __future__ import annotations

import contextlib
import math

from edgert.apps import processes

from .config import BenchConfig, make_inputs
from .loop import timed_loop, warm


def clock_session(cfg: BenchConfig, say):
    """A :class:`~edgert.runtime.power.clocks.ClockSession` when the run sets clocks (``--clocks
    auto``, a sweep's clock axis), else a context of None. Nothing is written until it sets."""
    if cfg.clocks is None and cfg.gpu_clock is None and cfg.emc_clock is None:
        return contextlib.nullcontext()
    from edgert.runtime.power import clocks

    found = clocks.find(cfg.sysfs_root)
    wanted = ["gpu", "emc"] if cfg.clocks else [n for n in ("gpu", "emc") if _mhz(cfg, n)]
    if not any(getattr(found, n) for n in wanted):
        raise clocks.ClockError(
            "--clocks: this board has no clock edgert can set (" + "; ".join(found.reasons) + ")"
        )
    for name in wanted:
        if getattr(found, name) is None and not cfg.clocks:
            raise clocks.ClockError(
                f"no {name.upper()} clock to set here ({'; '.join(found.reasons)})"
            )
    return clocks.ClockSession(found, cfg.sysfs_root, say)


def _mhz(cfg: BenchConfig, name: str):
    return cfg.gpu_clock if name == "gpu" else cfg.emc_clock


def fixed_clocks(cfg: BenchConfig, session) -> dict:
    """A sweep's clock values (MHz) as the table's rates: {"gpu": Hz, "emc": Hz}."""
    from edgert.runtime.power.clocks import ClockError

    out = {}
    for name in ("gpu", "emc"):
        value = _mhz(cfg, name)
        if value is None:
            continue
        table = session.candidates(name)
        match = [f for f in table if abs(f / 1e6 - value) < 0.5]
        if not match:
            rates = ", ".join(f"{f / 1e6:g}" for f in sorted(table))
            raise ClockError(
                f"{name}_clock {value:g} MHz is not one this board allows under its current "
                f"limits ({rates} MHz)"
            )
        out[name] = match[0]
    return out


def choose_clocks(cfg: BenchConfig, session, meter, options: dict, say) -> dict:
    """``--clocks auto``: the GPU and EMC limits with the least measured energy per inference at
    ``cfg.target_fps``. Each candidate is set, left ``clock_settle`` s, then run paced to the rate
    for ``probe_seconds`` on the settings already chosen; it holds the rate when the work fills at
    most 1 / (1 + margin) of the time, every slot was kept and p99 is within ``max_latency_ms``
    (default two slots: a frame late by at most one frame interval). The GPU's
    table is walked down from the top (at the EMC's top) until a clock cannot hold the rate or
    two in a row cost more than the best, then each axis again from the best point (one step
    up, down while it pays) until it stays put: energy against clock is U-shaped (dynamic power falls with
    the clock down to the voltage floor, the power paid while computing is paid longer). A point
    that fails to hold is measured once more before the walk stops there, and the points within
    ``TIE`` of the least energy are measured again and ranked on the mean of both: one probe
    slowed by another process is not the clock's limit, nor a few per cent of noise its cost."""
    from edgert.runtime.engine import Engine
    from edgert.runtime.power.clocks import ClockError

    if meter is None:
        raise ClockError("--clocks auto measures energy, and there is no power sensor here")
    with processes.uninterrupted(
        Engine.load, cfg.model, backend=cfg.backend, precision=cfg.precision, **options
    ) as engine:
        search = ClockSearch(cfg, session, meter, engine, say)
        key = search.run()
    measured, gpus, emcs, rate = search.measured, search.gpus, search.emcs, cfg.target_fps
    if key is None:
        key = (gpus[0], emcs[0])
        why = (
            f"no clock point holds {rate:g}/s with {cfg.margin:.0%} to spare: the limits in force "
            f"(gpu {_label(key[0])}, emc {_label(key[1])})"
        )
    else:
        top = measured.get((gpus[0], emcs[0]))
        row = measured[key]
        why = f"gpu {_label(key[0])}, emc {_label(key[1])}: {row['mj_per_inference']:.1f} mJ/inference"
        if top and top is not row and top["mj_per_inference"]:
            saved = 1 - row["mj_per_inference"] / top["mj_per_inference"]
            why += (
                f" ({saved:.0%} less than at the limits in force, {top['mj_per_inference']:.1f} mJ)"
            )
    session.set(gpu=key[0], emc=key[1])
    say(f"clocks: {why}")
    return {
        "key": key,  # (gpu Hz, emc Hz) as set: where RateHold starts (not in the report)
        "chosen": {
            "gpu_mhz": None if key[0] is None else key[0] / 1e6,
            "emc_mhz": None if key[1] is None else key[1] / 1e6,
        },
        "why": why,
        "candidates": list(measured.values()),
    }


class ClockSearch:
    """The walk :func:`choose_clocks` makes over the (GPU, EMC) table on a loaded ``engine``:
    each point measured once (``measured``: (gpu Hz, emc Hz) -> its row)."""

    def __init__(self, cfg: BenchConfig, session, meter, engine, say) -> None:
        self.cfg, self.session, self.meter, self.engine, self.say = cfg, session, meter, engine, say
        self.rate = cfg.target_fps
        self.gpus = session.candidates("gpu") or [None]
        self.emcs = session.candidates("emc") or [None]
        self.probe_cfg = BenchConfig(
            cfg.model, duration=cfg.probe_seconds, batch=cfg.batch, target_fps=self.rate
        )
        slot_ms = 1e3 * cfg.batch / self.rate
        self.bound_ms = cfg.max_latency_ms or 2 * slot_ms  # late by at most one frame interval
        self.measured: dict = {}
        self.feeds = make_inputs(engine, cfg.batch)
        engine.infer(self.feeds)

    TIE = 0.05  # points this close to the least energy are measured twice before one is chosen

    def run(self):
        """The best point that holds the rate, or None."""
        self.walk([(g, self.emcs[0]) for g in self.gpus])
        key = self.best()
        for _ in range(3):  # each axis in turn from the best point, until it stays put
            if key is None:
                break
            before = key
            for axis, table in ((1, self.emcs), (0, self.gpus)):
                i = table.index(key[axis])
                if i > 0:
                    self.probe(*_at(key, axis, table[i - 1]))  # one step up
                self.walk([_at(key, axis, v) for v in table[i:]])  # and down while it pays
                key = self.best()
            if key == before:
                break
        return self.confirm(key)

    def confirm(self, key):
        """The best point after the contenders (held, within ``TIE`` of ``key``'s energy) were
        measured again: each ranked on the mean of its two probes, held if the second held."""
        if key is None:
            return None
        least = self.measured[key]["mj_per_inference"]
        for k, row in list(self.measured.items()):
            if (
                row["holds"]
                and row["probes"] == 1
                and row["mj_per_inference"] <= least * (1 + self.TIE)
            ):
                first = row["mj_per_inference"]
                again = self.probe(*k, again=True)
                if again["mj_per_inference"] is not None:
                    again["mj_per_inference"] = round((first + again["mj_per_inference"]) / 2, 3)
        return self.best()

    def probe(self, g, e, again: bool = False) -> dict:
        """The row of (``g``, ``e``): measured once and kept, or measured anew when ``again``
        (the new row counts the probes)."""
        known = self.measured.get((g, e))
        if known is not None and not again:
            return known
        cfg, engine = self.cfg, self.engine
        self.session.set(gpu=g, emc=e)
        warm(engine, self.feeds, self.probe_cfg, cfg.clock_settle)  # at the rate, new clocks
        run = timed_loop(engine, engine, self.feeds, self.probe_cfg, self.meter, lambda s: None)
        if run.interrupted:
            raise KeyboardInterrupt  # Ctrl-C or SIGTERM while choosing: stop, clocks go back
        stats = run.latencies.summary()
        n = cfg.batch * run.latencies.count
        energy = self.meter.energy_j(run.m_start, run.m_end)
        busy = stats["mean"] * stats["count"] / 1e3 / run.elapsed
        delivered = n / run.elapsed
        row = {
            "gpu_mhz": None if g is None else g / 1e6,
            "emc_mhz": None if e is None else e / 1e6,
            "mj_per_inference": None if energy is None else round(energy / n * 1e3, 3),
            "busy": round(busy, 3),
            "p99_ms": round(stats["p99"], 3),
            "delivered_ips": round(delivered, 2),
            "probes": 1 if known is None else known["probes"] + 1,
        }
        row["holds"] = (
            energy is not None
            and busy * (1 + cfg.margin) <= 1.0
            and stats["p99"] <= self.bound_ms
            and delivered >= 0.98 * self.rate
        )
        self.measured[(g, e)] = row
        mj = "n/a" if row["mj_per_inference"] is None else f"{row['mj_per_inference']:.1f} mJ"
        self.say(
            f"  clocks gpu {_label(g)} emc {_label(e)}{' again' if again else ''}: {mj}, busy {busy:.0%}, "
            f"p99 {stats['p99']:.1f} ms" + ("" if row["holds"] else " (does not hold the rate)")
        )
        return row

    def walk(self, points) -> None:
        best, worse = math.inf, 0
        for g, e in points:
            row = self.probe(g, e)
            if not row["holds"] and row["probes"] == 1:
                row = self.probe(g, e, again=True)  # a slow probe is not yet the clock's limit
            if not row["holds"]:
                break
            if row["mj_per_inference"] < best:
                best, worse = row["mj_per_inference"], 0
            else:
                worse += 1
                if worse >= 2:
                    break

    def best(self):
        held = [(k, r) for k, r in self.measured.items() if r["holds"]]
        return min(held, key=lambda kr: kr[1]["mj_per_inference"])[0] if held else None


class RateHold:
    """``--target-fps`` with ``--clocks auto`` during the run: the choice was measured over a few
    seconds, and the board may turn slower after it (heat, another process, memory traffic the
    probes did not see). When the paced loop falls ``behind`` slots behind, each clock limit goes
    one step up its table (an axis at the limit in force stays), at most one step a ``cooldown``
    second: the rate is held at a little more energy rather than lost. Every step is reported."""

    def __init__(self, session, key: tuple, say, behind: float = 2.0, cooldown: float = 1.0):
        self.session, self.key, self.say = session, key, say
        self.tables = (session.candidates("gpu") or [None], session.candidates("emc") or [None])
        self.behind, self.cooldown = behind, cooldown
        self.last = 0.0  # run seconds of the last step (none in the first cooldown)
        self.steps: list = []

    def late(self, t_run: float, slots: float) -> None:
        """The loop is ``slots`` slots late ``t_run`` s into the run."""
        if slots < self.behind or t_run - self.last < self.cooldown:
            return
        new = tuple(
            table[max(0, table.index(v) - 1)] for table, v in zip(self.tables, self.key)
        )  # tables run from the top down
        if new == self.key:
            return  # at the limits in force: the report names the settings' throughput
        self.session.set(gpu=new[0], emc=new[1])
        self.key, self.last = new, t_run
        step = {
            "t_s": round(t_run, 3),
            "slots_behind": round(slots, 1),
            "gpu_mhz": None if new[0] is None else new[0] / 1e6,
            "emc_mhz": None if new[1] is None else new[1] / 1e6,
        }
        self.steps.append(step)
        self.say(
            f"clocks: {slots:.0f} slots behind at {t_run:.1f} s: up to gpu {_label(new[0])}, "
            f"emc {_label(new[1])}"
        )


def _at(key: tuple, axis: int, value) -> tuple:
    return (value, key[1]) if axis == 0 else (key[0], value)


def _label(hz) -> str:
    return "as is" if hz is None else f"{hz / 1e6:g} MHz"
