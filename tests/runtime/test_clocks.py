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


@pytest.mark.subprocess
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


@pytest.mark.subprocess
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


@pytest.mark.subprocess
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


@pytest.mark.subprocess
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


@pytest.mark.subprocess
def test_a_crafted_record_writes_nothing_outside_the_clock_files(tmp_path):
    """The review's record: a dead pid's clocks.json naming a file outside the tree and one that
    does not exist. Restore refuses it whole: the victim is unchanged, nothing is created."""
    write_layout(tmp_path / "root", "orin-jp5")
    victim, new = tmp_path / "victim.txt", tmp_path / "newfile.txt"
    victim.write_text("victim original")
    state = clocks.state_path(tmp_path / "root")
    state.parent.mkdir(parents=True, exist_ok=True)
    record = {"pid": 999999, "t": 0, "files": [[str(victim), "pwned"], [str(new), "created"]]}
    state.write_text(json.dumps(record))
    proc = run_cli("power", "--restore", "--sysfs-root", tmp_path / "root")
    assert_user_error(proc, "not a clock file", "nothing was written")
    assert victim.read_text() == "victim original" and not new.exists()
    # nor a clock file of the tree given a value no clock has
    gpu = clocks.find(tmp_path / "root").gpu
    before = (gpu.node / "max_freq").read_text()
    state.write_text(
        json.dumps({"pid": 999999, "t": 0, "files": [[str(gpu.node / "max_freq"), "x; y"]]})
    )
    assert_user_error(
        run_cli("power", "--restore", "--sysfs-root", tmp_path / "root"), "not a clock"
    )
    assert (gpu.node / "max_freq").read_text() == before


@pytest.mark.subprocess
def test_a_relative_root_is_recorded_absolute_and_restored_from_anywhere(tmp_path):
    """Set with a relative --sysfs-root, killed, restored with the absolute root from another
    folder holding a tree at the same relative path: the first tree is put back, not the other."""
    for where in ("a", "b"):
        write_layout(tmp_path / where / "tree", "orin-jp5")
    code = (
        "import os, sys\n"
        "from edgert.runtime.power import clocks\n"
        "s = clocks.ClockSession(clocks.find('tree'), 'tree')\n"
        "s.set(gpu=s.candidates('gpu')[3])\n"
        "print('set', flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=tmp_path / "a",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "set"
    finally:
        proc.kill()
        proc.wait()
    record = json.loads(clocks.state_path(tmp_path / "a" / "tree").read_text())
    assert all(os.path.isabs(p) for p, _ in record["files"])
    gpu_a = clocks.find(tmp_path / "a" / "tree").gpu.node / "max_freq"
    gpu_b = clocks.find(tmp_path / "b" / "tree").gpu.node / "max_freq"
    assert gpu_a.read_text() != gpu_b.read_text()
    done = run_cli(
        "power", "--restore", "--sysfs-root", tmp_path / "a" / "tree", cwd=tmp_path / "b"
    )
    assert done.returncode == 0, done.stderr
    assert gpu_a.read_text().strip() == gpu_b.read_text().strip() == str(hz(918))


def test_junk_frequencies_are_refused_or_left_out(tmp_path):
    """A max_freq of inf (an internal OverflowError before) is one sentence; an EMC MAX_FREQ of
    1e23 in nvpmodel.conf (chosen and written before) is no rate of the table."""
    write_layout(tmp_path / "inf", "orin-jp5")
    gpu = clocks.find(tmp_path / "inf").gpu
    (gpu.node / "max_freq").write_text("inf\n")
    with pytest.raises(clocks.ClockError, match="does not hold a frequency"):
        gpu.limits()
    write_layout(tmp_path / "emc", "orin-jp5")
    conf = tmp_path / "emc" / "etc" / "nvpmodel.conf"
    conf.write_text(conf.read_text() + "\nEMC MAX_FREQ 99999999999999999999999\n")
    rates = clocks.find(tmp_path / "emc").emc.available
    assert max(rates) == hz(3199), rates
