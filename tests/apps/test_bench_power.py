"""edgert bench and edgert power on CPU: JSON keys, plots, power from a sysfs tree, sweeps, errors."""

from __future__ import annotations

import json

import pytest

from edgert.export import export_model
from tests.conftest import assert_user_error, run_cli


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return export_model(
        "zoo:digits_cnn", tmp_path_factory.mktemp("b") / "d.edgert", max_batch=8
    ).bundle


def orin_sysfs(root, ma=1000):
    """An Orin NX board reading a steady 5 W on VDD_IN."""
    hw = root / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3"
    hw.mkdir(parents=True)
    for name, value in (("in1_label", "VDD_IN"), ("in1_input", 5000), ("curr1_input", ma)):
        (hw / name).write_text(f"{value}\n")
    return root


REQUIRED = {
    "latency_ms",
    "throughput_ips",
    "power_w",
    "energy_mj_per_inference",
    "backend",
    "precision",
    "device",
}


@pytest.mark.subprocess
def test_bench_json_and_plot_without_power(bundle, tmp_path):
    empty = tmp_path / "sys-root"
    empty.mkdir()
    proc = run_cli(
        "bench",
        bundle,
        "--iterations",
        "200",
        "--warmup",
        "0.2",
        "--json-file",
        tmp_path / "b.json",
        "--plot",
        tmp_path / "b.png",
        "--sysfs-root",
        empty,
    )
    assert proc.returncode == 0, proc.stderr
    assert "power      unavailable (no power sensor found" in proc.stdout
    r = json.loads((tmp_path / "b.json").read_text())
    assert set(r) >= REQUIRED
    assert set(r["latency_ms"]) >= {"min", "mean", "p50", "p90", "p95", "p99", "max"}
    assert (
        r["latency_ms"]["min"]
        <= r["latency_ms"]["p50"]
        <= r["latency_ms"]["p99"]
        <= r["latency_ms"]["max"]
    )
    assert r["power_w"] is None and r["energy_mj_per_inference"] is None and r["iterations"] == 200
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.subprocess
def test_bench_energy_per_inference_from_a_sensor(bundle, tmp_path):
    root = orin_sysfs(tmp_path / "root")
    proc = run_cli(
        "bench",
        bundle,
        "--duration",
        "1.5",
        "--warmup",
        "0.2",
        "--idle-seconds",
        "0.5",
        "--sysfs-root",
        root,
        "--json-file",
        tmp_path / "b.json",
    )
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "b.json").read_text())
    assert r["power_w"]["avg"] == pytest.approx(5.0) and r["power_w"]["idle"] == pytest.approx(5.0)
    # a steady 5 W: energy per inference = 5 W / inferences per second
    assert r["energy_mj_per_inference"] == pytest.approx(5000.0 / r["throughput_ips"], rel=0.05)
    assert abs(r["energy_mj_per_inference_above_idle"]) < 0.05 * r["energy_mj_per_inference"]
    assert "mJ/inference" in proc.stdout


@pytest.mark.subprocess
def test_power_cap_below_idle_is_refused(bundle, tmp_path):
    root = orin_sysfs(tmp_path / "root")
    proc = run_cli(
        "bench",
        bundle,
        "--duration",
        "1",
        "--idle-seconds",
        "0.3",
        "--sysfs-root",
        root,
        "--power-cap",
        "3",
    )
    assert_user_error(proc, "below the idle power")
    empty = tmp_path / "none"
    empty.mkdir()
    proc = run_cli("bench", bundle, "--duration", "1", "--sysfs-root", empty, "--power-cap", "3")
    assert_user_error(proc, "--power-cap needs a power sensor")


@pytest.mark.subprocess
def test_sweep_table_pareto_and_bad_values(bundle, tmp_path):
    root = orin_sysfs(tmp_path / "root")
    proc = run_cli(
        "bench",
        bundle,
        "--sweep",
        "batch=1,4",
        "precision=fp32,int8",
        "--duration",
        "0.5",
        "--warmup",
        "0.1",
        "--idle-seconds",
        "0.2",
        "--sysfs-root",
        root,
        "--json-file",
        tmp_path / "s.json",
        "--plot",
        tmp_path / "p.png",
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "s.json").read_text())
    assert len(data["points"]) == 4
    skipped = [p for p in data["points"] if "skipped" in p]
    assert len(skipped) == 2 and all(
        "no INT8 model" in p["skipped"] for p in skipped
    )  # no model.int8.onnx yet
    assert data["most_efficient"] and data["pareto"]
    assert "most energy-efficient" in proc.stdout
    assert (tmp_path / "p.png").is_file()
    assert_user_error(run_cli("bench", bundle, "--sweep", "batch=1,zero"), "not a positive integer")
    assert_user_error(run_cli("bench", bundle, "--sweep", "colour=red"), "must be KEY=V1,V2")


@pytest.mark.subprocess
def test_power_command(tmp_path):
    root = orin_sysfs(tmp_path / "root", ma=1600)
    proc = run_cli("power", "--json", "--sysfs-root", root, "--no-nvml")
    facts = json.loads(proc.stdout)
    assert facts["total_w"] == pytest.approx(8.0) and facts["rails"] == {"VDD_IN": 8.0}
    assert facts["source"].startswith("INA3221 (hwmon)") and facts["nvpmodel"] is None
    text = run_cli("power", "--sysfs-root", root, "--no-nvml").stdout
    assert "power: 8.00 W" in text and "VDD_IN" in text
    empty = tmp_path / "empty"
    empty.mkdir()
    facts = json.loads(run_cli("power", "--json", "--sysfs-root", empty, "--no-nvml").stdout)
    assert facts["total_w"] is None and "no power sensor found" in facts["reason"]


def test_a_power_session_caps_an_engine_and_closes_its_meter(bundle, tmp_path):
    import numpy as np

    from edgert.runtime.engine import Engine
    from edgert.runtime.errors import SensorError
    from edgert.runtime.power.session import PowerOptions, PowerSession

    root = orin_sysfs(tmp_path / "root")  # a steady 5 W
    with Engine.load(bundle) as engine:
        with (
            PowerSession(PowerOptions(power_cap=4.0, sysfs_root=str(root))) as power,
            pytest.raises(SensorError, match="below the idle power"),
        ):
            power.cap(engine, idle_seconds=0.3)
        with PowerSession(PowerOptions(power_cap=6.0, sysfs_root=str(root))) as power:
            runner = power.cap(engine, idle_seconds=0.3)
            x = np.zeros((1, 1, 8, 8), np.float32)
            for _ in range(20):
                assert runner.infer(x)["logits"].shape == (1, 10)
            report = runner.report()
            summary = power.summary(frames=20, seconds=1.0)
        assert power.meter._thread is None  # closed: no sampling thread left behind
    assert report["cap_w"] == 6.0 and report["throughput_ips"] > 0
    assert report["average_w"] == pytest.approx(5.0)
    assert summary["power_w"] == pytest.approx(5.0) and summary["power_cap"]["cap_w"] == 6.0
