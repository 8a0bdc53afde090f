"""A power cap in a closed loop with a real process: tests/power_plant.py turns the CPU time of a
real `edgert bench` into the readings of a recreated Orin NX INA3221 tree. Ratios only, no absolute
times (issue: power-capped inference that keeps its throughput)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from edgert.export import export_model
from tests.conftest import ROOT
from tests.power_plant import write_tree


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    pytest.importorskip("torch")
    return export_model("zoo:mobilenet_v2", tmp_path_factory.mktemp("cap") / "mv2.edgert").bundle


def bench_with_plant(bundle, root, *args, seconds: float = 10.0) -> dict:
    write_tree(root, 4.5)
    report = root / "bench.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgert.apps", "bench", str(bundle), "--duration", str(seconds),
         "--warmup", "1", "--idle-seconds", "1.5", "--sysfs-root", str(root), "--json-file",
         str(report), *args],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    plant = subprocess.Popen([sys.executable, "-m", "tests.power_plant", str(root), str(proc.pid)],
                             cwd=ROOT)  # fmt: skip
    _, err = proc.communicate(timeout=180)
    plant.wait(timeout=10)
    assert proc.returncode == 0, err
    return json.loads(report.read_text())


def settled_mean(result: dict, after: float = 0.4) -> float:
    t, w = result["power_series"]["t"], result["power_series"]["w"]
    start = t[-1] * after
    tail = [x for tt, x in zip(t, w, strict=True) if tt >= start]
    return sum(tail) / len(tail)


def test_cap_holds_and_keeps_its_throughput(mobilenet, tmp_path):
    free = bench_with_plant(mobilenet, tmp_path / "free", seconds=8.0)
    idle = free["power_w"]["idle"]
    uncapped_w = free["power_w"]["avg"]
    cap = idle + 0.6 * (uncapped_w - idle)
    capped = bench_with_plant(mobilenet, tmp_path / "capped", "--power-cap", f"{cap:.3f}",
                              seconds=14.0)  # fmt: skip
    assert capped["spin"] is False  # nothing busy-waits under a cap
    achieved = settled_mean(capped)
    assert 0.95 * cap <= achieved <= 1.02 * cap, (achieved / cap, cap)
    linear = (cap - idle) / (uncapped_w - idle) * free["throughput_ips"]
    assert capped["throughput_ips"] >= 0.8 * linear, (capped["throughput_ips"], linear)
