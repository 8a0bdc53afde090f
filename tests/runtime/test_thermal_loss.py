"""Round four of the hostile-input battery (issue 33): a temperature cap whose sensor fails
mid-run. The zones are the Orin NX (JetPack 6) tree of tests/runtime/test_thermal.py (its sources
are cited there: zone names and order from tegra234-bpmp-thermal.h); the engine is a real ONNX
Runtime one. A zone that stops reading is said; with none left the cap holds its lowest duty
(it kept its last duty, and a sensor lost while cool left the board uncapped, without a word)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from edgert.runtime.engine import Engine
from edgert.runtime.errors import SensorError
from edgert.runtime.power.governor import CappedRunner
from edgert.runtime.power.thermal import HottestZone
from tests.runtime.test_power_sensors import write
from tests.runtime.test_thermal import orin_nx_jp6, zones
from tests.tiny import matmul_model


def _zone(root, name: str):
    return next(
        p
        for p in (root / "sys/class/thermal").iterdir()
        if (p / "type").read_text().strip() == name
    )


def _run(runner, n: int) -> None:
    x = np.ones((1, 4), np.float32)
    for _ in range(n):
        runner.infer(x)


@pytest.mark.parametrize("failure", ["junk", "vanished"])
def test_a_zone_lost_mid_run_is_said_and_no_zone_left_holds_the_lowest_duty(
    tmp_path, caplog, failure
):
    orin_nx_jp6(tmp_path)
    zone = HottestZone(tmp_path)
    with Engine.load(matmul_model(tmp_path / "m.onnx")) as engine:
        runner = CappedRunner(engine, None, None, None, period_s=0.0, temp_cap_c=90.0, zone=zone)
        _run(runner, 5)
        assert runner.duty == 1.0  # 52 °C under a 90 °C cap: uncapped
        with caplog.at_level(logging.WARNING):
            tj = _zone(tmp_path, "tj-thermal") / "temp"
            tj.write_text("abc\n") if failure == "junk" else tj.unlink()
            _run(runner, 3)
            assert "thermal zone tj-thermal stopped reading" in caplog.text
            assert caplog.text.count("stopped reading") == 1  # said once, not per step
            assert runner.duty == 1.0  # the other zones still read
            for name in (
                "cpu-thermal",
                "gpu-thermal",
                "soc0-thermal",
                "soc1-thermal",
                "soc2-thermal",
            ):
                path = _zone(tmp_path, name) / "temp"
                path.write_text("abc\n") if failure == "junk" else path.unlink()
            _run(runner, 3)
            assert (
                "no thermal zone can be read: the temperature cap holds its lowest duty"
                in caplog.text
            )
            assert runner.duty == runner.thermal.min_duty
            write(_zone(tmp_path, "cpu-thermal") / "temp", 52000)  # back
            _run(runner, 3)
        assert "thermal zone cpu-thermal reads again" in caplog.text
        assert (
            runner.thermal.min_duty
            < runner.duty
            <= runner.thermal.min_duty + 3 * runner.thermal.slew + 1e-9
        )
        assert runner.report()["temperature"]["steps_without_reading"] == 3


def test_no_usable_zone_says_where_it_looked_and_why_each_failed(tmp_path):
    with pytest.raises(SensorError, match=r"sys/class/thermal has no thermal_zone folders") as info:
        HottestZone(tmp_path / "empty")
    assert str(tmp_path / "empty") in str(info.value)
    zones(tmp_path / "junk", [("CPU-therm", "abc", []), ("GPU-therm", "-256000", [])])
    with pytest.raises(SensorError) as info:
        HottestZone(tmp_path / "junk")
    assert "CPU-therm:" in str(info.value) and "GPU-therm:" in str(info.value)
    zones(tmp_path / "pmic", [("PMIC-Die", 100000, [])])
    with pytest.raises(SensorError, match="has only PMIC-Die, which do not measure the die"):
        HottestZone(tmp_path / "pmic")
