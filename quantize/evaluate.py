"""Running models on data sets with ONNX Runtime, for calibration search and the gate."""

from __future__ import annotations

import numpy as np

from edgert.runtime.backends.onnxruntime import needs_unfused

from . import progress


def session(model):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if not isinstance(model, bytes) and needs_unfused(model):
        # FP8 or FP16-scaled Q/DQ: ONNX Runtime's fusions reject or miscompute them (1.32)
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, sess_options=opts, providers=["CPUExecutionProvider"])


class Exposed:
    """``model`` on ONNX Runtime CPU with some intermediate ``tensors`` made outputs: calibration
    statistics, per-channel statistics and layer inputs for adaptive rounding all read them."""

    def __init__(self, model, tensors: list[str]) -> None:
        import onnx

        m = onnx.ModelProto()
        m.CopyFrom(model)
        have = {o.name for o in m.graph.output}
        for t in tensors:
            if t not in have:
                m.graph.output.append(onnx.helper.make_empty_tensor_value_info(t))
        self.tensors = list(tensors)
        self.sess = session(m)
        inp = self.sess.get_inputs()[0]
        self.input = inp.name
        self.fixed_batch = inp.shape[0] if isinstance(inp.shape[0], int) else None

    def usable(self, n: int) -> int:
        """How many of ``n`` samples :meth:`batches` feeds (whole batches of a fixed batch)."""
        return n - n % self.fixed_batch if self.fixed_batch else n

    def batches(self, data: np.ndarray, batch: int = 16, what: str = "running the model"):
        """{tensor: array} per batch of ``data`` (whole batches only for a fixed-batch model);
        ``what``: the step the progress reports name."""
        step = self.fixed_batch or batch
        usable = self.usable(len(data))
        with progress.step(what, usable, "samples") as done:
            for i in range(0, usable, step):
                outs = self.sess.run(self.tensors, {self.input: data[i : i + step]})
                yield dict(zip(self.tensors, outs, strict=True))
                done.advance(len(outs[0]) if outs else step)


def run(
    model_or_session, inputs: np.ndarray, batch: int = 32, what: str = "running the model"
) -> dict[str, np.ndarray]:
    """All outputs for ``inputs`` (N, ...), in batches (batch 1 when the model's batch is fixed);
    ``what``: the step the progress reports name."""
    with progress.step(what, len(inputs), "samples") as done:
        sess = model_or_session if hasattr(model_or_session, "run") else session(model_or_session)
        inp = sess.get_inputs()[0]
        fixed = inp.shape[0] if isinstance(inp.shape[0], int) else None
        step = fixed or batch
        names = [o.name for o in sess.get_outputs()]
        parts: dict[str, list] = {n: [] for n in names}
        for i in range(0, len(inputs), step):
            chunk = inputs[i : i + step]
            if fixed and len(chunk) != fixed:
                break
            for n, v in zip(names, sess.run(None, {inp.name: chunk}), strict=True):
                parts[n].append(v)
            done.advance(len(chunk))
    return {n: np.concatenate(v) for n, v in parts.items()}


def cpu_latency_ms(model, sample: np.ndarray, runs: int = 30) -> float:
    """Median ONNX Runtime CPU latency of one sample (batch 1), after a warm-up: how the runtime
    chooses, on ONNX Runtime CPU, between FP32 and a gated reduced-precision model."""
    import time

    sess = model if hasattr(model, "run") else session(model)
    name = sess.get_inputs()[0].name
    x = np.ascontiguousarray(sample[None])
    warm = max(3, runs // 10)
    times = []
    with progress.step("ONNX Runtime CPU latency", warm + runs, "runs") as done:
        for _ in range(warm):
            sess.run(None, {name: x})
            done.advance()
        for _ in range(runs):
            t0 = time.perf_counter()
            sess.run(None, {name: x})
            times.append(time.perf_counter() - t0)
            done.advance()
    return float(np.median(times) * 1e3)
