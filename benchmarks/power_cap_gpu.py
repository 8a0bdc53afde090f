"""Power capping on a real GPU with NVML (needs PyCUDA, nvidia-ml-py and a CUDA GPU; run on the
CUDA machine with the PYTHONPATH that .device/gpu-check.sh sets).

Workload: a PyCUDA kernel burst per "inference". Measures uncapped power, then caps at three levels
between idle and uncapped: mean power after settling (target within -5 % / +2 % of the cap) and
throughput at each; and energy per inference from NVML's energy counter vs from the integrated
power samples (target: within 5 %). Prints a table, writes JSON.

    python benchmarks/power_cap_gpu.py [--json $OUT/power_cap_gpu.json] [--seconds 20]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from json_report import write_json

BURN = r"""
extern "C" __global__ void burn(float* x, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float a = x[i], b = 1.0001f;
    for (int k = 0; k < iters; ++k) { a = a * b + 0.0001f; b = b * 0.99999f + 0.00001f; }
    x[i] = a;
}
"""


class GpuWork:
    """One 'inference' = one burst of FMA-heavy kernel work, synchronised."""

    def __init__(self, ctx, iters: int = 20000) -> None:
        from pycuda.compiler import SourceModule

        from edgert.runtime.cuda.memory import DeviceBuffer
        from edgert.runtime.cuda.stream import Stream

        self.ctx = ctx
        with ctx.active():
            self.fn = SourceModule(BURN, no_extern_c=True).get_function("burn")
            # every SM busy, whatever the GPU (an H200 has 132, an Orin Nano 8 or fewer)
            attr = ctx.device.get_attribute
            sms = attr(ctx.cuda.device_attribute.MULTIPROCESSOR_COUNT)
            self.n = sms * 2048 * 4
            self.buf = DeviceBuffer(self.n * 4)
            self.stream = Stream()
        self.iters = iters

    def infer(self, _inputs=None):
        with self.ctx.active():
            self.fn(
                np.uintp(self.buf.ptr),
                np.int32(self.iters),
                block=(256, 1, 1),
                grid=(self.n // 256, 1, 1),
                stream=self.stream.pycuda,
            )
            self.stream.synchronize()


def run(work, meter, seconds: float, cap: float | None, idle: float, settle: float) -> dict:
    from edgert.runtime.power.governor import CappedRunner

    runner = CappedRunner(work, meter, cap, idle) if cap else work
    t0 = meter.now()
    count = 0
    counted_after_settle = 0
    while meter.now() - t0 < seconds:
        runner.infer(None)
        count += 1
        if meter.now() - t0 >= settle:
            counted_after_settle += 1
    t1 = meter.now()
    ts = t0 + settle
    n = counted_after_settle
    e_counter = meter.energy_j(ts, t1, counter=True)
    e_trapz = meter.energy_j(ts, t1, counter=False)
    return {
        "cap_w": cap,
        "mean_w_after_settle": meter.average_w(ts, t1),
        "throughput_ips": n / (t1 - ts),
        "mj_per_inference_counter": e_counter / n * 1e3 if n else None,
        "mj_per_inference_trapezoid": e_trapz / n * 1e3 if n else None,
        "inferences": count,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", default="reports/power_cap_gpu.json")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--settle", type=float, default=6.0)
    args = ap.parse_args()
    from edgert.runtime.cuda.driver import PrimaryContext
    from edgert.runtime.power.meter import PowerMeter
    from edgert.runtime.power.sensors import NvmlSensor

    sensor = NvmlSensor(0)
    work = GpuWork(PrimaryContext.get(0))
    rows = []
    with PowerMeter(sensor, hz=50) as meter:
        idle = meter.measure_idle(3.0)
        uncapped = run(work, meter, args.seconds, None, idle, args.settle)
        rows.append(uncapped)
        top = uncapped["mean_w_after_settle"]
        for frac in (0.25, 0.5, 0.75):
            time.sleep(2.0)  # let the GPU cool back towards idle between runs
            rows.append(
                run(work, meter, args.seconds, idle + frac * (top - idle), idle, args.settle)
            )
    print(f"{sensor.describe()}; idle {idle:.1f} W")
    print(
        f"{'cap W':>8}{'mean W':>9}{'vs cap':>9}{'inf/s':>9}{'mJ/inf counter':>16}{'mJ/inf trapz':>14}{'diff':>7}"
    )
    for r in rows:
        cap = r["cap_w"]
        vs = f"{(r['mean_w_after_settle'] / cap - 1) * 100:+.1f}%" if cap else "-"
        diff = (r["mj_per_inference_trapezoid"] / r["mj_per_inference_counter"] - 1) * 100
        r["counter_vs_trapezoid_pct"] = diff
        print(
            f"{cap or 0:>8.1f}{r['mean_w_after_settle']:>9.1f}{vs:>9}{r['throughput_ips']:>9.1f}"
            f"{r['mj_per_inference_counter']:>16.1f}{r['mj_per_inference_trapezoid']:>14.1f}{diff:>6.1f}%"
        )
    write_json(args.json, {"sensor": sensor.describe(), "idle_w": idle, "rows": rows})


if __name__ == "__main__":
    main()
