"""The commands that run on a Jetson, end to end through the real console entry point, with nothing
from the host side (no PyTorch): run, bench, camera, power on recreated boards, cache, export-triton,
info. `make test-oldest` runs this file with the oldest numpy / OpenCV / ONNX Runtime we claim."""

from __future__ import annotations

import json
import sys

import pytest

from edgert.runtime.sample_data import photo_path
from tests.conftest import run_cli
from tests.runtime.test_power_sensors import ina238_hwmon, ina3221_hwmon, write
from tests.tiny import classifier_bundle

pytestmark = pytest.mark.subprocess


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return classifier_bundle(tmp_path_factory.mktemp("device"), size=32)


def test_run_bench_camera_cache_triton_info(bundle, tmp_path):
    run = run_cli("run", bundle, photo_path("chelsea"), "--top-k", "2", "--json")
    assert run.returncode == 0, run.stderr
    row = json.loads(run.stdout.splitlines()[0])
    assert row["results"][0]["label"] in ("cat", "dog", "bird")
    report = tmp_path / "bench.json"
    bench = run_cli("bench", bundle, "--iterations", "30", "--warmup", "0", "--json-file", report)
    assert bench.returncode == 0, bench.stderr
    assert json.loads(report.read_text())["iterations"] == 30
    cam = run_cli(
        "camera", bundle, "--source", "synthetic://", "--duration", "2", "--headless", "--json"
    )
    assert cam.returncode == 0, cam.stderr
    assert json.loads(cam.stdout)["frames_processed"] > 5
    assert run_cli("cache", "list", bundle).returncode == 0
    repo = tmp_path / "repo"
    assert run_cli("export-triton", bundle, "--repo", repo).returncode == 0
    assert (repo / "tiny" / "config.pbtxt").is_file()
    info = run_cli("info", "--json")
    assert info.returncode == 0 and json.loads(info.stdout)["onnxruntime_providers"]


def _board(root, board: str) -> None:
    if board == "thor":  # carrier INA238 on VIN + module INA3221 rails
        ina238_hwmon(root, "2-0044", 9, 42_500_000)  # unlabelled, as the driver writes it
        ina3221_hwmon(
            root,
            "1-0040",
            1,
            [("VDD_GPU", 5000, 3000), ("VDD_CPU_SOC_MSS", 5000, 2000), ("VDD_SYS", 5000, 800)],
        )
    elif board == "agx_orin":  # no input rail: the sum
        ina3221_hwmon(
            root,
            "1-0040",
            1,
            [("VDD_GPU_SOC", 5000, 1400), ("VDD_CPU_CV", 5000, 600), ("VIN_SYS_5V0", 5000, 900)],
        )
        ina3221_hwmon(root, "1-0041", 2, [("NC", 0, 0), ("VDDQ_VDD2_1V8AO", 5000, 200)])
    elif board == "orin_nx":
        ina3221_hwmon(
            root,
            "1-0040",
            3,
            [("VDD_IN", 5000, 1600), ("VDD_CPU_GPU_CV", 5000, 500), ("VDD_SOC", 5000, 300)],
        )
    elif board == "nano":  # JetPack 4, iio, milliwatts
        dev = root / "sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0"
        for n, (name, mw) in enumerate(
            [("POM_5V_IN", 4200), ("POM_5V_GPU", 900), ("POM_5V_CPU", 1100)]
        ):
            write(dev / f"rail_name_{n}", name)
            write(dev / f"in_power{n}_input", mw)


@pytest.mark.parametrize(
    "board, total",
    [("thor", 42.5), ("agx_orin", 15.5), ("orin_nx", 8.0), ("nano", 4.2)],
)
def test_power_json_totals_on_recreated_boards(tmp_path, board, total):
    _board(tmp_path, board)
    proc = run_cli("power", "--json", "--sysfs-root", tmp_path, "--no-nvml")
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["total_w"] == pytest.approx(total), facts


def test_host_commands_say_what_they_need_on_python_3_8(bundle, tmp_path):
    """On JetPack 5's Python 3.8, export and calibration say they need the host's 3.10+; building
    the plan of a bundle made on the host is the device's job (here: TensorRT is absent)."""
    code = (
        "import sys; sys.version_info = (3, 8, 10, 'final', 0)\n"
        "from edgert.apps.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )

    def cli(*args):
        import subprocess

        return subprocess.run(
            [sys.executable, "-c", code, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=120,
        )

    proc = cli("export", "zoo:mobilenet_v2")
    assert proc.returncode == 1 and "needs Python 3.10 or newer (this is 3.8.10)" in proc.stderr
    proc = cli("build", bundle, "--precision", "int8")
    assert proc.returncode == 1 and "run edgert build on the host" in proc.stderr
    proc = cli("build", bundle, "--precision", "fp32")
    assert proc.returncode == 1 and "no TensorRT plan can be built here" in proc.stderr
    assert "Traceback" not in proc.stderr
