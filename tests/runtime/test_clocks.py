"""Clock limits on Jetson (issue 40): finding the GPU devfreq node and the EMC cap on the three
board layouts, the candidates inside the power mode's envelope, writes in an order devfreq takes,
the originals recorded before the first write and put back (on close, after a killed run by
``edgert power --restore``), and one sentence where nothing can be written.

The trees are those of tests/clock_plant.py, whose docstring cites each file: Orin on JetPack 5
(``17000000.ga10b``, ``nvpmodel_emc_cap/emc_iso_cap``: NVIDIA's r35 nvpmodel confs and
``drivers/nvpmodel/nvpmodel_emc_cap.c``), Orin on JetPack 6 (``17000000.gpu`` at the r36 confs'
``devfreq_dev`` path, ``nvpmodel_clk_cap/emc``: ``nvpmodel-clk-cap.c``), Thor (``gpu-gpc-0``,
``bwmgr``: jetson_stats' JetPack 7 reader)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgert.runtime.power import clocks
from tests.clock_plant import hz, write_layout
from tests.conftest import assert_user_error, run_cli, unprivileged


def _now(files: dict) -> dict:
    return {f: Path(f).read_text() for f in files}


@pytest.mark.parametrize(
    ("layout", "gpu_kind", "emc_kind", "gpu_top", "emc_rates"),
    [
        ("orin-jp5", "devfreq", "cap", 918, [665.6, 2133, 3199]),
        ("orin-jp6", "devfreq", "cap", 918, [665.6, 2133, 3199]),
        ("thor", "devfreq", "devfreq", 1575, [665.6, 2133, 3199, 4266]),
    ],
)
def test_each_layout_is_found_with_its_tables(
    tmp_path, layout, gpu_kind, emc_kind, gpu_top, emc_rates
):
    write_layout(tmp_path, layout)
    found = clocks.find(tmp_path)
    assert found.gpu is not None and found.gpu.kind == gpu_kind
    assert found.gpu.available[-1] == hz(gpu_top) and len(found.gpu.available) == 7
    assert found.emc is not None and found.emc.kind == emc_kind
    # Orin: the rates nvpmodel.conf's modes cap the EMC at, and BPMP's maximum; Thor: bwmgr's table
    assert [f / 1e6 for f in found.emc.available] == emc_rates
    assert found.reasons == ()


def test_candidates_stay_inside_the_power_mode_and_follow_a_pinned_minimum(tmp_path):
    tree = write_layout(tmp_path / "jp5", "orin-jp5")
    (tree["gpu"] / "max_freq").write_text(f"{hz(612)}\n")  # the 10W mode's limit
    (tree["emc"]).write_text(f"{hz(2133)}\n")
    with clocks.ClockSession(clocks.find(tmp_path / "jp5"), tmp_path / "jp5") as s:
        assert [f / 1e6 for f in s.candidates("gpu")] == [612, 510, 408, 306]
        assert [f / 1e6 for f in s.candidates("emc")] == [2133, 665.6]
        s.set(gpu=hz(408))
        assert (tree["gpu"] / "max_freq").read_text() == str(hz(408))
        assert (tree["gpu"] / "min_freq").read_text() == str(hz(306))  # the governor's floor stays
    # jetson_clocks pinned min = max: the minimum follows, written first (devfreq keeps min <= max)
    tree = write_layout(tmp_path / "jp6", "orin-jp6")
    found = clocks.find(tmp_path / "jp6")
    start = found.gpu.limits()
    assert start == (hz(918), hz(918))
    writes = found.gpu.writes(hz(510), start)
    assert [p.name for p, _ in writes] == ["min_freq", "max_freq"]
    with clocks.ClockSession(found, tmp_path / "jp6") as s:
        s.set(gpu=hz(510), emc=hz(2133))
        assert (tree["gpu"] / "min_freq").read_text() == str(hz(510))
        assert (tree["gpu"] / "max_freq").read_text() == str(hz(510))
        s.set(gpu=hz(714))  # raising: the maximum first
        assert found.gpu.limits() == (hz(714), hz(714))


@pytest.mark.parametrize("layout", ["orin-jp5", "orin-jp6", "thor"])
def test_every_file_is_recorded_before_the_first_write_and_put_back(tmp_path, layout):
    tree = write_layout(tmp_path, layout)
    found = clocks.find(tmp_path)
    state = clocks.state_path(tmp_path)
    with clocks.ClockSession(found, tmp_path) as s:
        assert not state.exists()  # nothing recorded, nothing written before a set
        s.set(gpu=s.candidates("gpu")[2], emc=s.candidates("emc")[1])
        record = json.loads(state.read_text())
        assert record["pid"] == os.getpid()
        assert {os.path.realpath(p): v for p, v in record["files"]} == {
            os.path.realpath(p): v.strip() for p, v in tree["files"].items()
        }
        assert _now(tree["files"]) != tree["files"]
        report = s.report()
        assert report["gpu"]["set_max_mhz"] == s.candidates("gpu")[2] / 1e6
    assert _now(tree["files"]) == {p: v.strip() for p, v in tree["files"].items()}
    assert not state.exists()


def test_a_killed_runs_record_is_put_back_and_a_live_one_is_refused(tmp_path):
    tree = write_layout(tmp_path, "orin-jp5")
    # a process that sets the clocks and is killed before it can put them back
    code = (
        "import os, sys\n"
        "from edgert.runtime.power import clocks\n"
        f"s = clocks.ClockSession(clocks.find({str(tmp_path)!r}), {str(tmp_path)!r})\n"
        "s.set(gpu=s.candidates('gpu')[3], emc=s.candidates('emc')[-1])\n"
        "print('set', flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "set"
        assert _now(tree["files"]) != tree["files"]
        # while it lives, it holds them: restoring is refused with one sentence
        refused = run_cli("power", "--restore", "--sysfs-root", tmp_path)
        assert_user_error(refused, f"process {proc.pid}", "stop it first")
    finally:
        proc.kill()
        proc.wait()
    assert _now(tree["files"]) != tree["files"]  # SIGKILL: nothing ran on the way out
    listed = run_cli("power", "--sysfs-root", tmp_path, "--no-nvml")
    assert "edgert power --restore puts them back" in listed.stdout
    done = run_cli("power", "--restore", "--sysfs-root", tmp_path)
    assert done.returncode == 0, done.stderr
    assert _now(tree["files"]) == {p: v.strip() for p, v in tree["files"].items()}
    assert not clocks.state_path(tmp_path).exists()
    again = run_cli("power", "--restore", "--sysfs-root", tmp_path)
    assert again.returncode == 0 and "nothing to put back" in again.stdout


def test_a_read_only_tree_is_one_sentence_and_no_change(tmp_path):
    from tests.tiny import classifier_bundle

    tree = write_layout(tmp_path / "root", "orin-jp6")
    for f in tree["files"]:
        os.chmod(f, 0o444)
    bundle = classifier_bundle(tmp_path / "m")
    proc = run_cli(
        "bench",
        bundle,
        "--sysfs-root",
        tmp_path / "root",
        "--target-fps",
        "20",
        "--clocks",
        "auto",
        "--idle-seconds",
        "0.2",
        "--duration",
        "1",
        prefix=unprivileged(),
    )
    assert_user_error(proc, "cannot write", "permission denied", "nothing was changed")
    assert _now(tree["files"]) == tree["files"]
    assert not clocks.state_path(tmp_path / "root").exists()


def test_clocks_need_a_rate_and_a_board_that_has_them(tmp_path):
    from tests.power_plant import write_tree
    from tests.tiny import classifier_bundle

    bundle = classifier_bundle(tmp_path / "m")
    write_tree(tmp_path / "pc", 5.0)  # a power sensor, no clocks (this machine's case)
    proc = run_cli("bench", bundle, "--clocks", "auto", "--sysfs-root", tmp_path / "pc")
    assert_user_error(proc, "--target-fps")
    proc = run_cli(
        "bench",
        bundle,
        "--clocks",
        "auto",
        "--target-fps",
        "10",
        "--sysfs-root",
        tmp_path / "pc",
        "--idle-seconds",
        "0",
    )
    assert_user_error(proc, "no clock edgert can set", "no GPU devfreq node")
    proc = run_cli("bench", bundle, "--sweep", "gpu_clock=fast")
    assert_user_error(proc, "gpu_clock", "MHz")


def test_power_lists_the_tables_and_the_limits_in_force(tmp_path):
    write_layout(tmp_path, "thor")
    proc = run_cli("power", "--sysfs-root", tmp_path, "--no-nvml", "--json")
    assert proc.returncode == 0, proc.stderr
    controls = json.loads(proc.stdout)["clock_controls"]
    gpu, emc = controls["domains"]
    assert gpu["name"] == "gpu" and gpu["max_mhz"] == 1575 and gpu["min_mhz"] == 675
    assert emc["available_mhz"] == [665.6, 2133, 3199, 4266] and emc["writable"]
    text = run_cli("power", "--sysfs-root", tmp_path, "--no-nvml").stdout
    assert "gpu limit: min 675, max 1575 MHz of 675 825 975 1125 1275 1425 1575 MHz" in text
