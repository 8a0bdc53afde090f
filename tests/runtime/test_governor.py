"""The power governor on a simulated plant: power = idle + k * duty, with lag and sensor noise."""

from __future__ import annotations

import numpy as np
import pytest

from edgert.runtime.errors import SensorError
from edgert.runtime.power.governor import Pacer, PowerGovernor


def simulate(
    idle, k, cap, seconds=30.0, tau=0.3, noise=0.01, window=1.0, period=0.25, seed=0, **gov
):
    """Returns (times, true power, duty) sampled every 20 ms (a 50 Hz sensor)."""
    rng = np.random.default_rng(seed)
    gov = PowerGovernor(cap, idle, **gov)
    dt = 0.02
    p = idle
    times, powers, measured, duties = [], [], [], []
    last_update = 0.0
    for i in range(int(seconds / dt)):
        t = i * dt
        duty = gov.duty
        p += (idle + k * duty - p) * dt / tau  # first-order lag
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
