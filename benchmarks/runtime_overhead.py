"""Engine.infer vs a bare onnxruntime.InferenceSession.run, on CPU.

Targets (issue 3): <= 3 % overhead on MobileNetV2 batch 1; <= 20 us added per call on a trivial
model. Runs both alternately (so drift hits both), reports medians, prints a table, writes JSON.

    python benchmarks/runtime_overhead.py [--json reports/runtime_overhead.json] [--seconds 20]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from json_report import write_json
from onnx import TensorProto, helper

from edgert.runtime.engine import Engine


def trivial_model(path: Path) -> Path:
    """y = x + 1 on float32[1, 16]: inference costs almost nothing, so overhead shows."""
    one = helper.make_tensor("one", TensorProto.FLOAT, (1,), [1.0])
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])],
        "trivial",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        initializer=[one],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def mobilenet(folder: Path, dynamic: bool) -> Path:
    from edgert.export import export_model

    out = folder / f"mobilenet_v2{'_dyn' if dynamic else ''}.edgert"
    export_model("zoo:mobilenet_v2", out, dynamic_batch=dynamic, max_batch=8 if dynamic else None)
    return out / "model.onnx"


def session(path: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def measure(model: Path, x: np.ndarray, seconds: float, rounds: int = 40) -> dict:
    bare = session(model)
    name = bare.get_inputs()[0].name
    engine = Engine.load(model, backend="onnxruntime")
    for _ in range(20):  # warm both
        bare.run(None, {name: x})
        engine.infer(x)
    per_round = max(1, int(seconds / rounds / max(_time_one(bare, name, x), 1e-7) / 2))
    bare_t, ours_t = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(per_round):
            bare.run(None, {name: x})
        t1 = time.perf_counter()
        for _ in range(per_round):
            engine.infer(x)
        t2 = time.perf_counter()
        bare_t.append((t1 - t0) / per_round)
        ours_t.append((t2 - t1) / per_round)
    b, o = float(np.median(bare_t)), float(np.median(ours_t))
    engine.close()
    return {
        "bare_us": b * 1e6,
        "engine_us": o * 1e6,
        "added_us": (o - b) * 1e6,
        "overhead_pct": (o / b - 1) * 100,
        "calls_per_round": per_round,
        "rounds": rounds,
    }


def _time_one(sess, name, x) -> float:
    t0 = time.perf_counter()
    for _ in range(5):
        sess.run(None, {name: x})
    return (time.perf_counter() - t0) / 5


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", default="reports/runtime_overhead.json")
    ap.add_argument("--seconds", type=float, default=20.0, help="time per case")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows["trivial [1,16]"] = measure(
            trivial_model(tmp / "t.onnx"),
            rng.standard_normal((1, 16)).astype(np.float32),
            args.seconds / 2,
        )
        img = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
        rows["mobilenet_v2 b1 static"] = measure(mobilenet(tmp, dynamic=False), img, args.seconds)
        rows["mobilenet_v2 b1 dynamic"] = measure(mobilenet(tmp, dynamic=True), img, args.seconds)
    print(f"{'case':<26}{'bare run':>12}{'Engine.infer':>14}{'added':>12}{'overhead':>10}")
    for case, r in rows.items():
        print(
            f"{case:<26}{r['bare_us']:>10.1f}us{r['engine_us']:>12.1f}us{r['added_us']:>10.1f}us{r['overhead_pct']:>9.2f}%"
        )
    meta = {
        "onnxruntime": ort.__version__,
        "providers": ["CPUExecutionProvider"],
        "targets": {"mobilenet_overhead_pct": 3.0, "trivial_added_us": 20.0},
    }
    write_json(args.json, {"meta": meta, "results": rows})


if __name__ == "__main__":
    main()
