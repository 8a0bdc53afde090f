"""Choosing the operating point under a power cap: more actuators than pacing.

Each candidate (ONNX Runtime intra-op threads, batch size, precision; on Jetson the nvpmodel mode
when the user opts in) is measured uncapped: average power P and throughput T. Paced to a cap C
above idle I, a point runs at duty ``min(1, (C - I) / (P - I))`` and so delivers about
``T * min(1, (C - I) / (P - I))`` inferences per second at (nearly) the cap: the best point is the
one with the most throughput at the cap, which at equal power is the one with the lowest energy per
inference. Pacing then covers only what remains.

Held to a rate R instead (``--target-fps``), a point runs at duty R / T and draws about
``I + (R / T) * (P - I)``: per inference ``I / R + (P - I) / T``. The idle share is the same for
every point, so the one with the least energy *above idle* per inference wins among those that
hold R with a margin (:func:`choose_for_rate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class OperatingPoint:
    label: str  # "threads=2 batch=4 precision=fp32"
    settings: dict = field(default_factory=dict)
    power_w: float = 0.0  # uncapped average
    throughput_ips: float = 0.0  # uncapped inferences (images) per second

    def capped_throughput(self, cap_w: float, idle_w: float) -> float:
        if self.power_w <= cap_w:
            return self.throughput_ips
        duty = max(0.0, (cap_w - idle_w) / max(self.power_w - idle_w, 1e-9))
        return self.throughput_ips * min(1.0, duty)

    def energy_mj(self) -> float:
        return self.power_w / self.throughput_ips * 1e3 if self.throughput_ips > 0 else float("inf")

    def paced_w(self, rate_ips: float, idle_w: float) -> float:
        """The power drawn paced to ``rate_ips`` (at most its own throughput)."""
        duty = min(1.0, rate_ips / self.throughput_ips) if self.throughput_ips > 0 else 1.0
        return idle_w + duty * max(0.0, self.power_w - idle_w)

    def mj_at_rate(self, rate_ips: float, idle_w: float) -> float:
        """Energy per inference paced to ``rate_ips`` (or at its own throughput, if lower)."""
        rate = min(rate_ips, self.throughput_ips)
        return self.paced_w(rate, idle_w) / rate * 1e3 if rate > 0 else float("inf")


def choose_for_rate(
    points: list[OperatingPoint], rate_ips: float, idle_w: float, margin: float = 0.1
) -> tuple[OperatingPoint, str]:
    """(the point that holds ``rate_ips`` at the least energy per inference, why). A point holds
    the rate when its uncapped throughput is ``margin`` above it (pacing needs room for the
    slower moments); ties go to the faster point. When none holds it, the fastest, and ``why``
    says the rate cannot be held."""
    if not points:
        raise ValueError("no operating points to choose from")
    if not rate_ips > 0:
        raise ValueError(f"the target rate must be positive, not {rate_ips}")
    holding = [p for p in points if p.throughput_ips >= rate_ips * (1 + margin)]
    if not holding:
        best = max(points, key=lambda p: p.throughput_ips)
        return best, (
            f"no operating point holds {rate_ips:g}/s with {margin:.0%} to spare: the fastest, "
            f"{best.label}, {best.throughput_ips:.1f}/s at {best.power_w:.2f} W"
        )
    ranking = sorted(holding, key=lambda p: (p.mj_at_rate(rate_ips, idle_w), -p.throughput_ips))
    best = ranking[0]
    others = "; ".join(f"{p.label}: {p.mj_at_rate(rate_ips, idle_w):.1f} mJ" for p in ranking[1:4])
    why = (
        f"{best.label}: {best.throughput_ips:.1f}/s at {best.power_w:.2f} W uncapped, paced to "
        f"{rate_ips:g}/s about {best.paced_w(rate_ips, idle_w):.2f} W, "
        f"{best.mj_at_rate(rate_ips, idle_w):.1f} mJ/inference"
        + (f" (next: {others})" if others else "")
        + (
            f"; {len(points) - len(holding)} too slow for the rate"
            if len(holding) < len(points)
            else ""
        )
    )
    return best, why


def choose(points: list[OperatingPoint], cap_w: float, idle_w: float) -> tuple[OperatingPoint, str]:
    """(the point with the most throughput under ``cap_w``, why). Ties go to lower energy."""
    if not points:
        raise ValueError("no operating points to choose from")
    best = max(points, key=lambda p: (p.capped_throughput(cap_w, idle_w), -p.energy_mj()))
    expected = best.capped_throughput(cap_w, idle_w)
    paced = best.power_w > cap_w
    ranking = sorted(points, key=lambda p: -p.capped_throughput(cap_w, idle_w))
    others = "; ".join(
        f"{p.label}: {p.capped_throughput(cap_w, idle_w):.1f}/s" for p in ranking[1:4]
    )
    why = (
        f"{best.label}: {best.throughput_ips:.1f}/s at {best.power_w:.2f} W uncapped "
        f"({best.energy_mj():.1f} mJ/inference), about {expected:.1f}/s under {cap_w:.2f} W "
        + ("with pacing" if paced else "without pacing")
        + (f" (next: {others})" if others else "")
    )
    return best, why
