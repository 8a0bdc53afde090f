"""PyCUDA's real API without a GPU (issue 51): PyCUDA built from its sdist against the CUDA
toolkit's headers on this machine (``/usr/local/cuda*``: the driver API's ``cuda.h``), linked to a
stub ``libcuda.so.1`` whose functions all return CUDA_ERROR_NO_DEVICE (100). Its Python API is
then the real one (classes, methods, enums), and edgert's driver code meets the answers a
machine without a GPU gives. Installed into a folder of its own, never into the test venv (where
PyCUDA's absence is what the CPU tests expect).

    python -m tests.pycuda_api prepare [DIR]     (make test runs it: ~2 min the first time)

Tests only.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.trt_api import stub_env, stub_library

SPEC = "pycuda==2026.1"
DEFAULT_DIR = Path(os.environ.get("EDGERT_PYCUDA_API", Path.home() / ".cache/edgert-pycuda-api"))


def folder(root: Path = DEFAULT_DIR) -> Path:
    """Where the build for this Python and numpy lies (its module is compiled against both)."""
    import numpy

    numpy_major = numpy.__version__.split(".")[0]
    return Path(root) / f"py{sys.version_info[0]}{sys.version_info[1]}-numpy{numpy_major}"


def ready(root: Path = DEFAULT_DIR) -> bool:
    return (folder(root) / "ready").exists()


def cuda_root() -> Path | None:
    """A CUDA toolkit with the driver API's header: $CUDA_ROOT, /usr/local/cuda, the newest
    /usr/local/cuda-*."""
    candidates = [os.environ.get("CUDA_ROOT"), "/usr/local/cuda"]
    candidates += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for c in candidates:
        if c and (Path(c) / "include/cuda.h").is_file():
            return Path(c)
    return None


# the few functions whose outputs PyCUDA reads even when a call failed: an error's name and
# text (it formats every error with them), the driver's version (asked at import)
OWN = {
    "cuGetErrorName": 'int cuGetErrorName(int e, const char **s) { *s = "CUDA_ERROR_NO_DEVICE";'
    " return 0; }",
    "cuGetErrorString": "int cuGetErrorString(int e, const char **s) {"
    ' *s = "no CUDA-capable device is detected"; return 0; }',
    "cuDriverGetVersion": "int cuDriverGetVersion(int *v) { *v = 13000; return 0; }",
}


def _stub(names: list[str], out: Path) -> None:
    """A libcuda.so.1 whose every function in ``names`` answers CUDA_ERROR_NO_DEVICE (100)."""
    source = "".join(
        OWN.get(n, f"int {n}(void) {{ return 100; }}") + "\n" for n in sorted(set(names))
    )
    stub_library(out, source)
    link = out.parent / "libcuda.so"
    if not link.exists():
        link.symlink_to(out.name)


def prepare(root: Path = DEFAULT_DIR) -> str | None:
    """PyCUDA built and installed under ``root``; None, or why it could not be (one line: a
    machine that cannot build it skips these tests, it does not fail ``make test``)."""
    try:
        return _prepare(root)
    except (OSError, subprocess.CalledProcessError, StopIteration, tarfile.TarError) as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _prepare(root: Path) -> str | None:
    where = folder(root)
    if ready(root):
        return None
    cuda = cuda_root()
    if cuda is None:
        return "no CUDA toolkit headers (cuda.h) on this machine to build PyCUDA against"
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    stubs, build = where / "stubs", where / "build"
    # a first stub for the link: every cu* function cuda.h declares (after its #defines)
    pre = subprocess.run(
        ["gcc", "-E", "-P", str(cuda / "include/cuda.h")], capture_output=True, text=True
    ).stdout
    _stub(re.findall(r"\b(cu[A-Z]\w*)\s*\(", pre), stubs / "libcuda.so.1")
    pip = [sys.executable, "-m", "pip"]
    got = subprocess.run(
        [*pip, "download", "-q", "--no-deps", "--no-binary", "pycuda", SPEC, "-d", str(build)],
        capture_output=True,
        text=True,
    )
    sdists = sorted(build.glob("pycuda-*.tar.gz"))
    if got.returncode != 0 or not sdists:
        return f"{SPEC}'s sdist: " + (got.stderr.strip().splitlines() or ["not found"])[-1]
    with tarfile.open(sdists[0]) as t:
        t.extractall(build)
    src = next(p for p in build.iterdir() if p.is_dir() and p.name.startswith("pycuda-"))
    steps = [
        [
            sys.executable,
            "configure.py",
            f"--cuda-root={cuda}",
            f"--cudadrv-lib-dir={stubs}",
            "--no-cuda-enable-curand",
        ],
        [*pip, "wheel", "-q", "--no-deps", "-w", str(build), "."],
    ]
    for step in steps:
        got = subprocess.run(step, cwd=src, capture_output=True, text=True)
        if got.returncode != 0:
            errors = [ln for ln in got.stderr.splitlines() if "error" in ln.lower()]
            return f"building {SPEC} failed: " + ((errors or ["no detail"])[0].strip())
    wheel = next(build.glob("pycuda-*.whl"))
    subprocess.run(
        [*pip, "install", "-q", "--no-deps", "--target", str(where / "site"), str(wheel)],
        check=True,
    )
    # the stub again, with exactly what the compiled module needs (cudaProfiler's too)
    module = next((where / "site/pycuda").glob("_driver*.so"))
    undefined = subprocess.run(
        ["nm", "-D", "--undefined-only", str(module)], capture_output=True, text=True, check=True
    ).stdout
    (stubs / "libcuda.so.1").unlink()
    _stub(
        [ln.split()[-1] for ln in undefined.splitlines() if re.search(r"\bcu\w+$", ln)],
        stubs / "libcuda.so.1",
    )
    shutil.rmtree(build)
    (where / "ready").write_text(f"{SPEC} against {cuda}\n")
    return None


def env(root: Path = DEFAULT_DIR) -> dict:
    """A subprocess's environment where ``import pycuda.driver`` is the build above."""
    where = folder(root)
    return stub_env(where / "stubs", [where / "site"])


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("what", choices=["prepare"])
    ap.add_argument("root", nargs="?", type=Path, default=DEFAULT_DIR)
    a = ap.parse_args()
    why = prepare(a.root)
    if why:
        print(f"PyCUDA's real API cannot be had here ({why}): its tests skip")


if __name__ == "__main__":
    main()
