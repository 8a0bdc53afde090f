"""Running models on data sets with ONNX Runtime, for calibration search and the gate."""

from __future__ import annotations

import numpy as np


def session(model):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, sess_options=opts, providers=["CPUExecutionProvider"])


def run(model_or_session, inputs: np.ndarray, batch: int = 32) -> dict[str, np.ndarray]:
    """All outputs for ``inputs`` (N, ...), in batches (batch 1 when the model's batch is fixed)."""
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
    return {n: np.concatenate(v) for n, v in parts.items()}
