"""`edgert bench --target-fps N --clocks auto` in the loop with tests/clock_plant.py (issue 40): the
plant stops and continues the real bench process so that it runs as fast as the GPU and EMC limits
written to a recreated Jetson tree allow, and turns its work into the power a board would draw at
those clocks. The point chosen is the plant's own optimum within one step of each table, the rate
is held within 2 %, and every file written is put back after the run and after SIGTERM (after
SIGKILL: tests/runtime/test_clocks.py, with ``edgert power --restore``)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.clock_plant import LAYOUTS, hz, tail_busy, truth, write_layout
from tests.clock_plant import bench_in_the_loop as clocked
from tests.power_plant import bench_in_the_loop as free


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    pytest.importorskip("torch")
    from edgert.export import export_model

    return export_model("zoo:mobilenet_v2", tmp_path_factory.mktemp("clk") / "mv2.edgert").bundle


def _steps(table_mhz: list, a: float, b: float) -> int:
    return abs(table_mhz.index(a) - table_mhz.index(b))


def test_the_chosen_clocks_are_the_plants_optimum_and_hold_the_rate(mobilenet, tmp_path):
    base = free(mobilenet, tmp_path / "free", seconds=3.0)
    rate = round(0.25 * base["throughput_ips"], 1)
    root = tmp_path / "jp5"
    r, rc, err = clocked(mobilenet, root, "orin-jp5", "--target-fps", str(rate), "--clocks", "auto")
    assert rc == 0, err
    target = r["target_fps"]
    assert target["held"] and abs(target["delivered_ips"] - rate) <= 0.02 * rate, target
    choice = r["clock_choice"]
    chosen = choice["chosen"]
    # the truth: the plant's power at every table point for the work the run did at the rate
    threads = r["operating_point"]["chosen"].count("intra_op_threads=2") + 1
    busy = tail_busy(root, hz(chosen["gpu_mhz"]), hz(chosen["emc_mhz"]))
    rows = [row for row in truth("orin-jp5", busy, threads) if row[3]]
    best = rows[0]
    spec = LAYOUTS["orin-jp5"]
    assert _steps(spec["gpu_table"], chosen["gpu_mhz"], best[1] / 1e6) <= 1, (chosen, rows[:4])
    assert _steps(spec["emc_table"], chosen["emc_mhz"], best[2] / 1e6) <= 1, (chosen, rows[:4])
    # not the top clocks, nor the lowest: the optimum is in the middle
    assert 306 < chosen["gpu_mhz"] < 918, chosen
    top = next(c for c in choice["candidates"] if c["gpu_mhz"] == 918 and c["emc_mhz"] == 3199)
    mine = next(
        c
        for c in choice["candidates"]
        if (c["gpu_mhz"], c["emc_mhz"]) == (chosen["gpu_mhz"], chosen["emc_mhz"])
    )
    assert mine["mj_per_inference"] < top["mj_per_inference"], (mine, top)
    # the report says what edgert set, and the files hold what they held before
    assert r["clocks_set"]["gpu"]["set_max_mhz"] == chosen["gpu_mhz"]
    assert r["clocks_set"]["gpu"]["before_max_mhz"] == 918
    _restored(root)


def _restored(root: Path) -> None:
    from edgert.runtime.power.clocks import state_path

    layout = (root / "layout").read_text()
    fresh = write_layout(root.parent / (root.name + "-fresh"), layout)
    for path, value in fresh["files"].items():
        mine = Path(str(path).replace(str(root.parent / (root.name + "-fresh")), str(root)))
        assert mine.read_text().strip() == value.strip(), mine
    assert not state_path(root).exists()


def test_sigterm_mid_run_puts_every_clock_back(mobilenet, tmp_path):
    root = tmp_path / "thor"
    r, rc, err = clocked(
        mobilenet,
        root,
        "thor",
        "--target-fps",
        "10",
        "--clocks",
        "auto",
        seconds=30,
        kill_after=2.0,
        kill_with=signal.SIGTERM,
    )
    assert rc == 143, (rc, err)
    assert "Traceback" not in err, err
    _restored(root)
