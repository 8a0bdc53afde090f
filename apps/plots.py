"""Plots for bench reports (matplotlib, headless Agg backend)."""

from __future__ import annotations

from pathlib import Path

from edgert.runtime.errors import require


def _pyplot():
    matplotlib = require("matplotlib", "pip install 'edgert[plot]'", "--plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _conditions_panel(ax, cond: dict) -> None:
    """The hottest zone's temperature and the GPU clock over the run, throttling shaded."""
    heat = cond["series"]
    t = heat["t"]
    temps = [(x, v) for x, v in zip(t, heat["hottest_c"]) if v is not None]
    if temps:
        ax.plot(*zip(*temps), color="#cc3311", lw=1, label="hottest zone (°C)")
        ax.set_ylabel("temperature (°C)")
    clocks = [(x, v) for x, v in zip(t, heat["gpu_mhz"]) if v is not None]
    if clocks:
        ax_clock = ax.twinx()
        ax_clock.plot(*zip(*clocks), color="#0077bb", lw=1, label="GPU clock (MHz)")
        ax_clock.set_ylabel("GPU clock (MHz)")
        ax_clock.legend(loc="lower right")
    for span in cond.get("throttling", []):
        ax.axvspan(span["from_s"], span["to_s"], color="#ee7733", alpha=0.25)
    ax.set_xlabel("time (s)")
    ax.set_title("heat and clocks" + (" (throttled: shaded)" if cond.get("throttled") else ""))
    if temps:
        ax.legend(loc="upper left")


def bench_plot(result: dict, path: str | Path) -> Path:
    """Latency histogram and power over time (or why there is no power)."""
    from edgert.runtime import atomic

    plt = _pyplot()
    cond = result.get("conditions") or {}
    heat = cond.get("series") or {}
    panels = (
        3 if any(v is not None for v in heat.get("hottest_c", []) + heat.get("gpu_mhz", [])) else 2
    )
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4))
    ax1, ax2 = axes[0], axes[1]
    if panels == 3:
        _conditions_panel(axes[2], cond)
    lat = result["latencies_ms"]
    ax1.hist(lat, bins=min(60, max(10, len(lat) // 20)), color="#4477aa")
    for key, style in (("p50", "-"), ("p99", "--")):
        ax1.axvline(
            result["latency_ms"][key],
            color="k",
            linestyle=style,
            label=f"{key} {result['latency_ms'][key]:.2f} ms",
        )
    ax1.set_xlabel("latency (ms)")
    ax1.set_ylabel("inferences")
    ax1.set_title(f"{Path(result['model']).name}: {result['backend']}, batch {result['batch']}")
    ax1.legend()
    series = result.get("power_series")
    if series:
        ax2.plot(series["t"], series["w"], color="#cc6677", lw=1)
        if result["power_w"] and result["power_w"].get("idle") is not None:
            ax2.axhline(result["power_w"]["idle"], color="grey", linestyle=":", label="idle")
        if result.get("power_cap_w"):
            ax2.axhline(result["power_cap_w"], color="k", linestyle="--", label="cap")
        ax2.set_xlabel("time (s)")
        ax2.set_ylabel("power (W)")
        mj = result["energy_mj_per_inference"]
        ax2.set_title(f"avg {result['power_w']['avg']:.2f} W, {mj:.2f} mJ/inference")
        ax2.legend()
    else:
        ax2.axis("off")
        ax2.text(
            0.5,
            0.5,
            f"power unavailable:\n{result['power_reason']}",
            ha="center",
            va="center",
            wrap=True,
        )
    fig.tight_layout()
    return _save(fig, plt, Path(path), atomic)


def pareto_plot(points: list[dict], front: list[int], path: str | Path) -> Path:
    from edgert.runtime import atomic

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 5))
    measured = [
        (i, p) for i, p in enumerate(points) if p.get("energy_mj_per_inference") is not None
    ]
    if measured:
        xs = [p["latency_ms"]["p50"] for _, p in measured]
        ys = [p["energy_mj_per_inference"] for _, p in measured]
        ax.scatter(xs, ys, color="#4477aa")
        for (_i, p), x, y in zip(measured, xs, ys):
            ax.annotate(p["label"], (x, y), fontsize=8, xytext=(4, 4), textcoords="offset points")
        best = min(measured, key=lambda ip: ip[1]["energy_mj_per_inference"])
        ax.scatter(
            [best[1]["latency_ms"]["p50"]],
            [best[1]["energy_mj_per_inference"]],
            s=160,
            facecolors="none",
            edgecolors="#228833",
            label="most energy-efficient",
        )
        fx = sorted(
            (points[i]["latency_ms"]["p50"], points[i]["energy_mj_per_inference"]) for i in front
        )
        ax.plot([a for a, _ in fx], [b for _, b in fx], color="#cc6677", label="Pareto front")
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no power sensor: latency only", ha="center", transform=ax.transAxes)
    ax.set_xlabel("p50 latency (ms)")
    ax.set_ylabel("energy per inference (mJ)")
    fig.tight_layout()
    return _save(fig, plt, Path(path), atomic)


def camera_plot(summary: dict, path: str | Path) -> Path:
    """Per-stage latency percentiles of a camera run, with FPS, drops and power in the title."""
    from edgert.runtime import atomic

    plt = _pyplot()
    order = ("capture_age", "preprocess", "infer", "postprocess", "output", "end_to_end")
    stages = [k for k in order if k in summary["latency_ms"]]
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, key in enumerate(("p50", "p90", "p99")):
        ax.bar(
            [x + i * 0.27 for x in range(len(stages))],
            [summary["latency_ms"][s][key] for s in stages],
            width=0.27,
            label=key,
        )
    ax.set_xticks([x + 0.27 for x in range(len(stages))], stages)
    ax.set_ylabel("ms")
    power = (
        f"{summary['power_w']:.2f} W"
        if summary.get("power_w")
        else f"power unavailable ({summary.get('power_reason', '')[:40]})"
    )
    ax.set_title(
        f"{summary['fps']:.1f} fps, {summary['frames_dropped']} dropped, {summary['backend']}; {power}",
        fontsize=9,
    )
    ax.legend()
    fig.tight_layout()
    return _save(fig, plt, Path(path), atomic)


def _save(fig, plt, path: Path, atomic) -> Path:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lstrip(".") or "png", dpi=110)
    plt.close(fig)
    atomic.write_bytes(path, buf.getvalue())
    return path
