"""A temperature cap in a closed loop with a real process: tests/thermal_plant.py turns the CPU time
of a real `edgert bench` into the temperature of a recreated thermal zone, with a first-order lag
(tau 3 s) and an ambient of 40 °C (issue 26). Ratios and temperatures of the plant, no absolute
times."""

from __future__ import annotations

import pytest

from tests.thermal_plant import bench_in_the_loop

pytestmark = [pytest.mark.subprocess, pytest.mark.plant]


def _settled(series, start_s: float) -> list[float]:
    return [temp for t, temp in series if t >= start_s]


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    """A model whose inference takes milliseconds, as a camera's does: pacing's own cost (a sleep
    per inference) is then small beside it, as on a device."""
    pytest.importorskip("torch")
    from edgert.export import export_model

    return export_model("zoo:mobilenet_v2", tmp_path_factory.mktemp("temp") / "mv2.edgert").bundle


def test_temp_cap_settles_at_the_cap_and_keeps_the_linear_share(mobilenet, tmp_path):
    bundle = mobilenet
    before, heat_before = bench_in_the_loop(bundle, tmp_path / "before", seconds=10.0)
    uncapped_c = sum(_settled(heat_before, 7.0)) / len(_settled(heat_before, 7.0))
    ambient = 40.0
    cap = ambient + 0.6 * (uncapped_c - ambient)
    assert uncapped_c > cap + 3  # uncapped, it settles well above the cap
    capped, heat = bench_in_the_loop(
        bundle, tmp_path / "capped", "--temp-cap", f"{cap:.2f}", seconds=45.0
    )
    after, _ = bench_in_the_loop(bundle, tmp_path / "after", seconds=6.0)
    # settled: the last 15 s of 45 (the slow integral that removes the fitted model's bias takes
    # tens of seconds on a loaded VM; a CI run judged from 20 s ended 1.1 °C under the cap)
    tail = _settled(heat, 30.0)
    settled = sum(tail) / len(tail)
    assert cap - 1.0 <= settled <= cap, (settled, cap)  # at the cap, from below
    assert max(tail) <= cap + 1.0, (max(tail), cap)  # no overshoot of more than 1 °C once settled
    report = capped["power_cap"]["temperature"]
    assert report["cap_c"] == round(cap, 2) and report["duty"] < 0.95
    # Throughput for the heat: this plant's temperature is linear in the CPU time, so the duty
    # that settles at the cap is the linear share of the headroom, (cap - ambient) / (uncapped -
    # ambient). Pacing has a cost (the sleep granularity, the approach from below, 0.3 °C of
    # margin), and this VM's speed drifts by a third within minutes: uncapped throughput is the
    # mean of a run before and after, and the bound is 0.7 of the linear share.
    free_ips = (before["throughput_ips"] + after["throughput_ips"]) / 2
    linear = (cap - ambient) / (uncapped_c - ambient) * free_ips
    assert capped["throughput_ips"] >= 0.7 * linear, (capped["throughput_ips"], linear)
