"""Power caps on a CPU in a closed loop: MobileNetV2 on ONNX Runtime CPU under `edgert bench
--power-cap`, the power coming from tests/power_plant.py (a separate process turning the bench
process's real CPU time into a recreated Orin NX INA3221 tree: idle + 0.5 W while busy + 6 W per
core busy, 0.3 s lag, 1 % noise, 20 Hz).

For the uncapped run and three caps (70 %, 50 % and 35 % of the way from idle to the uncapped
power): with spinning (ONNX Runtime's default, as before the fix), without spinning (edgert's
default under a cap), and without spinning with the operating point chosen by measurement
(--choose-point). Prints a table and writes JSON.

    python benchmarks/power_cap_cpu.py [--json reports/power_cap_cpu.json] [--seconds 14]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from edgert.export import export_model  # noqa: E402
from edgert.quantize import build  # noqa: E402
from tests.power_plant import bench_in_the_loop, settled_mean  # noqa: E402


def bench(bundle: Path, work: Path, tag: str, seconds: float, *args: str) -> dict:
    r = bench_in_the_loop(bundle, work / tag, *args, seconds=seconds)
    return {
        "run": tag,
        "cap_w": r["power_cap_w"],
        "spin": r["spin"],
        "avg_w": r["power_w"]["avg"],
        "settled_w": settled_mean(r),
        "idle_w": r["power_w"]["idle"],
        "ips": r["throughput_ips"],
        "mj_per_inference": r["energy_mj_per_inference"],
        "point": (r.get("operating_point") or {}).get("chosen", "as given"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", default="reports/power_cap_cpu.json")
    ap.add_argument("--seconds", type=float, default=14.0)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        bundle = export_model(
            "zoo:mobilenet_v2", work / "mv2.edgert", dynamic_batch=True, max_batch=8
        ).bundle
        build(bundle, "int8", calib_size=200, holdout_size=64)
        free = bench(bundle, work, "uncapped", args.seconds)
        rows.append(free)
        idle, top = free["idle_w"], free["avg_w"]
        for frac in (0.7, 0.5, 0.35):
            cap = idle + frac * (top - idle)
            linear = (cap - idle) / (top - idle) * free["ips"]
            for tag, extra in (
                ("spinning (before)", ["--spin", "on"]),
                ("no spinning", []),
                ("no spinning + point", ["--choose-point"]),
            ):
                row = bench(
                    bundle, work, f"{tag} {frac}", args.seconds, "--power-cap", f"{cap:.3f}", *extra
                )
                row["run"] = f"cap {frac:.0%}: {tag}"
                row["vs_linear"] = row["ips"] / linear
                row["settled_vs_cap"] = row["settled_w"] / cap
                rows.append(row)
    head = f"{'run':<34}{'cap W':>7}{'settled W':>10}{'/cap':>6}{'inf/s':>8}{'/linear':>8}{'mJ/inf':>8}  point"
    print(head)
    for r in rows:
        cap = f"{r['cap_w']:.2f}" if r["cap_w"] else "-"
        ratio = f"{r['settled_vs_cap']:.3f}" if "settled_vs_cap" in r else "-"
        lin = f"{r['vs_linear']:.2f}" if "vs_linear" in r else "-"
        print(
            f"{r['run']:<34}{cap:>7}{r['settled_w']:>10.2f}{ratio:>6}{r['ips']:>8.1f}{lin:>8}"
            f"{r['mj_per_inference']:>8.1f}  {r['point']}"
        )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    print(f"json: {args.json}")


if __name__ == "__main__":
    main()
