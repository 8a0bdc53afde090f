"""TensorRT's real Python API without TensorRT (issue 51): the binding wheels from PyPI, imported
against stub libraries, so tests hold edgert's TensorRT code to the API each version really has.

A binding module (``tensorrt_bindings/tensorrt.so``) needs a handful of C entry points from the
libraries it links (``createInferBuilder_INTERNAL``, ``getPluginRegistry``, ...; 8.6 also two
UFF and two Caffe parser symbols): ``nm -D --undefined-only`` lists them, and a stub library per
soname the module asks for (``readelf -d``: ``libnvinfer.so.10``, ...) built with ``gcc -shared``
defines each to return NULL. The import then works and offers the real classes, their methods
with pybind11's signatures, properties and enum members; every factory returns nullptr, so
``trt.Builder(logger)`` raises: what runs against these is introspection, subclassing the
trampoline classes (``ILogger``, ``IProgressMonitor``, ``IInt8EntropyCalibrator2``) and enums.

    python -m tests.trt_api prepare [DIR]     (make test runs it; the wheels cached in DIR)
    python -m tests.trt_api dump VERSION      (the API as JSON, in a subprocess of its own)

Nothing of this ships: tests only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

# the binding wheels: JetPack 5's 8.5 has the 8.x API of 8.6; JetPack 6, JetPack 7 (Thor), newest
WHEELS = {
    "8.6": "tensorrt-bindings==8.6.1",
    "10.3": "tensorrt-cu12-bindings==10.3.0",
    "10.13": "tensorrt-cu12-bindings==10.13.0.35",
    "11.4": "tensorrt-cu12-bindings==11.4.0.106",
}
VERSIONS = {"8.6": (8, 6, 1), "10.3": (10, 3, 0), "10.13": (10, 13, 0, 35), "11.4": (11, 4, 0, 106)}
DEFAULT_DIR = Path(
    os.environ.get("EDGERT_TRT_BINDINGS", Path.home() / ".cache/edgert-trt-bindings")
)


def folder(version: str, root: Path = DEFAULT_DIR) -> Path:
    """Where ``version``'s wheel for this Python lies (a wheel is built for one Python)."""
    return Path(root) / f"py{sys.version_info[0]}{sys.version_info[1]}" / version


def ready(version: str, root: Path = DEFAULT_DIR) -> bool:
    return (folder(version, root) / "ready").exists()


def prepare(root: Path = DEFAULT_DIR) -> dict:
    """Each version's wheel downloaded and unpacked under ``root``/VERSION with its stub
    libraries in ``stubs/``: {version: None, or why it could not be had (one line: a machine
    that cannot have it skips those tests, it does not fail ``make test``)}."""
    out = {}
    for version, spec in WHEELS.items():
        try:
            out[version] = _prepare(version, spec, root)
        except (OSError, subprocess.CalledProcessError, StopIteration, zipfile.BadZipFile) as exc:
            out[version] = f"{spec}: {type(exc).__name__}: {exc}".splitlines()[0]
    return out


def _prepare(version: str, spec: str, root: Path) -> str | None:
    where = folder(version, root)
    if ready(version, root):
        return None
    where.mkdir(parents=True, exist_ok=True)
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", spec, "-d", str(where)],
        capture_output=True,
        text=True,
    )
    wheels = sorted(where.glob("*.whl"))
    if got.returncode != 0 or not wheels:
        return f"{spec}: " + (got.stderr.strip().splitlines() or ["no wheel for this Python"])[-1]
    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(where)
    _stubs(where)
    (where / "ready").write_text(spec + "\n")
    return None


def _stubs(where: Path) -> None:
    """A stub library for every TensorRT library the binding links, each defining the entry
    points it needs (returning NULL)."""
    module = next(where.glob("tensorrt_bindings/tensorrt*.so"))
    undefined = subprocess.run(
        ["nm", "-D", "--undefined-only", str(module)], capture_output=True, text=True, check=True
    ).stdout
    symbols = sorted(
        {
            line.split()[-1]
            for line in undefined.splitlines()
            if "@" not in line
            and re.match(r"(create|get|init|shutdown|_ZN\d+nv)", line.split()[-1] if line else "")
        }
    )
    needed = subprocess.run(
        ["readelf", "-d", str(module)], capture_output=True, text=True, check=True
    ).stdout
    sonames = re.findall(r"\[(libnv[a-z_]+\.so\.\d+)\]", needed)
    stubs = where / "stubs"
    stubs.mkdir(exist_ok=True)
    source = "".join(f"void *{s}(void) {{ return 0; }}\n" for s in symbols)
    for soname in sonames:
        stub_library(stubs / soname, source)


def stub_library(path: Path, source: str) -> None:
    """``source`` (C) built with gcc into the shared library ``path``, its soname its file name
    (what the loader matches a module's NEEDED entry against); the source kept beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    c = path.with_name(path.name + ".c")
    c.write_text(source)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(path), str(c), f"-Wl,-soname,{path.name}"],
        check=True,
    )


def stub_env(stubs: Path, paths: list, **extra: str) -> dict:
    """This process's environment with ``stubs`` first on the loader's path and ``paths`` (and
    this checkout) first on Python's, plus ``extra`` variables."""
    e = dict(os.environ, **extra)
    e["LD_LIBRARY_PATH"] = os.pathsep.join([str(stubs), *filter(None, [e.get("LD_LIBRARY_PATH")])])
    here = Path(__file__).resolve().parent.parent
    e["PYTHONPATH"] = os.pathsep.join(
        [*map(str, paths), str(here), *filter(None, [e.get("PYTHONPATH")])]
    )
    return e


def env(version: str, root: Path = DEFAULT_DIR) -> dict:
    """The environment a subprocess imports ``version``'s bindings in (as ``tensorrt``, through
    :func:`activate`)."""
    where = folder(version, root)
    return stub_env(where / "stubs", [], EDGERT_TRT_API=str(where))


def activate():
    """In a subprocess started with :func:`env`: the real bindings importable as ``tensorrt``
    (what edgert imports), with the version the wheel says (the stub libraries report none)."""
    where = Path(os.environ["EDGERT_TRT_API"])
    sys.path.insert(0, str(where))
    import tensorrt_bindings

    sys.modules["tensorrt"] = tensorrt_bindings
    spec = (where / "ready").read_text().strip()
    tensorrt_bindings.__version__ = spec.split("==")[1]
    return tensorrt_bindings


def _members(obj) -> dict:
    """One class of the bindings: its attributes (dir), enum members, and each method's
    pybind11 signature lines (``name(self: ..., arg: type = ...) -> ...``)."""
    out: dict = {"attributes": sorted(a for a in dir(obj) if not a.startswith("__"))}
    members = getattr(obj, "__members__", None)
    if members is not None:
        out["members"] = sorted(members)
    sigs = {}
    for name in out["attributes"] + ["__init__"]:
        doc = getattr(getattr(obj, name, None), "__doc__", None) or ""
        lines = [ln.strip() for ln in doc.splitlines() if ln.strip().startswith(f"{name}(")]
        if lines:
            sigs[name] = lines
    out["signatures"] = sigs
    return out


def dump() -> dict:
    """The API of the bindings :func:`activate` made importable: every public name, and for each
    class its members (see :func:`_members`)."""
    trt = activate()
    api: dict = {"version": trt.__version__, "names": {}}
    for name in sorted(dir(trt)):
        if name.startswith("_"):
            continue
        value = getattr(trt, name)
        api["names"][name] = _members(value) if isinstance(value, type) else {"kind": "value"}
    return api


def api(version: str, root: Path = DEFAULT_DIR) -> dict:
    """``version``'s API, dumped in a subprocess of its own (one TensorRT per process)."""
    got = subprocess.run(
        [sys.executable, "-m", "tests.trt_api", "dump", version],
        capture_output=True,
        text=True,
        env=env(version, root),
        timeout=120,
    )
    if got.returncode != 0:
        raise RuntimeError(f"TensorRT {version}'s bindings would not import: {got.stderr[-800:]}")
    return json.loads(got.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("root", nargs="?", type=Path, default=DEFAULT_DIR)
    sub.add_parser("dump").add_argument("version")
    a = ap.parse_args()
    if a.what == "prepare":
        for version, why in prepare(a.root).items():
            if why:
                print(f"TensorRT {version}'s bindings cannot be had here ({why}): their tests skip")
        return
    json.dump(dump(), sys.stdout)


if __name__ == "__main__":
    main()
