"""Operating points under a power cap or at a target rate: the candidate settings (threads,
batch, precision), each measured, and the choice among them
(:mod:`edgert.runtime.power.operating_point`)."""

from __future__ import annotations

from edgert.apps import processes
from edgert.runtime.errors import EdgertError
from edgert.runtime.precision import PRECISIONS, model_file

from .config import BenchConfig, make_inputs


def operating_points(cfg: BenchConfig) -> list[dict]:
    """Candidate settings: ONNX Runtime intra-op threads (1, 2, all cores), the batch asked for and
    the bundle's largest (up to 8), FP32 and every gated model the bundle records."""
    import os

    from edgert.runtime.engine import Engine

    with processes.uninterrupted(
        Engine.load, cfg.model, backend=cfg.backend, precision="fp32"
    ) as probe:
        onnxruntime = probe.backend == "onnxruntime"
        dynamic = bool(probe.inputs) and probe.inputs[0].shape[0] < 0
        batches = sorted({cfg.batch, min(8, probe.max_batch or 8)} if dynamic else {cfg.batch})
        hashes = probe.manifest.hashes if probe.manifest else {}
    precisions = ["fp32"] + [p for p in PRECISIONS[1:] if model_file(p) in hashes]
    cores = os.cpu_count() or 1
    threads = sorted({1, 2, cores} & set(range(1, cores + 1))) if onnxruntime else [None]
    return [
        {"intra_op_threads": t, "batch": b, "precision": p}
        for t in threads
        for b in batches
        for p in precisions
    ]


def choose_operating_point(cfg: BenchConfig, meter, idle: float, options: dict, say) -> dict:
    """Measure each candidate uncapped for ``probe_seconds``, choose the one with the most
    throughput under the cap (the least energy per inference there) or, with ``target_fps``, the
    one with the least energy per inference paced to that rate, and set ``cfg`` / ``options`` to
    it; pacing then covers only the remainder."""
    from edgert.runtime.power.operating_point import OperatingPoint, choose, choose_for_rate

    points = []
    for setting in operating_points(cfg):
        label = " ".join(f"{k}={v}" for k, v in setting.items() if v is not None)
        measured = _probe(cfg, setting, meter, say, label)
        if measured is not None:
            points.append(OperatingPoint(label, setting, *measured))
            say(f"  {label}: {measured[1]:.1f}/s at {measured[0]:.2f} W")
    if not points:
        raise EdgertError("no operating point could be measured (every candidate failed to run)")
    rate = cfg.target_fps
    best, why = choose_for_rate(points, rate, idle) if rate else choose(points, cfg.power_cap, idle)
    say(f"operating point: {why}")
    cfg.batch, cfg.precision = best.settings["batch"], best.settings["precision"]
    if best.settings["intra_op_threads"]:
        options["intra_op_threads"] = best.settings["intra_op_threads"]
    candidates = [
        {
            "label": p.label,
            "power_w": round(p.power_w, 3),
            "throughput_ips": round(p.throughput_ips, 2),
            "mj_per_inference": round(p.energy_mj(), 3),
            **(
                {"mj_at_target": round(p.mj_at_rate(rate, idle), 3)}
                if rate
                else {"under_cap_ips": round(p.capped_throughput(cfg.power_cap, idle), 2)}
            ),
        }
        for p in points
    ]
    return {"chosen": best.label, "why": why, "candidates": candidates}


def _probe(cfg: BenchConfig, setting: dict, meter, say, label: str):
    """(average W, images/s) of one setting run uncapped, without spinning; None if it cannot run."""
    from edgert.runtime.engine import Engine

    extra = {"intra_op_threads": setting["intra_op_threads"]} if setting["intra_op_threads"] else {}
    try:
        with processes.uninterrupted(
            Engine.load,
            cfg.model,
            backend=cfg.backend,
            precision=setting["precision"],
            spin=False,
            **extra,
        ) as engine:
            feeds = make_inputs(engine, setting["batch"])
            engine.infer(feeds)
            t0, n = meter.now(), 0
            while meter.now() - t0 < cfg.probe_seconds:
                engine.infer(feeds)
                n += setting["batch"]
            t1 = meter.now()
    except EdgertError as exc:
        say(f"  {label}: skipped ({exc})")
        return None
    watts = meter.average_w(t0, t1)
    return None if watts is None else (watts, n / (t1 - t0))
