from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent

# pytester: tests/test_markers.py runs inner sessions; tests.markers: the markers and their check
pytest_plugins = ["pytester", "tests.markers"]


# A suite started as a background job (`make test &` in a script, some CI runners) has SIGINT
# ignored, and every process a test starts inherits that: the tests that press Ctrl-C on a
# camera (a terminal's SIGINT) then wait for a process that cannot hear it (seen: three failures
# and a camera left running at 126 % CPU, which failed timing tests after it). A Python handler
# is not inherited: children start with SIGINT at its default, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def _cache_dir(tmp_path_factory):
    """A session-wide zoo cache (digits_cnn trains once), kept out of the user's home."""
    path = tmp_path_factory.mktemp("edgert-cache")
    os.environ["EDGERT_CACHE_DIR"] = str(path)
    yield path


def benchmark(name: str):
    """``benchmarks/NAME.py`` imported as a module (that folder at the end of ``sys.path``, for
    the helpers the benchmarks import by their bare names, shadowing no installed package)."""
    import importlib.util

    folder = str(ROOT / "benchmarks")
    if folder not in sys.path:
        sys.path.append(folder)
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_cli(
    *args: str,
    cwd: Path | None = None,
    env: dict | None = None,
    timeout: float = 300,
    prefix: tuple = (),
):
    """Run the real `edgert` command line in a subprocess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [*prefix, sys.executable, "-m", "edgert.apps", *map(str, args)],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def unprivileged() -> tuple:
    """A command prefix under which a file with mode 0 really cannot be read: as root, util-linux
    setpriv drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (the test skips without it)."""
    if os.geteuid() != 0:
        return ()
    import shutil

    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without util-linux setpriv to drop CAP_DAC_OVERRIDE")
    return (setpriv, "--bounding-set=-dac_override,-dac_read_search")


def assert_user_error(proc, *fragments: str, code: int = 2) -> None:
    """One clear sentence on stderr, the given exit code, no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    for frag in fragments:
        assert frag.lower() in err.lower(), (frag, err)


def leftovers(folder: Path) -> list[str]:
    """Names of anything half-written (staging folders, temp files) left in ``folder``."""
    return [
        p.name
        for p in folder.iterdir()
        if p.name.startswith(".") or p.suffix in (".partial", ".tmp")
    ]


def digits_built(folder: Path, precision: str):
    """(bundle, build report): zoo:digits_cnn with a dynamic batch, built to ``precision`` with
    300 calibration and 200 hold-out samples (the INT8 and FP8 tests' shared start)."""
    from edgert.export import export_model
    from edgert.quantize import build

    bundle = export_model("zoo:digits_cnn", folder / "digits.edgert", dynamic_batch=True).bundle
    return bundle, build(bundle, precision, calib_size=300, holdout_size=200)


def digits_logits(model: Path, x, **load) -> np.ndarray:
    """digits_cnn logits of ``x`` from ``model`` (a bundle or one of its .onnx files) on ONNX
    Runtime, in batches of 32; ``load``: more Engine.load arguments (precision=...)."""
    from edgert.runtime.engine import Engine

    with Engine.load(model, backend="onnxruntime", **load) as engine:
        return np.concatenate([engine.infer(x[i : i + 32])["logits"] for i in range(0, len(x), 32)])
