"""A power plant for closed-loop tests and benchmarks: a separate process turns the real CPU time of
another process into the readings of a recreated Jetson Orin NX INA3221 tree (VDD_IN).

    power = idle + fixed (while the process is busy at all) + k * cores busy
            seen through a first-order lag, with noise, sampled at ``hz``, written atomically

CPU time comes from /proc/PID/stat (utime + stime of every thread), so a runtime that spins while
waiting pays for it here exactly as a real board would. Used by tests/runtime/test_power_plant.py
and benchmarks/power_cap_cpu.py.

    python -m tests.power_plant ROOT PID [--idle 4.5 --per-core 6 --fixed 0.5 --lag 0.3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
VOLTS_MV = 5000
HWMON = "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3"


def write_tree(root: Path, watts: float) -> Path:
    """The INA3221 files with VDD_IN at ``watts`` (5 V times the current), atomically."""
    hw = Path(root) / HWMON
    hw.mkdir(parents=True, exist_ok=True)
    values = {"in1_label": "VDD_IN", "in1_input": VOLTS_MV, "curr1_input": round(watts / 5 * 1000)}
    for name, value in values.items():
        tmp = hw / f".{name}.new"
        tmp.write_text(f"{value}\n")
        os.replace(tmp, hw / name)
    return hw


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def busy_cores(pid: int, hz: float):
    """(time.monotonic(), seconds since the last, cores busy) every 1/hz s while ``pid`` runs,
    its CPU time smoothed over ~0.2 s (CPU time arrives in clock ticks of 10 ms)."""
    last_t, last_cpu = time.monotonic(), cpu_seconds(pid)
    busy_avg = 0.0
    while True:
        time.sleep(1.0 / hz)
        try:
            cpu = cpu_seconds(pid)
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return  # the process under test has ended
        now = time.monotonic()
        busy = max(0.0, (cpu - last_cpu) / (now - last_t))  # cores busy over the last sample
        busy_avg += (busy - busy_avg) * min(1.0, 1.0 / (hz * 0.2))
        yield now, now - last_t, busy_avg
        last_t, last_cpu = now, cpu


def run(
    root: Path,
    pid: int,
    idle: float,
    per_core: float,
    fixed: float,
    lag: float,
    noise: float,
    hz: float,
    seed: int = 0,
) -> None:
    rng = random.Random(seed)
    power = idle
    for _, _, busy_avg in busy_cores(pid, hz):
        target = idle + (fixed if busy_avg > 0.02 else 0.0) + per_core * busy_avg
        power += (target - power) * min(1.0, (1.0 / hz) / lag)
        write_tree(root, power * (1.0 + rng.gauss(0.0, noise)))


def start_bench(bundle, root: Path, report: Path, seconds: float, *args: str) -> subprocess.Popen:
    """`edgert bench BUNDLE --sysfs-root ROOT --json-file REPORT ...` started for a plant to
    follow (1 s warm-up, 1.5 s of idle power); its stderr a pipe."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "bench",
            str(bundle),
            "--duration",
            str(seconds),
            "--warmup",
            "1",
            "--idle-seconds",
            "1.5",
            "--sysfs-root",
            str(root),
            "--json-file",
            str(report),
            *args,
        ],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def bench_in_the_loop(bundle, root: Path, *args: str, seconds: float = 10.0) -> dict:
    """`edgert bench BUNDLE` in a subprocess with this plant writing its power; the bench JSON."""
    repo = Path(__file__).resolve().parent.parent
    write_tree(root, 4.5)
    report = Path(root) / "bench.json"
    proc = start_bench(bundle, root, report, seconds, *args)
    plant = subprocess.Popen(
        [sys.executable, "-m", "tests.power_plant", str(root), str(proc.pid)], cwd=repo
    )
    _, err = proc.communicate(timeout=600)
    plant.wait(timeout=10)
    if proc.returncode:
        raise RuntimeError(f"edgert bench failed: {err}")
    return json.loads(report.read_text())


def settled_mean(result: dict, after: float = 0.4) -> float:
    """Average power over the run after the first ``after`` of it (the governor has settled)."""
    t, w = result["power_series"]["t"], result["power_series"]["w"]
    tail = [x for tt, x in zip(t, w, strict=True) if tt >= after * t[-1]]
    return sum(tail) / len(tail)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("root", type=Path)
    ap.add_argument("pid", type=int)
    ap.add_argument("--idle", type=float, default=4.5, help="W with the process idle")
    ap.add_argument("--per-core", type=float, default=6.0, help="W per core kept busy")
    ap.add_argument("--fixed", type=float, default=0.5, help="W while busy at all (clocks up)")
    ap.add_argument("--lag", type=float, default=0.3, help="first-order lag, s")
    ap.add_argument("--noise", type=float, default=0.01, help="relative noise")
    ap.add_argument("--hz", type=float, default=20.0)
    a = ap.parse_args()
    run(a.root, a.pid, a.idle, a.per_core, a.fixed, a.lag, a.noise, a.hz)


if __name__ == "__main__":
    main()
