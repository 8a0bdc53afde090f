"""edgert power: the power sensor, its rails and total, and the Jetson power mode."""

from __future__ import annotations

from edgert.apps.argtypes import nonneg_int
from edgert.runtime import json_text


def add_parser(sub) -> None:
    p = sub.add_parser(
        "power",
        help="power sensors, rails, total and power mode (e.g. edgert power --json)",
        description="Show the power sensor edgert uses, every rail, the total (input rail, or the sum "
        "of rails), the thermal zones with their trip points, the GPU, CPU and EMC clocks, and on "
        "Jetson the current nvpmodel mode, the modes available and jetson_clocks.",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print source, total_w (or null with reason), rails, ...",
    )
    p.add_argument(
        "--sysfs-root", metavar="DIR", help="read sysfs under DIR (default / or $EDGERT_SYSFS_ROOT)"
    )
    p.add_argument("--no-nvml", action="store_true", help="do not try NVML")
    p.add_argument(
        "--restore",
        action="store_true",
        help="put back the GPU / EMC clock limits a --clocks run recorded and could not restore "
        "itself (it was killed)",
    )
    p.add_argument("--device", type=nonneg_int, default=0, help="GPU index for NVML (default 0)")
    p.set_defaults(func=run)


def snapshot(root=None, nvml: bool = True, device: int = 0) -> dict:
    from edgert.runtime.errors import SensorError
    from edgert.runtime.power import nvpmodel
    from edgert.runtime.power.discovery import discover
    from edgert.runtime.power.sensors import sysfs_root

    found = discover(root, nvml=nvml, device=device)
    facts: dict = {
        "source": None,
        "total_w": None,
        "reason": found.reason,
        "rails": {},
        "tried": found.tried,
    }
    if found.sensor is not None:
        try:
            sample = found.sensor.read()
            facts.update(
                source=found.sensor.describe(),
                total_w=round(sample.total_w, 3),
                rails={k: round(v, 3) for k, v in sample.rails.items()},
                reason=None,
            )
        except SensorError as exc:
            facts["reason"] = str(exc)
        finally:
            found.sensor.close()
    from edgert.runtime.power.conditions import read_conditions, suggested_temp_cap

    cond = read_conditions(root, nvml=nvml, device=device)
    facts["thermal"] = [z.to_dict() for z in cond.zones]
    facts["clocks"] = [c.to_dict() for c in cond.clocks]
    facts["clocks_pinned"] = cond.jetson_clocks
    if cond.gpu is not None:
        facts["gpu"] = cond.gpu
    facts["suggested_temp_cap_c"] = suggested_temp_cap(cond)
    facts["clock_controls"] = clock_controls(root)
    modes = nvpmodel.read(sysfs_root(root))
    facts["nvpmodel"] = (
        {
            "current": modes.current_name,
            "current_id": modes.current_id,
            "modes": modes.modes,
            "jetson_clocks": modes.jetson_clocks,
        }
        if modes
        else None
    )
    return facts


def clock_controls(root=None) -> dict:
    """The clocks --clocks / a sweep can limit: each one's table, the limits in force, and a
    record of limits a killed run left (``edgert power --restore`` puts them back)."""
    import os

    from edgert.runtime.power import clocks

    found = clocks.find(root)
    out: dict = {"domains": [], "reasons": list(found.reasons), "pending_restore": None}
    for d in found.domains:
        try:
            entry = d.to_dict()
        except clocks.ClockError as exc:
            entry = {"name": d.name, "node": str(d.node), "reason": str(exc)}
        entry["writable"] = all(os.access(f, os.W_OK) for f in d.files())
        out["domains"].append(entry)
    state = clocks.state_path(root)
    if state.is_file():
        out["pending_restore"] = str(state)
    return out


def run(args) -> int:
    if args.restore:
        from edgert.runtime.power import clocks

        restored = clocks.restore_saved(args.sysfs_root, print)
        if not restored:
            print(
                f"clocks: nothing to put back (no record at {clocks.state_path(args.sysfs_root)})"
            )
        return 0
    facts = snapshot(args.sysfs_root, nvml=not args.no_nvml, device=args.device)
    if args.json:
        print(json_text.dumps(facts, indent=2))
        return 0
    if facts["total_w"] is None:
        print(f"power: unavailable ({facts['reason']})")
    else:
        print(f"power: {facts['total_w']:.2f} W from {facts['source']}")
        for name, watts in facts["rails"].items():
            print(f"  {name:<24} {watts:8.3f} W")
    for z in facts["thermal"]:
        passive = [t["temp_c"] for t in z["trips"] if t["type"] == "passive"]
        trip = f"  (passive trip {min(passive):.1f} °C)" if passive else ""
        temp = f"{z['temp_c']:6.1f} °C" if z["temp_c"] is not None else f"n/a ({z.get('reason')})"
        print(f"  {z['name']:<24} {temp}{trip}")
    for c in facts["clocks"]:
        cur = f"{c['cur_mhz']:8.1f} MHz" if c["cur_mhz"] is not None else f"n/a ({c.get('reason')})"
        limits = f"  (max {c['max_mhz']:.1f})" if c["max_mhz"] is not None else ""
        print(f"  clock {c['name']:<18} {cur}{limits}")
    if facts.get("gpu"):
        print(f"  gpu (NVML)               {facts['gpu']}")
    for d in facts["clock_controls"]["domains"]:
        if "reason" in d:
            print(f"  {d['name']} limit: n/a ({d['reason']})")
            continue
        table = " ".join(f"{f:g}" for f in d["available_mhz"])
        low = f"min {d['min_mhz']:g}, " if d["min_mhz"] is not None else ""
        print(
            f"  {d['name']} limit: {low}max {d['max_mhz']:g} MHz of {table} MHz"
            + ("" if d["writable"] else " (read-only for this user)")
        )
    if facts["clock_controls"]["pending_restore"]:
        print(
            f"clocks: a killed --clocks run left limits recorded in "
            f"{facts['clock_controls']['pending_restore']}: edgert power --restore puts them back"
        )
    if facts["suggested_temp_cap_c"] is not None:
        print(
            f"suggested --temp-cap: {facts['suggested_temp_cap_c']:.0f} (a few degrees below the "
            "lowest passive trip point)"
        )
    nv = facts["nvpmodel"]
    if nv:
        modes = ", ".join(f"{i}:{n}" for i, n in sorted(nv["modes"].items()))
        print(
            f"nvpmodel: {nv['current'] or 'unknown'} (modes {modes}); jetson_clocks {nv['jetson_clocks']}"
        )
    else:
        print("nvpmodel: not a Jetson (no /etc/nvpmodel.conf)")
    return 0
