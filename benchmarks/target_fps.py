"""Energy per inference at a target rate (issue 40): MobileNetV2 on ONNX Runtime CPU held to a rate by
`edgert bench --target-fps`, in the loop with a plant process.

On the clock plant (tests/clock_plant.py: recreated Jetson clock trees; the plant stops and
continues the bench so it runs as fast as the GPU and EMC limits allow, and writes the board power
those clocks would draw), for each layout:

    (a) maximum clocks with pacing   edgert bench --target-fps R                (the limits in force)
    (b) clocks chosen by energy      edgert bench --target-fps R --clocks auto

(each chooses its threads / batch / precision first, at the clocks in force: the table shows the
setting, so a run whose choice differed is seen)

On this CPU without clocks (tests/power_plant.py: CPU time -> an Orin NX INA3221 tree):

    (a) the settings given, paced    edgert bench --target-fps R --keep-settings
    (b) the point chosen by energy   edgert bench --target-fps R (threads / batch / precision)

R is a share of what the model does free on this machine (``--share``, default 0.25). Prints a
table and writes JSON. Goal on the plant: (b) at least 20 % fewer joules per inference than (a) at
the same delivered rate, the rate held within 2 %.

    python benchmarks/target_fps.py [--json reports/target_fps.json] [--seconds 10]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.json_report import write_json  # noqa: E402
from edgert.export import export_model  # noqa: E402
from tests import clock_plant, power_plant  # noqa: E402


def _row(board: str, run: str, r: dict) -> dict:
    t = r["target_fps"]
    choice = r.get("clock_choice") or {}
    point = r.get("operating_point") or {}
    return {
        "board": board,
        "run": run,
        "target_ips": t["target_ips"],
        "delivered_ips": t["delivered_ips"],
        "held": t["held"],
        "avg_w": round(r["power_w"]["avg"], 3),
        "mj_per_inference": round(r["energy_mj_per_inference"], 2),
        "p99_ms": round(r["latency_ms"]["p99"], 2),
        "setting": point.get("chosen") or f"batch={r['batch']} precision={r['precision']}",
        "clocks": choice.get("chosen"),
        "why": choice.get("why") or point.get("why"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", default="reports/target_fps.json")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--share", type=float, default=0.25, help="R as a share of the free rate")
    ap.add_argument("--layouts", nargs="+", default=["orin-jp5", "orin-jp6", "thor"])
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="edgert-tfps-"))
    bundle = export_model("zoo:mobilenet_v2", work / "mv2.edgert").bundle
    free = power_plant.bench_in_the_loop(bundle, work / "free", seconds=4.0)
    rate = round(a.share * free["throughput_ips"], 1)
    print(f"free: {free['throughput_ips']:.1f}/s; target R = {rate}/s")
    rows = []
    for layout in a.layouts:
        for run, extra in (
            ("(a) max clocks + pacing", ()),
            ("(b) --clocks auto", ("--clocks", "auto")),
        ):
            r, rc, err = clock_plant.bench_in_the_loop(
                bundle,
                work / f"{layout}-{len(rows)}",
                layout,
                "--target-fps",
                str(rate),
                *extra,
                seconds=a.seconds,
            )
            if rc:
                raise SystemExit(f"{layout} {run}: edgert bench failed: {err[-400:]}")
            rows.append(_row(f"plant {layout}", run, r))
    for run, extra in (
        ("(a) settings given, paced", ("--keep-settings",)),
        ("(b) point chosen", ()),
    ):
        r = power_plant.bench_in_the_loop(
            bundle, work / f"cpu-{len(rows)}", "--target-fps", str(rate), *extra, seconds=a.seconds
        )
        rows.append(_row("this CPU (power plant)", run, r))
    print(
        f"\n{'board':<22}{'run':<27}{'R/s':>6}{'got/s':>8}{'held':>6}{'W':>8}{'mJ/inf':>9}"
        f"{'saved':>7}  point"
    )
    base = {}
    for row in rows:
        base.setdefault(row["board"], row["mj_per_inference"])
        saved = 1 - row["mj_per_inference"] / base[row["board"]]
        row["saved_vs_a"] = round(saved, 4)
        clocks = row["clocks"]
        where = f"gpu {clocks['gpu_mhz']:g} / emc {clocks['emc_mhz']:g} MHz" if clocks else ""
        print(
            f"{row['board']:<22}{row['run']:<27}{row['target_ips']:>6g}{row['delivered_ips']:>8.2f}"
            f"{'yes' if row['held'] else 'NO':>6}{row['avg_w']:>8.2f}{row['mj_per_inference']:>9.1f}"
            f"{saved:>7.0%}  {row['setting']} {where}"
        )
    write_json(a.json, {"rate_ips": rate, "free_ips": free["throughput_ips"], "rows": rows})


if __name__ == "__main__":
    main()
