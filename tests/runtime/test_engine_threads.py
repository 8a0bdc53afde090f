"""One Engine shared by several threads (camera stages, a server): every caller gets its own
results, and closing under a call in flight is safe (issue: reliability 2)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from edgert.runtime.engine import Engine
from edgert.runtime.errors import ModelError
from tests.tiny import matmul_model, matmul_reference


@pytest.mark.parametrize("batch", [2, "N"], ids=["static-outputs", "dynamic"])
def test_eight_threads_each_get_their_own_results(tmp_path, batch):
    engine = Engine.load(matmul_model(tmp_path / "m.onnx", batch=batch))
    wrong = []
    barrier = threading.Barrier(8)

    def worker(k: int) -> None:
        rng = np.random.default_rng(k)
        barrier.wait()
        for _ in range(300):
            x = rng.standard_normal((2, 4)).astype(np.float32) + k
            y = engine.infer(x)["y"]
            if not np.allclose(y, matmul_reference(x), rtol=1e-5, atol=1e-5):
                wrong.append(k)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine.close()
    assert wrong == []


def test_results_are_the_callers_own(tmp_path):
    with Engine.load(matmul_model(tmp_path / "m.onnx", batch=2)) as engine:
        x = np.ones((2, 4), np.float32)
        first = engine.infer(x)["y"]
        kept = first.copy()
        engine.infer(x * 5)
        first += 1  # writable, and not the engine's buffer
        np.testing.assert_array_equal(first - 1, kept)


def test_close_while_other_threads_infer(tmp_path):
    engine = Engine.load(matmul_model(tmp_path / "m.onnx", batch=2))
    errors = []
    stop = threading.Event()

    def worker():
        x = np.ones((2, 4), np.float32)
        while not stop.is_set():
            try:
                np.testing.assert_allclose(engine.infer(x)["y"], matmul_reference(x), rtol=1e-6)
            except ModelError as exc:  # "closed": the only acceptable failure
                assert "closed" in str(exc)
                return
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
                return

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    engine.close()
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
