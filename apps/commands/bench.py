"""edgert bench: latency, throughput, power and energy per inference (optionally power-capped)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edgert.apps.argtypes import (
    BACKENDS,
    PRECISIONS,
    add_power_arguments,
    nonneg_float,
    positive_float,
    positive_int,
)
from edgert.runtime import json_text

EPILOG = """examples:
  edgert bench mobilenet_v2.edgert --duration 20 --json-file bench.json --plot bench.png
  edgert bench mobilenet_v2.edgert --iterations 500 --json | jq .latency_ms.p99
  edgert bench mobilenet_v2.edgert --power-cap 10
  edgert bench mobilenet_v2.edgert --sweep precision=fp16,int8 batch=1,4,8 power_cap=none,10 --plot pareto.png

Energy per inference = energy over the run / images processed (and the same above idle: the
idle power measured before the run is subtracted). Power comes from the most specific sensor
(`edgert power`); without one the latency numbers are still measured and power is reported
unavailable with the reason.
"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="latency, throughput, W and mJ per inference (e.g. edgert bench m.edgert --power-cap 10)",
        description="Benchmark a model: latency percentiles, throughput, power, energy per inference.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL", help="bundle folder, .onnx or .engine")
    p.add_argument(
        "--duration", type=positive_float, metavar="S", help="seconds to run (default 10)"
    )
    p.add_argument(
        "--iterations",
        type=positive_int,
        metavar="N",
        help="inferences to run instead of a duration",
    )
    p.add_argument(
        "--warmup", type=nonneg_float, default=1.0, metavar="S", help="warm-up seconds (default 1)"
    )
    p.add_argument("--batch", type=positive_int, default=1)
    p.add_argument("--precision", default="auto", choices=PRECISIONS)
    p.add_argument("--backend", default="auto", choices=BACKENDS)
    add_power_arguments(p)
    p.add_argument(
        "--idle-seconds",
        type=nonneg_float,
        default=2.0,
        help="idle power measurement before the run (default 2)",
    )
    _rate_arguments(p)
    p.add_argument(
        "--json", action="store_true", help="print the results as JSON (progress on stderr)"
    )
    p.add_argument("--json-file", metavar="FILE", help="also write the results as JSON to FILE")
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="latency histogram + power over time (Pareto plot with --sweep)",
    )
    p.set_defaults(func=run)


def _rate_arguments(p) -> None:
    """What a run holds and chooses: spinning, the operating point, a target rate and its clocks, the power mode, a sweep."""
    p.add_argument(
        "--spin",
        choices=["auto", "on", "off"],
        default="auto",
        help="busy-wait between inferences (ONNX Runtime's threads, CUDA's sync): lowest latency, "
        "but burns a core while waiting; auto = off under --power-cap (default auto)",
    )
    p.add_argument(
        "--choose-point",
        action="store_true",
        help="with --power-cap: measure threads / batch / precision first and run the one with the "
        "most throughput under the cap (least energy per inference); pace only the rest",
    )
    p.add_argument(
        "--target-fps",
        type=positive_float,
        metavar="N",
        help="hold N inferences a second at the least energy: with a power sensor, threads / "
        "batch / precision are measured first and the one with the least energy per inference "
        "at N runs, paced to N (with --power-cap / --temp-cap the tightest bound wins; the "
        "report says which)",
    )
    p.add_argument(
        "--keep-settings",
        action="store_true",
        help="with --target-fps: pace the threads / batch / precision given instead of choosing "
        "the point with the least energy (what a run at the board's clocks with pacing costs)",
    )
    p.add_argument(
        "--clocks",
        choices=["auto"],
        help="Jetson, with --target-fps: also choose the GPU clock limit and the EMC cap by "
        "measured energy at the rate, inside the current power mode (root or a udev rule); the "
        "limits in force are recorded first and put back at exit (after a crash: "
        "edgert power --restore)",
    )
    p.add_argument(
        "--max-latency",
        type=positive_float,
        metavar="MS",
        help="with --clocks auto: a clock point holds the rate only with p99 latency within MS "
        "(default two slots of the rate)",
    )
    p.add_argument(
        "--nvpmodel", metavar="NAME", help="switch to this Jetson power mode first (root; opt-in)"
    )
    p.add_argument(
        "--sweep",
        nargs="+",
        metavar="KEY=V1,V2",
        help="grid over precision, batch, power_cap, backend, gpu_clock and emc_clock (MHz or "
        "max; Jetson); with --target-fps each point is paced to the rate and the least energy "
        "among those that held it is marked",
    )


def _config(args, **over):
    from edgert.apps.bench import BenchConfig

    cfg = BenchConfig(
        model=args.model,
        duration=args.duration if args.iterations is None else None,
        iterations=args.iterations,
        warmup=args.warmup,
        batch=args.batch,
        precision=args.precision,
        backend=args.backend,
        power_cap=args.power_cap,
        temp_cap=args.temp_cap,
        idle_seconds=args.idle_seconds,
        sysfs_root=args.sysfs_root,
        spin=args.spin,
        choose_point=args.choose_point,
        target_fps=args.target_fps,
        clocks=args.clocks,
        keep_settings=args.keep_settings,
        max_latency_ms=args.max_latency,
    )
    for k, v in over.items():
        setattr(cfg, k, v)
    return cfg


def _print(r: dict) -> None:
    from edgert.apps.report import print_conditions

    lat = r["latency_ms"]
    print(f"backend    {r['backend_reason']}")
    print(
        f"latency    min {lat['min']:.3f}  mean {lat['mean']:.3f}  p50 {lat['p50']:.3f}  p90 {lat['p90']:.3f}  "
        f"p95 {lat['p95']:.3f}  p99 {lat['p99']:.3f}  max {lat['max']:.3f} ms  (cv {lat['cv']:.3f})"
    )
    print(
        f"throughput {r['throughput_ips']:.1f} inferences/s ({r['iterations']} runs of batch {r['batch']} in {r['seconds']:.1f} s)"
    )
    if r["split_ms"]:
        print(
            f"split      H2D {r['split_ms']['h2d']:.3f}  compute {r['split_ms']['compute']:.3f}  D2H {r['split_ms']['d2h']:.3f} ms"
        )
    else:
        print(f"split      n/a ({r['split_reason']})")
    if r.get("operating_point"):
        print(f"point      {r['operating_point']['why']}")
    if r.get("clock_choice"):
        print(f"clocks     {r['clock_choice']['why']}")
    for name, c in (r.get("clocks_set") or {}).items():
        if c["set_max_mhz"] is not None:
            print(
                f"clocks     {name} limited to {c['set_max_mhz']:g} MHz for the run "
                f"(was {c['before_max_mhz']:g} MHz; put back)"
            )
    t = r.get("target_fps")
    if t:
        print(
            f"target     {t['target_ips']:g}/s: delivered {t['delivered_ips']:.2f}/s "
            f"({'held' if t['held'] else 'not held'}; bound: {t['bound']})"
        )
    if r["power_w"]:
        pw = r["power_w"]
        idle = f"{pw['idle']:.2f} W" if pw["idle"] is not None else "n/a"
        above = r["energy_mj_per_inference_above_idle"]
        print(f"power      avg {pw['avg']:.2f} W, idle {idle} ({pw['source']})")
        print(
            f"energy     {r['energy_mj_per_inference']:.3f} mJ/inference"
            + (f" ({above:.3f} above idle)" if above is not None else "")
        )
    else:
        print(f"power      unavailable ({r['power_reason']})")
    d = r["device"]
    gpu = ", ".join(d["gpu"]) if d["gpu"] else f"none ({d['gpu_reason']})"
    jet = f"{d['jetson'].get('model', '')} {d['jetson']['l4t']}" if d["jetson"] else "not a Jetson"
    print(
        f"device     GPU {gpu}; {jet}; TensorRT {d['tensorrt'] or 'absent'}"
        + (f"; nvpmodel {d['nvpmodel']['mode']}" if d["nvpmodel"] else "")
    )
    print_conditions(r.get("conditions"))


def _check_outputs(args) -> None:
    """--json-file and --plot must not be the model (or a file of its bundle): writing them would
    destroy what is measured."""
    import os

    from edgert.runtime.errors import OutputError

    model = Path(args.model)
    for flag, value in (("--json-file", args.json_file), ("--plot", args.plot)):
        if not value:
            continue
        out = os.path.realpath(value)
        inside = model.is_dir() and Path(os.path.realpath(model)) in Path(out).parents
        if inside or out == os.path.realpath(model):
            raise OutputError(
                f"{flag} {value} is the model {model} (or inside its bundle): pick another file"
            )
    if (
        args.json_file
        and args.plot
        and os.path.realpath(args.json_file) == os.path.realpath(args.plot)
    ):
        raise OutputError(f"--json-file and --plot are the same file {args.plot}")


def run(args) -> int:
    from edgert.apps import bench

    _check_outputs(args)
    if args.nvpmodel:
        from edgert.runtime.errors import SensorError
        from edgert.runtime.power import nvpmodel

        modes = nvpmodel.read(args.sysfs_root or "/")
        if modes is None:
            raise SensorError("--nvpmodel needs a Jetson (no /etc/nvpmodel.conf)")
        nvpmodel.set_mode(args.nvpmodel, modes)
    if args.sweep:
        return _sweep(args, bench)
    say = _say(args)
    result = bench.run_bench(_config(args), say=say)
    if not args.json:
        _print(result)
    _emit(args, result, say)
    if args.plot:
        from edgert.apps.plots import bench_plot

        say(f"plot: {bench_plot(result, args.plot)}")
    return 0


def _say(args):
    """Human output: stdout, or stderr when stdout carries --json."""
    out = sys.stderr if args.json else sys.stdout
    return lambda line: print(line, file=out, flush=True)


def _emit(args, data, say) -> None:
    text = json_text.dumps(data, indent=2, default=str) + "\n"
    if args.json:
        sys.stdout.write(text)
    if args.json_file:
        from edgert.runtime import atomic

        atomic.write_text(Path(args.json_file), text)
        say(f"json: {args.json_file}")


def _sweep(args, bench) -> int:
    if args.clocks:
        from edgert.runtime.errors import ModelError

        raise ModelError(
            "--clocks auto chooses one point and --sweep measures a grid: give gpu_clock= / "
            "emc_clock= axes to the sweep instead"
        )
    say = _say(args)
    duration = args.duration or 5.0

    def config(setting: dict):
        return _config(
            args,
            duration=duration if args.iterations is None else None,
            keep_settings=True,  # each point runs as the grid says
            **setting,
        )

    summary = bench.run_sweep(bench.parse_sweep(args.sweep), config, say)
    points, ran = summary["points"], [p for p in summary["points"] if "skipped" not in p]
    say(f"\n{'setting':<44}{'p50 ms':>9}{'p99 ms':>9}{'inf/s':>9}{'W':>8}{'mJ/inf':>9}")
    for p in points:
        if "skipped" in p:
            say(f"{p['label']:<44}  skipped: {p['skipped'][:60]}")
            continue
        w = f"{p['power_w']['avg']:.2f}" if p["power_w"] else "n/a"
        mj = p["energy_mj_per_inference"]
        mj = f"{mj:.3f}" if mj is not None else "n/a"
        mark = (
            "  <- most energy-efficient"
            if p["label"] == summary["most_efficient"]
            else ("  (Pareto)" if p["label"] in summary["pareto"] else "")
        )
        lat = p["latency_ms"]
        say(
            f"{p['label']:<44}{lat['p50']:>9.3f}{lat['p99']:>9.3f}{p['throughput_ips']:>9.1f}"
            f"{w:>8}{mj:>9}{mark}"
        )
    if summary.get("target_ips") and summary["most_efficient"]:
        say(
            f"(marked: the least energy per inference among the points that held {summary['target_ips']:g}/s)"
        )
    if not summary["most_efficient"]:
        say("(no power sensor: energy per inference unavailable, so no energy ranking)")
    if summary["conditions_mismatch"]:
        say(
            f"warning: the points ran under different conditions "
            f"({summary['conditions_mismatch']}); compare them with care"
        )
    _emit(args, summary, say)
    if args.plot:
        from edgert.apps.plots import pareto_plot

        front = [i for i, p in enumerate(ran) if p["label"] in summary["pareto"]]
        say(f"plot: {pareto_plot(ran, front, args.plot)}")
    return 0
