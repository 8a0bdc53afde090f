"""A thermal plant for closed-loop tests: a separate process turns the real CPU time of another
process into the temperature of a recreated Jetson Orin NX thermal zone (cpu-thermal, JetPack 6
layout, passive trip 95 °C: see tests/runtime/test_thermal.py for the sources).

    dT/dt = (ambient + per_core * cores busy - T) / tau        written as m°C, atomically, at hz

CPU time comes from /proc/PID/stat, as in tests/power_plant.py; the plant's own temperature series
(the truth, not what the process under test read) is written to ROOT/plant.json when it ends.

    python -m tests.thermal_plant ROOT PID [--ambient 40 --per-core 25 --tau 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.power_plant import busy_cores

ZONE = "sys/class/thermal/thermal_zone0"


def write_zone(root: Path, temp_c: float) -> None:
    z = Path(root) / ZONE
    z.mkdir(parents=True, exist_ok=True)
    for name, value in (
        ("type", "cpu-thermal"),
        ("temp", round(temp_c * 1000)),
        ("trip_point_0_type", "passive"),
        ("trip_point_0_temp", 95000),
    ):
        tmp = z / f".{name}.new"
        tmp.write_text(f"{value}\n")
        os.replace(tmp, z / name)


def run(root: Path, pid: int, ambient: float, per_core: float, tau: float, hz: float) -> None:
    temp = ambient
    write_zone(root, temp)
    series = []
    t0 = time.monotonic()
    for now, dt, busy_avg in busy_cores(pid, hz):
        temp += (ambient + per_core * busy_avg - temp) * min(1.0, dt / tau)
        write_zone(root, temp)
        series.append((round(now - t0, 3), round(temp, 3)))
    (Path(root) / "plant.json").write_text(json.dumps(series))


def bench_in_the_loop(
    bundle,
    root: Path,
    *args: str,
    seconds: float,
    ambient: float = 40.0,
    per_core: float = 15.0,
    tau: float = 3.0,
) -> tuple[dict, list]:
    """`edgert bench BUNDLE` with this plant heating its zone: (the bench JSON, the plant's
    (t, °C) series from the bench's start)."""
    repo = Path(__file__).resolve().parent.parent
    write_zone(root, ambient)
    report = Path(root) / "bench.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "bench",
            str(bundle),
            "--duration",
            str(seconds),
            "--warmup",
            "0.5",
            "--idle-seconds",
            "0",
            "--sysfs-root",
            str(root),
            "--json-file",
            str(report),
            "--spin",
            "off",
            *args,
        ],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    plant = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.thermal_plant",
            str(root),
            str(proc.pid),
            "--ambient",
            str(ambient),
            "--per-core",
            str(per_core),
            "--tau",
            str(tau),
        ],
        cwd=repo,
    )
    _, err = proc.communicate(timeout=600)
    plant.wait(timeout=10)
    if proc.returncode:
        raise RuntimeError(f"edgert bench failed: {err}")
    return json.loads(report.read_text()), json.loads((Path(root) / "plant.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("root", type=Path)
    ap.add_argument("pid", type=int)
    ap.add_argument("--ambient", type=float, default=40.0)
    ap.add_argument("--per-core", type=float, default=25.0, help="°C per core kept busy")
    ap.add_argument("--tau", type=float, default=3.0, help="time constant, s")
    ap.add_argument("--hz", type=float, default=20.0)
    a = ap.parse_args()
    run(a.root, a.pid, a.ambient, a.per_core, a.tau, a.hz)


if __name__ == "__main__":
    main()
