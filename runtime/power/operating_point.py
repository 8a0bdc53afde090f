"""Choosing the operating point under a power cap: more actuators than pacing.

Each candidate (ONNX Runtime intra-op threads, batch size, precision; on Jetson the nvpmodel mode
when the user opts in) is measured uncapped: average power P and throughput T. Paced to a cap C
above idle I, a point runs at duty ``min(1, (C - I) / (P - I))`` and so delivers about
``T * min(1, (C - I) / (P - I))`` inferences per second at (nearly) the cap: the best point is the
one with the most throughput at the cap, which at equal power is the one with the lowest energy per
inference. Pacing then covers only what remains.
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
