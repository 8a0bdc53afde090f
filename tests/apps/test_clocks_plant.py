"""`edgert bench --target-fps N --clocks auto` in the loop with tests/clock_plant.py (issue 40): the
plant stops and continues the real bench process so that it runs as fast as the GPU and EMC limits
written to a recreated Jetson tree allow, and turns its work into the power a board would draw at
those clocks. The point chosen is the plant's own optimum within one step of each table (points
within the plant's 1 % power noise of the least are all the optimum), the rate is held within
2 % (stepping the clocks up if the run falls behind), and every file written is put back after the run and after SIGTERM (after
SIGKILL: tests/runtime/test_clocks.py, with ``edgert power --restore``)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.clock_plant import LAYOUTS, hz, power_w, tail_busy, truth, window_power, write_layout
from tests.clock_plant import bench_in_the_loop as clocked
from tests.power_plant import bench_in_the_loop as free

pytestmark = pytest.mark.plant


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    pytest.importorskip("torch")
    from edgert.export import export_model

    return export_model("zoo:mobilenet_v2", tmp_path_factory.mktemp("clk") / "mv2.edgert").bundle


def _steps(table_mhz: list, a: float, b: float) -> int:
    return abs(table_mhz.index(a) - table_mhz.index(b))


def _measured(choice: dict) -> dict:
    """The points a ``--clocks auto`` report measured: (gpu MHz, emc MHz) -> its row."""
    return {(c["gpu_mhz"], c["emc_mhz"]): c for c in choice["candidates"]}


@pytest.mark.subprocess
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
    # the optimum: the least power, and any point within the plant's own 1 % power noise of it
    # (where the curve is that flat no measurement can tell them apart)
    optimum = [row for row in rows if row[0] <= 1.01 * rows[0][0]]
    spec = LAYOUTS["orin-jp5"]
    near = [
        row
        for row in optimum
        if _steps(spec["gpu_table"], chosen["gpu_mhz"], row[1] / 1e6) <= 1
        and _steps(spec["emc_table"], chosen["emc_mhz"], row[2] / 1e6) <= 1
    ]
    assert near, (chosen, rows[:4])
    # not the top clocks, nor the lowest unless the plant's optimum is there: the rate is a
    # quarter of this machine's own throughput, so the work is ~0.4 of a core (0.43 here) and the
    # optimum in the middle (510 MHz, EMC 2133); under ~0.33 of a core 306 MHz at EMC 665.6 is
    # the plant's least power (tests/clock_plant.py's `truth`), and choosing it is right
    assert chosen["gpu_mhz"] < 918, chosen
    assert chosen["gpu_mhz"] > 306 or any(row[1] == hz(306) for row in optimum), (chosen, rows[:4])
    measured = _measured(choice)
    mine, top = measured[chosen["gpu_mhz"], chosen["emc_mhz"]], measured[918, 3199]
    assert mine["mj_per_inference"] < top["mj_per_inference"], (mine, top)
    # the report says what edgert set (the choice, or the last step up if the run fell behind),
    # and the files hold what they held before
    last = choice["steps"][-1] if choice["steps"] else chosen
    assert r["clocks_set"]["gpu"]["set_max_mhz"] == last["gpu_mhz"], choice["steps"]
    assert r["clocks_set"]["gpu"]["before_max_mhz"] == 918
    _restored(root)


def test_a_run_that_falls_behind_steps_the_clocks_up_one_step_a_second(tmp_path):
    """RateHold on the JetPack 5 tree: late by two slots or more, each limit goes one step up
    its table (at most one step a second, none in the run's first second), written to the files
    and reported, until both are at the limits in force; the files go back at the session's end."""
    from edgert.apps.bench import RateHold
    from edgert.runtime.power import clocks

    tree = write_layout(tmp_path / "jp5", "orin-jp5")
    said = []
    with clocks.ClockSession(clocks.find(tmp_path / "jp5"), tmp_path / "jp5") as s:
        s.set(gpu=hz(510), emc=hz(665.6))
        hold = RateHold(s, (hz(510), hz(665.6)), said.append)
        hold.late(0.5, 9.0)  # the first second: the loop starts late after a warm-up
        hold.late(1.2, 1.5)  # under two slots late: pacing jitter
        assert hold.steps == [] and (tree["gpu"] / "max_freq").read_text() == str(hz(510))
        hold.late(1.3, 3.0)
        assert (tree["gpu"] / "max_freq").read_text() == str(hz(612))
        assert tree["emc"].read_text().strip() == str(hz(2133))
        hold.late(1.9, 8.0)  # within a second of the last step
        assert len(hold.steps) == 1
        for t in (2.4, 3.5, 4.6, 5.7, 6.8):
            hold.late(t, 4.0)
        assert [(st["gpu_mhz"], st["emc_mhz"]) for st in hold.steps] == [
            (612, 2133),
            (714, 3199),
            (816, 3199),
            (918, 3199),
        ]
        assert hold.steps[0] == {"t_s": 1.3, "slots_behind": 3.0, "gpu_mhz": 612, "emc_mhz": 2133}
        assert "3 slots behind at 1.3 s: up to gpu 612 MHz, emc 2133 MHz" in said[0]
    assert (tree["gpu"] / "max_freq").read_text().strip() == str(hz(918))


def _restored(root: Path) -> None:
    from edgert.runtime.power.clocks import state_path

    layout = (root / "layout").read_text()
    fresh = write_layout(root.parent / (root.name + "-fresh"), layout)
    for path, value in fresh["files"].items():
        mine = Path(str(path).replace(str(root.parent / (root.name + "-fresh")), str(root)))
        assert mine.read_text().strip() == value.strip(), mine
    assert not state_path(root).exists()


@pytest.mark.subprocess
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


@pytest.mark.subprocess
def test_a_sweep_over_the_clocks_marks_the_least_energy_at_the_rate(mobilenet, tmp_path):
    root = tmp_path / "jp6"
    r, rc, err = clocked(
        mobilenet,
        root,
        "orin-jp6",
        "--target-fps",
        "12",
        "--sweep",
        "gpu_clock=max,510",
        "emc_clock=max,2133",
        seconds=3,
    )
    assert rc == 0, err
    points = {p["label"]: p for p in r["points"]}
    assert len(points) == 4 and not any("skipped" in p for p in points.values())
    for p in points.values():
        assert p["target_fps"]["held"], p["label"]
        want = p["setting"]["gpu_clock"]
        got = (p["clocks_set"] or {}).get("gpu", {}).get("set_max_mhz")
        assert got == want, (p["label"], p["clocks_set"])
    # each point's energy is the plant's: its mean power (before the sensor's 1 % noise) over
    # the point's own window, per inference at the rate delivered. The power the plant's model
    # gives for the cores busy is not the truth here: this VM's speed drifts within a window
    # (a point's median work was 6.7 % under its mean on a loaded CI run). The window is the
    # stretch's last `seconds`, within 0.1 % of the bench's on a quiet machine and 3.1 % with
    # both cores loaded (measured): 6 % allowed.
    truth_mj = {}
    for label, p in points.items():
        s = p["setting"]
        f, e = hz(s["gpu_clock"] or 918), hz(s["emc_clock"] or 3199)
        truth_mj[label] = window_power(root, f, e, p["seconds"]) * 1e3 / p["throughput_ips"]
        ratio = p["energy_mj_per_inference"] / truth_mj[label]
        assert 0.94 <= ratio <= 1.06, (label, p["energy_mj_per_inference"], truth_mj[label])
    # the plant's model at equal work: 510 MHz and EMC 2133 draw the least at a rate both hold
    # (by 4.5 % over EMC 3199, 20 % over 918 MHz); the sweep marks the least it measured, which
    # is 510 MHz and the least of the truth within its noise
    chosen = r["most_efficient"]
    assert chosen == min(points, key=lambda k: points[k]["energy_mj_per_inference"]), chosen
    assert chosen.startswith("gpu_clock=510.0 "), chosen
    assert truth_mj[chosen] <= 1.06 * min(truth_mj.values()), (chosen, truth_mj)
    equal = {
        (g, e): power_w("orin-jp6", hz(g), hz(e), 0.18, True) for g, e in ((510, 2133), (510, 3199))
    }
    assert equal[510, 2133] < 0.96 * equal[510, 3199], equal
    assert r["target_ips"] == 12
    assert r["conditions_mismatch"] is None  # the clocks the sweep set are not a mismatch
    _restored(root)


@pytest.mark.subprocess
def test_camera_holds_its_frame_rate_at_the_clocks_it_measured_best(mobilenet, tmp_path):
    """`edgert camera --target-fps N --clocks auto`: the clock points measured on the model
    before the stream starts, N evenly spaced frames a second inferred, the clocks put back."""
    import json
    import subprocess
    import sys

    root = tmp_path / "jp5"
    write_layout(root, "orin-jp5")
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "camera",
            str(mobilenet),
            "--source",
            "synthetic://",
            "--max-frames",
            "90",
            "--target-fps",
            "10",
            "--clocks",
            "auto",
            "--sysfs-root",
            str(root),
            "--json",
            "--headless",
        ],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    plant = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.clock_plant",
            str(root),
            str(proc.pid),
            "--layout",
            "orin-jp5",
        ],
        cwd=repo,
    )
    out, err = proc.communicate(timeout=600)
    plant.wait(timeout=10)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    choice = summary["clock_choice"]
    chosen = choice["chosen"]
    # the point is the least energy the camera measured, and less than at the top clocks. Where
    # it lies depends on this machine's speed, the rate being fixed: 10 inferences a second fill
    # 8 % of this VM's time at the top clocks and the whole camera run keeps 0.23 of a core busy;
    # under ~0.33 of a core the plant's least power is 306 MHz at EMC 665.6, and from ~0.15 up
    # 510 MHz at 2133 is within its 1 % noise of it (tests/clock_plant.py's `truth`): this VM
    # chose 510/2133, a CI run 306/665.6, both right. That the optimum is found in the middle of
    # the table is the first test's, whose rate is a share of the machine's own throughput.
    measured = _measured(choice)
    mine, top = measured[chosen["gpu_mhz"], chosen["emc_mhz"]], measured[918, 3199]
    held = [c["mj_per_inference"] for c in measured.values() if c["holds"]]
    assert mine["holds"] and mine["mj_per_inference"] == min(held), choice
    assert mine["mj_per_inference"] < top["mj_per_inference"], choice  # so not the top clocks
    assert summary["clocks_set"]["gpu"]["set_max_mhz"] == chosen["gpu_mhz"]
    gate = summary["streams"][0]["gate"]
    assert gate["reasons"] == {"rate": 30} and gate["skipped"] == 60, gate  # 30 fps held to 10
    _restored(root)
