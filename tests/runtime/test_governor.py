"""The power governor on a simulated plant: power = idle + k * duty, with lag and sensor noise."""

from __future__ import annotations

import numpy as np
import pytest

from edgert.runtime.errors import SensorError
from edgert.runtime.power.governor import Pacer, PowerGovernor


def simulate(
    idle,
    k,
    cap,
    seconds=30.0,
    tau=0.3,
    noise=0.01,
    window=1.0,
    period=0.25,
    seed=0,
    plant=None,
    **gov,
):
    """Returns (times, true power, duty) sampled every 20 ms (a 50 Hz sensor). ``plant`` maps a
    duty to the power it settles at (default: idle + k * duty)."""
    rng = np.random.default_rng(seed)
    gov = PowerGovernor(cap, idle, **gov)
    plant = plant or (lambda d: idle + k * d)
    dt = 0.02
    p = idle
    times, powers, measured, duties = [], [], [], []
    last_update = 0.0
    for i in range(int(seconds / dt)):
        t = i * dt
        duty = gov.duty
        p += (plant(duty) - p) * dt / tau  # first-order lag
        times.append(t)
        powers.append(p)
        measured.append(p * (1 + noise * rng.standard_normal()))
        duties.append(duty)
        if t - last_update >= period:
            n = int(window / dt)
            gov.update(
                float(np.mean(measured[-n:])),
                float(np.mean(duties[-int(period / dt) :])),
                t - last_update,
            )
            last_update = t
    return np.array(times), np.array(powers), np.array(duties)


@pytest.mark.parametrize(
    ("idle", "k", "cap"),
    [(118, 570, 250), (118, 570, 400), (118, 570, 550), (4.5, 10.0, 9.0), (4.5, 10.0, 12.0)],
)
def test_holds_the_cap_after_settling(idle, k, cap):
    t, p, duty = simulate(idle, k, cap)
    settled = t >= 5.0  # settles within a few seconds
    mean = p[settled].mean()
    assert cap * 0.95 <= mean <= cap * 1.02, (mean, cap)
    for start in np.arange(5.0, t[-1] - 2.0, 1.0):  # every 2 s window after settling
        win = (t >= start) & (t < start + 2.0)
        assert p[win].mean() <= cap * 1.02, (start, p[win].mean(), cap)


def test_no_throttling_when_uncapped_power_is_below_the_cap():
    t, p, duty = simulate(idle=118, k=570, cap=800)
    assert duty[t >= 2.0].min() == 1.0


def test_cap_below_idle_is_refused():
    with pytest.raises(SensorError, match="below the idle power"):
        PowerGovernor(cap_w=90, idle_w=118)


def test_pacer_sleeps_for_the_duty():
    now = [0.0]
    slept = []
    pacer = Pacer(
        clock=lambda: now[0], sleep=lambda s: (slept.append(s), now.__setitem__(0, now[0] + s))
    )
    pacer.after(busy_s=0.01, duty=0.25)  # 10 ms busy at 25 % duty -> 30 ms idle
    pacer.before()
    assert slept == [pytest.approx(0.03)]
    pacer.after(busy_s=0.01, duty=1.0)
    pacer.before()
    assert len(slept) == 1


NON_PROPORTIONAL = {
    # clocks go up as soon as there is work: 2 W more at any duty above zero
    "fixed overhead": (4.5, lambda d: 4.5 + (2.0 if d > 0 else 0.0) + 8.0 * d, 9.0),
    # runtime threads spin between runs: 40 % of the idle gaps cost full power
    "spinning": (4.5, lambda d: 4.5 + 10.0 * (d + 0.4 * (1 - d)), 10.5),
    "concave (DVFS)": (4.5, lambda d: 4.5 + 10.0 * d**0.6, 9.0),
    "convex": (4.5, lambda d: 4.5 + 10.0 * d**1.6, 9.0),
    "discrete GPU, fixed": (118.0, lambda d: 178.0 + 500.0 * d, 300.0),
}


@pytest.mark.parametrize("name", list(NON_PROPORTIONAL))
def test_holds_the_cap_on_plants_not_proportional_to_duty(name):
    """The feed-forward fits the measured power-vs-duty line (not one forced through idle): the
    cap holds within -5/+2 % after settling and the duty does not oscillate."""
    idle, plant, cap = NON_PROPORTIONAL[name]
    t, p, duty = simulate(idle, None, cap, seconds=40.0, plant=plant)
    settled = t >= 8.0
    assert cap * 0.95 <= p[settled].mean() <= cap * 1.02, (name, p[settled].mean() / cap)
    for start in np.arange(8.0, t[-1] - 2.0, 1.0):
        win = (t >= start) & (t < start + 2.0)
        assert p[win].mean() <= cap * 1.02, (name, start, p[win].mean() / cap)
    assert duty[settled].std() < 0.05, (name, duty[settled].std())  # no oscillation


def test_the_fitted_curve_learns_a_fixed_overhead():
    gov = PowerGovernor(20.0, 4.5)
    for duty in (0.2, 0.4, 0.6, 0.8) * 5:
        gov._seen.append((duty, 4.5 + 2.0 + 8.0 * duty))
    offset, slope = gov.curve()
    assert slope == pytest.approx(8.0, rel=0.15) and offset == pytest.approx(6.5, abs=0.7)


def test_operating_point_with_most_throughput_under_the_cap():
    from edgert.runtime.power.operating_point import OperatingPoint, choose

    idle, cap = 4.5, 9.0
    points = [
        OperatingPoint("threads=2 batch=1", {}, power_w=16.0, throughput_ips=130.0),
        OperatingPoint("threads=1 batch=8", {}, power_w=10.0, throughput_ips=110.0),
        OperatingPoint("threads=1 batch=1", {}, power_w=8.5, throughput_ips=60.0),
    ]
    best, why = choose(points, cap, idle)
    # paced to 9 W: 130 * 4.5/11.5 = 50.9/s; 110 * 4.5/5.5 = 90/s; 60/s unpaced
    assert best.label == "threads=1 batch=8" and "with pacing" in why
    assert best.capped_throughput(cap, idle) == pytest.approx(90.0)
    best, why = choose(points, 20.0, idle)  # a cap above every point: the fastest, no pacing
    assert best.label == "threads=2 batch=1" and "without pacing" in why
