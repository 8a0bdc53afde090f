"""``edgert bench --sweep``: a grid of settings, each benchmarked, with the Pareto front of
latency against energy and what differed in the conditions the points ran under."""

from __future__ import annotations

import itertools
import math

from edgert.runtime.errors import EdgertError, ModelError

from .run import run_bench

SWEEP_KEYS = {
    "precision": ("fp32", "fp16", "int8", "auto"),
    "batch": None,
    "power_cap": None,
    "backend": ("auto", "tensorrt", "onnxruntime"),
    "gpu_clock": None,  # MHz of the GPU's table, or max (the limit in force)
    "emc_clock": None,  # MHz of the EMC's caps, or max
}


CLOCK_AXES = {"gpu_clock": "gpu", "emc_clock": "emc"}


def parse_sweep(words: list[str]) -> list[dict]:
    """['precision=fp32,int8', 'batch=1,4', 'power_cap=none,10'] -> the grid of settings."""
    axes = {}
    for word in words:
        key, sep, values = word.partition("=")
        if not sep or key not in SWEEP_KEYS or not values:
            raise ModelError(
                f"sweep item {word!r} must be KEY=V1,V2 with KEY one of {', '.join(SWEEP_KEYS)}"
            )
        parsed = []
        for v in values.split(","):
            v = v.strip()
            if key == "batch":
                if not v.isdigit() or int(v) < 1:
                    raise ModelError(f"sweep batch value {v!r} is not a positive integer")
                parsed.append(int(v))
            elif key in CLOCK_AXES:
                if v.lower() == "max":
                    parsed.append(None)  # the limit in force
                else:
                    try:
                        mhz = float(v)
                    except ValueError:
                        mhz = math.nan
                    if not (math.isfinite(mhz) and mhz > 0):
                        raise ModelError(f"sweep {key} value {v!r} is not a number of MHz or 'max'")
                    parsed.append(mhz)
            elif key == "power_cap":
                if v.lower() == "none":
                    parsed.append(None)
                else:
                    try:
                        parsed.append(float(v))
                    except ValueError:
                        raise ModelError(
                            f"sweep power_cap value {v!r} is not a number of watts or 'none'"
                        ) from None
            elif v not in SWEEP_KEYS[key]:
                raise ModelError(
                    f"sweep {key} value {v!r} is not one of {', '.join(SWEEP_KEYS[key])}"
                )
            else:
                parsed.append(v)
        axes[key] = parsed
    return [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]


def pareto(points: list[dict]) -> list[int]:
    """Indices of points not beaten on both latency (p50) and energy per inference."""
    front = []
    for i, a in enumerate(points):
        if a.get("energy_mj_per_inference") is None:
            continue
        dominated = any(
            b is not a
            and b.get("energy_mj_per_inference") is not None
            and b["latency_ms"]["p50"] <= a["latency_ms"]["p50"]
            and b["energy_mj_per_inference"] <= a["energy_mj_per_inference"]
            and (
                b["latency_ms"]["p50"] < a["latency_ms"]["p50"]
                or b["energy_mj_per_inference"] < a["energy_mj_per_inference"]
            )
            for b in points
        )
        if not dominated:
            front.append(i)
    return front


def run_sweep(grid: list[dict], config, say=lambda s: None) -> dict:
    """Every point of ``grid`` (settings, see :func:`parse_sweep`) benchmarked with
    ``config(setting)`` -> BenchConfig: the points (one that cannot run, an EdgertError, is kept
    as skipped with why), the Pareto front of latency, throughput and energy, the most
    energy-efficient point, and what differed in the conditions they ran under."""
    points = []
    for setting in grid:
        label = " ".join(f"{k}={'none' if v is None else v}" for k, v in setting.items())
        say(f"-- {label}")
        try:
            r = run_bench(config(setting))
        except EdgertError as exc:  # one unavailable point does not stop the sweep
            say(f"   skipped: {exc}")
            points.append({"label": label, "setting": setting, "skipped": str(exc)})
            continue
        r.pop("latencies_ms", None)
        r.pop("power_series", None)
        r["label"], r["setting"] = label, setting
        points.append(r)
    ran = [p for p in points if "skipped" not in p]
    front = pareto(ran)
    # with --target-fps: the least energy among the points that held the rate
    at_target = any(p.get("target_fps") for p in ran)
    best = min(
        (
            p
            for p in ran
            if p.get("energy_mj_per_inference") is not None
            and (not at_target or (p.get("target_fps") or {}).get("held"))
        ),
        key=lambda p: p["energy_mj_per_inference"],
        default=None,
    )
    swept = {CLOCK_AXES[k] for k in (grid[0] if grid else {}) if k in CLOCK_AXES}
    return {
        "points": points,
        "pareto": [ran[i]["label"] for i in front],
        "most_efficient": best["label"] if best else None,
        "target_ips": ran[0]["target_fps"]["target_ips"] if at_target else None,
        "conditions_mismatch": conditions_mismatch(ran, ignore=swept),
    }


def conditions_mismatch(points: list[dict], ignore: set = frozenset()) -> str | None:
    """What differed between the sweep's points: the power mode, jetson_clocks, a clock's limit
    (not those in ``ignore``: the clocks the sweep itself sets), or throttling in some and not
    others; None when they ran alike."""
    conds = [(p["label"], p.get("conditions")) for p in points if p.get("conditions")]
    if len(conds) < 2:
        return None
    found = []
    for key, what in (("nvpmodel", "power mode"), ("jetson_clocks", "jetson_clocks")):
        if key == "jetson_clocks" and "gpu" in ignore:
            continue  # a GPU clock set pinned or not is the sweep's doing
        values = {c[key] for _, c in conds}
        if len(values) > 1:
            found.append(f"{what}: " + ", ".join(f"{lab} {c[key]}" for lab, c in conds))
    limits = {name for _, c in conds for name in c["clocks"]} - set(ignore)
    for name in sorted(limits):
        values = {c["clocks"].get(name, {}).get("limit_mhz") for _, c in conds}
        if len(values) > 1:
            found.append(
                f"{name} clock limit: "
                + ", ".join(
                    f"{lab} {c['clocks'].get(name, {}).get('limit_mhz')} MHz" for lab, c in conds
                )
            )
    throttled = {c["throttled"] for _, c in conds}
    if len(throttled) > 1:
        found.append("throttled: " + ", ".join(lab for lab, c in conds if c["throttled"]))
    return "; ".join(found) or None
