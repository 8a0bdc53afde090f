"""A power cap in a closed loop with a real process: tests/power_plant.py turns the CPU time of a
real `edgert bench` into the readings of a recreated Orin NX INA3221 tree. Ratios only, no absolute
times (issue: power-capped inference that keeps its throughput)."""

from __future__ import annotations

import pytest

from edgert.export import export_model
from tests.power_plant import bench_in_the_loop, settled_mean

pytestmark = [pytest.mark.subprocess, pytest.mark.plant]


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    pytest.importorskip("torch")
    return export_model("zoo:mobilenet_v2", tmp_path_factory.mktemp("cap") / "mv2.edgert").bundle


def test_cap_holds_and_keeps_its_throughput(mobilenet, tmp_path):
    before = bench_in_the_loop(mobilenet, tmp_path / "before", seconds=6.0)
    idle = before["power_w"]["idle"]
    uncapped_w = before["power_w"]["avg"]
    cap = idle + 0.5 * (uncapped_w - idle)
    capped = bench_in_the_loop(
        mobilenet, tmp_path / "capped", "--power-cap", f"{cap:.3f}", seconds=14.0
    )
    after = bench_in_the_loop(mobilenet, tmp_path / "after", seconds=6.0)
    assert capped["spin"] is False  # nothing busy-waits under a cap
    achieved = settled_mean(capped)
    assert achieved <= 1.02 * cap, (achieved / cap, cap)
    # below the cap only when the governor was not throttling at all (duty 1: other load on the
    # machine kept the process from drawing that much)
    assert achieved >= 0.95 * cap or capped["power_cap"]["duty"] >= 0.99, (achieved / cap, capped)
    # Throughput for the power: half the span above idle should buy about half the images. This
    # VM's speed drifts by a third within a minute, so the uncapped throughput is measured before
    # and after the capped run and averaged. Measured here (one uncapped run before only): capped
    # without spinning 0.79-1.36 of the linear share, with the runtime spinning (--spin on)
    # 0.28-0.42 -- the bound sits between.
    free_ips = (before["throughput_ips"] + after["throughput_ips"]) / 2
    linear = (cap - idle) / (uncapped_w - idle) * free_ips
    assert capped["throughput_ips"] >= 0.6 * linear, (
        capped["throughput_ips"],
        linear,
        before,
        after,
    )
