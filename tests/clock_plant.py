"""A clock plant for closed-loop tests and benchmarks: recreated Jetson clock trees (Orin on JetPack 5
and 6, Thor on JetPack 7) whose GPU and EMC limits, written by the process under test, set how fast
that process runs and the power its board draws.

Speed: the plant stops and continues the process (SIGSTOP / SIGCONT) so that it
runs a share ``s`` of the time (10 ms periods), ``s = min(f / f_max, mem * e / e_max)``: proportional to the GPU
clock ``f`` until the memory clock ``e`` bounds it. Power (written to the INA3221 tree of
tests/power_plant.py, VDD_IN):

    V     = max(vmin, v0 + (1 - v0) f / f_max)            the voltage the clock needs (a floor)
    u     = (cores busy - floor) / s                      the work's share at this clock
    P     = idle + leak V^2 (the GPU powered: busy within the last railgate_s)
               + u (act + dyn (f / f_max) V^2 + emc e / e_max)

so lowering the clock saves dynamic power (V^2 f) down to the voltage floor and no further, while
the power paid while computing (``act``) is paid longer: the energy per inference at a rate has its
optimum in the middle of the table (at 0.35 of the maximum rate: 510 MHz, EMC 2133 MHz here;
under ~0.33, where the lowest point still holds the rate with 10 % to spare, it is 306 MHz at EMC
665.6, with 510/2133 within 1 % of it from ~0.15 up).
:func:`truth` gives the model's power at every table point for the work seen, the answer a test
checks the chosen point against. The effective clocks are written back as the driver shows them
(``cur_freq``; the EMC's rate in debugfs or bwmgr's ``cur_freq``).

Layouts (files, units and the values a driver shows; tables are Orin NX 16GB's and illustrative
ones for Thor):

- ``orin-jp5``: GPU devfreq ``/sys/devices/17000000.ga10b/devfreq/17000000.ga10b`` (linked from
  ``/sys/class/devfreq``; the folder NVIDIA's r35 nvpmodel confs name under ``< PARAM TYPE=CLOCK
  NAME=GPU >``, e.g. mlcommons/inference_results_v3.0 ``code/common/nvpmodel_orin.py``), EMC cap
  ``/sys/kernel/nvpmodel_emc_cap/emc_iso_cap`` (the same confs' ``< PARAM TYPE=FILE NAME=EMC >``;
  driver ``drivers/nvpmodel/nvpmodel_emc_cap.c``; 0 = no cap), BPMP's EMC clock in debugfs.
- ``orin-jp6``: GPU devfreq ``/sys/devices/platform/17000000.gpu/devfreq_dev`` (the r36 confs'
  path) linked as ``/sys/class/devfreq/17000000.gpu``, pinned by jetson_clocks (min = max); EMC
  cap ``/sys/kernel/nvpmodel_clk_cap/emc`` (``nvpmodel-clk-cap.c``: mode 0664, a write is rounded
  to a rate of the clock, reading shows the cap in force).
- ``thor``: GPU devfreq ``gpu-gpc-0`` and the bandwidth manager's devfreq ``bwmgr`` for the EMC
  (as jetson_stats' jtop reads them on JetPack 7; the frequency tables are illustrative).

    python -m tests.clock_plant ROOT PID --layout orin-jp5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import time
from pathlib import Path

from tests.power_plant import cpu_seconds, start_bench, write_tree

MHZ = 1_000_000
LAYOUTS = {
    "orin-jp5": {
        "gpu_dir": "sys/devices/17000000.ga10b/devfreq/17000000.ga10b",
        "gpu_class": "17000000.ga10b",
        "gpu_table": [306, 408, 510, 612, 714, 816, 918],
        "gpu_min": 306,
        "emc_kind": "cap",
        "emc_file": "sys/kernel/nvpmodel_emc_cap/emc_iso_cap",
        "emc_initial": "0",  # nvpmodel's MAXN: no cap
        "emc_table": [204, 665.6, 2133, 3199],
        "debugfs": True,
    },
    "orin-jp6": {
        "gpu_dir": "sys/devices/platform/17000000.gpu/devfreq_dev",
        "gpu_class": "17000000.gpu",
        "gpu_table": [306, 408, 510, 612, 714, 816, 918],
        "gpu_min": 918,  # jetson_clocks: min = max
        "emc_kind": "cap",
        "emc_file": "sys/kernel/nvpmodel_clk_cap/emc",
        "emc_initial": str(3199 * MHZ),
        "emc_table": [204, 665.6, 2133, 3199],
        "debugfs": True,
    },
    "thor": {
        "gpu_dir": "sys/devices/platform/gpu/devfreq/gpu-gpc-0",
        "gpu_class": "gpu-gpc-0",
        "gpu_table": [675, 825, 975, 1125, 1275, 1425, 1575],
        "gpu_min": 675,
        "emc_kind": "devfreq",
        "emc_file": "sys/devices/platform/bwmgr/devfreq/bwmgr",
        "emc_table": [665.6, 2133, 3199, 4266],
        "debugfs": False,
    },
}
# NVIDIA's modes cap the EMC at rates of its table (the confs' `EMC MAX_FREQ`; -1 / 0: none)
CONF = """# modelled on an Orin NX nvpmodel conf (p3767): the parts edgert reads
< POWER_MODEL ID=0 NAME=MAXN >
GPU MIN_FREQ 306000000
GPU MAX_FREQ -1
EMC MAX_FREQ 0
< POWER_MODEL ID=1 NAME=10W >
GPU MAX_FREQ 612000000
EMC MAX_FREQ 2133000000
< POWER_MODEL ID=2 NAME=7W_LOW_MEM >
GPU MAX_FREQ 408000000
EMC MAX_FREQ 665600000
< PM_CONFIG DEFAULT=0 >
"""
PARAMS = {  # W; see the module's docstring
    "idle": 4.5,
    "leak": 2.0,
    "act": 3.0,
    "dyn": 18.0,
    "emc": 4.0,
    "v0": 0.2,
    "vmin": 0.6,
    "mem": 1.6,
    "railgate_s": 0.5,
    "floor": 0.03,  # cores of bookkeeping (the sampling threads) that are not the model's work
    "powered": 0.1,  # cores busy that power the GPU up
}


def hz(mhz: float) -> int:
    return int(round(mhz * MHZ))


def _put(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")


def write_layout(root: Path, layout: str) -> dict:
    """The clock tree of ``layout`` under ``root`` (and the INA3221 tree and nvpmodel files):
    {"gpu": the devfreq folder, "emc": the cap file or bwmgr folder, "files": what --clocks may
    write, with their first values}."""
    spec = LAYOUTS[layout]
    root = Path(root)
    write_tree(root, PARAMS["idle"])
    gpu = root / spec["gpu_dir"]
    table = " ".join(str(hz(f)) for f in spec["gpu_table"])
    for name, value in (
        ("available_frequencies", table),
        ("min_freq", hz(spec["gpu_min"])),
        ("max_freq", hz(spec["gpu_table"][-1])),
        ("cur_freq", hz(spec["gpu_table"][-1])),
        ("governor", "nvhost_podgov"),
    ):
        _put(gpu / name, value)
    link = root / "sys/class/devfreq" / spec["gpu_class"]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(gpu, link.parent))
    emc = root / spec["emc_file"]
    emc_table = [hz(f) for f in spec["emc_table"]]
    if spec["emc_kind"] == "devfreq":
        for name, value in (
            ("available_frequencies", " ".join(map(str, emc_table))),
            ("min_freq", emc_table[0]),
            ("max_freq", emc_table[-1]),
            ("cur_freq", emc_table[-1]),
        ):
            _put(emc / name, value)
        blink = root / "sys/class/devfreq/bwmgr"
        blink.symlink_to(os.path.relpath(emc, blink.parent))
        files = [emc / "min_freq", emc / "max_freq"]
    else:
        _put(emc, spec["emc_initial"])
        files = [emc]
    if spec["debugfs"]:
        bpmp = root / "sys/kernel/debug/bpmp/debug/clk/emc"
        _put(bpmp / "rate", emc_table[-1])
        _put(bpmp / "max_rate", emc_table[-1])
    _put(root / "etc/nvpmodel.conf", CONF)
    _put(root / "var/lib/nvpmodel/status", "pmode:0000")
    (root / "layout").write_text(layout)
    files = [gpu / "min_freq", gpu / "max_freq", *files]
    return {"gpu": gpu, "emc": emc, "files": {str(f): f.read_text() for f in files}}


def _read(path: Path, default: int) -> int:
    try:
        return int(float(path.read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return default  # caught mid-write: the last value holds


def effective(root: Path, layout: str, last: tuple) -> tuple:
    """(GPU Hz, EMC Hz) in force: the devfreq maximum (the governor runs at it under load; never
    under the minimum), the EMC's highest table rate at or under its cap."""
    spec = LAYOUTS[layout]
    gpu = Path(root) / spec["gpu_dir"]
    table = [hz(f) for f in spec["gpu_table"]]
    f = max(_read(gpu / "max_freq", last[0]), min(_read(gpu / "min_freq", 0), table[-1]))
    f = max([t for t in table if t <= f] or [table[0]])
    emc_table = [hz(x) for x in spec["emc_table"]]
    path = Path(root) / spec["emc_file"]
    cap = _read(path / "max_freq" if spec["emc_kind"] == "devfreq" else path, last[1])
    cap = emc_table[-1] if cap <= 0 else cap
    e = max([t for t in emc_table if t <= cap] or [emc_table[0]])
    return f, e


def model(layout: str, f: int, e: int, params: dict = PARAMS) -> tuple:
    """(speed share s, voltage V, x = f / f_max, y = e / e_max) of a clock point."""
    spec = LAYOUTS[layout]
    x = f / hz(spec["gpu_table"][-1])
    y = e / hz(spec["emc_table"][-1])
    s = min(x, params["mem"] * y, 1.0)
    v = max(params["vmin"], params["v0"] + (1 - params["v0"]) * x)
    return s, v, x, y


def power_w(layout: str, f: int, e: int, busy: float, powered: bool, params=PARAMS) -> float:
    s, v, x, y = model(layout, f, e, params)
    p = params
    u = max(0.0, busy - p["floor"]) / s
    return (
        p["idle"]
        + (p["leak"] * v * v if powered else 0.0)
        + u * (p["act"] + p["dyn"] * x * v * v + p["emc"] * y)
    )


def truth(layout: str, busy: float, threads: int = 1, margin: float = 0.1) -> list:
    """Every table point's model power for work that keeps ``busy`` cores busy at full speed,
    and whether it keeps up with ``margin`` to spare: [(W, GPU Hz, EMC Hz, holds)], least W
    first (at a fixed rate the least power is the least energy per inference)."""
    spec = LAYOUTS[layout]
    rows = []
    for f in (hz(v) for v in spec["gpu_table"]):
        for e in (hz(v) for v in spec["emc_table"]):
            s = model(layout, f, e)[0]
            holds = max(0.0, busy - PARAMS["floor"]) / s * (1 + margin) <= threads
            rows.append((power_w(layout, f, e, busy, True), f, e, holds))
    return sorted(rows)


def run(root: Path, pid: int, layout: str, hz_power: float = 20.0, seed: int = 0) -> None:
    spec = LAYOUTS[layout]
    rng = random.Random(seed)
    period = 0.01  # fine enough that a frame's latency is not set by when it was stopped
    ticks = 0
    clocks = (hz(spec["gpu_table"][-1]), hz(spec["emc_table"][-1]))
    power = PARAMS["idle"]
    last_t, last_cpu = time.monotonic(), cpu_seconds(pid)
    busy_avg, last_busy = 0.0, -1e9
    next_power = last_t
    series = []
    t0 = last_t
    try:
        while True:
            if ticks % 5 == 0:  # a clock change takes effect within 50 ms
                clocks = effective(root, layout, clocks)
                s = model(layout, *clocks)[0]
                _show(root, spec, clocks)
            ticks += 1
            os.kill(pid, signal.SIGCONT)
            time.sleep(s * period)
            if s < 0.999:
                os.kill(pid, signal.SIGSTOP)
                time.sleep((1 - s) * period)
            now = time.monotonic()
            if now < next_power:
                continue
            next_power = now + 1.0 / hz_power
            cpu = cpu_seconds(pid)
            busy = max(0.0, (cpu - last_cpu) / (now - last_t))
            busy_avg += (busy - busy_avg) * min(1.0, (now - last_t) / 0.2)
            last_t, last_cpu = now, cpu
            if busy_avg > PARAMS["powered"]:
                last_busy = now
            powered = now - last_busy < PARAMS["railgate_s"]
            target = power_w(layout, *clocks, busy_avg, powered)
            power += (target - power) * min(1.0, (1.0 / hz_power) / 0.1)  # the rails' lag
            write_tree(root, power * (1.0 + rng.gauss(0.0, 0.01)))
            series.append(
                (round(now - t0, 3), clocks[0], clocks[1], round(busy_avg, 4), round(power, 3))
            )
    except (ProcessLookupError, FileNotFoundError, IndexError):
        pass  # the process under test has ended
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        (Path(root) / "plant.json").write_text(json.dumps({"layout": layout, "series": series}))


def _show(root: Path, spec: dict, clocks: tuple) -> None:
    """The rates in force where the drivers show them."""
    f, e = clocks
    _swap(Path(root) / spec["gpu_dir"] / "cur_freq", f)
    if spec["emc_kind"] == "devfreq":
        _swap(Path(root) / spec["emc_file"] / "cur_freq", e)
    elif spec["debugfs"]:
        _swap(Path(root) / "sys/kernel/debug/bpmp/debug/clk/emc/rate", e)


def _swap(path: Path, value: int) -> None:
    tmp = path.with_name(f".{path.name}.new")
    tmp.write_text(f"{value}\n")
    os.replace(tmp, path)


def tail_busy(root: Path, f: int, e: int, last: float = 0.5) -> float:
    """The mean cores busy over the last ``last`` of the plant's series spent at (f, e) (the run
    after its choice: the work the chosen point did)."""
    series = json.loads((Path(root) / "plant.json").read_text())["series"]
    at = [row for row in series if row[1] == f and row[2] == e]
    tail = at[int(len(at) * (1 - last)) :]
    return sum(row[3] for row in tail) / len(tail)


def _stretch(root: Path, f: int, e: int, min_s: float) -> list:
    """The rows of the first stretch of the plant's series spent at (f, e) for ``min_s`` s or more."""
    series = json.loads((Path(root) / "plant.json").read_text())["series"]
    stretches: list = []
    for row in series:
        if stretches and stretches[-1][0] == (row[1], row[2]):
            stretches[-1][1].append(row)
        else:
            stretches.append(((row[1], row[2]), [row]))
    return next(r for k, r in stretches if k == (f, e) and r[-1][0] - r[0][0] >= min_s)


def window_power(root: Path, f: int, e: int, seconds: float, min_s: float = 2.0) -> float:
    """The plant's own mean power (before its 1 % sensor noise) over the last ``seconds`` of the
    first stretch of its series spent at (f, e) for at least ``min_s`` seconds: what a sweep's
    point measured over its window (the clocks are put back as its window ends)."""
    rows = _stretch(root, f, e, min_s)
    window = [row for row in rows if row[0] >= rows[-1][0] - seconds]
    return sum(row[4] for row in window) / len(window)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("root", type=Path)
    ap.add_argument("pid", type=int)
    ap.add_argument("--layout", choices=sorted(LAYOUTS), default="orin-jp5")
    a = ap.parse_args()
    run(a.root, a.pid, a.layout)


if __name__ == "__main__":
    main()


def bench_in_the_loop(
    bundle,
    root: Path,
    layout: str,
    *args: str,
    seconds: float = 8.0,
    kill_after: float | None = None,
    kill_with: int = signal.SIGKILL,
) -> tuple:
    """`edgert bench BUNDLE --sysfs-root ROOT ...` with this plant on the ``layout`` tree (written
    here): (the bench JSON or None, the process's return code, its stderr). ``kill_after``: send
    ``kill_with`` to the bench that many seconds after its first clock write."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    tree = write_layout(root, layout)
    report = Path(root) / "bench.json"
    proc = start_bench(bundle, root, report, seconds, *args)
    plant = subprocess.Popen(
        [sys.executable, "-m", "tests.clock_plant", str(root), str(proc.pid), "--layout", layout],
        cwd=repo,
    )
    if kill_after is not None:
        first = dict(tree["files"])
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if any(Path(f).read_text() != v for f, v in first.items()):
                break
            time.sleep(0.05)
        time.sleep(kill_after)
        proc.send_signal(kill_with)
    _, err = proc.communicate(timeout=600)
    plant.wait(timeout=10)
    result = json.loads(report.read_text()) if proc.returncode == 0 else None
    return result, proc.returncode, err
