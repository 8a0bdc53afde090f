"""edgert's TensorRT code against the API each TensorRT really has (issue 51): the binding wheels
of 8.6 (JetPack 5's 8.x API), 10.3 (JetPack 6), 10.13 (JetPack 7, Thor) and 11.4, imported
against stub libraries (tests/trt_api.py), each in its own process.

What this proves: every name edgert's build and load paths touch on ``trt`` (classes, enum
members, the compat layer's flag names), every method and property they use on TensorRT's
objects, and every call's keywords and argument count, exist in that version as its pybind11
signatures say, or are guarded where they do not (``hasattr``, a feature of
``tensorrt_compat``); and edgert's trampolines (the logger, the progress bar, the calibrator)
subclass the real classes. What only a GPU proves: that the calls do what we expect.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from edgert.runtime.backends import tensorrt_compat as compat
from edgert.runtime.precision import PRECISIONS
from tests import trt_api, trt_fake
from tests.conftest import ROOT

pytestmark = pytest.mark.subprocess
if not hasattr(ast, "unparse"):  # Python 3.8 (make test-oldest); the API is the same for any
    pytest.skip("the real-API checks run on Python 3.9+", allow_module_level=True)

MODULES = [
    ROOT / "runtime/backends" / f for f in ("tensorrt.py", "tensorrt_plan.py", "tensorrt_logger.py")
]
# the names edgert's TensorRT code gives TensorRT's objects -> their classes in the bindings
OBJECTS = {
    "builder": "Builder",
    "config": "IBuilderConfig",
    "network": "INetworkDefinition",
    "parser": "OnnxParser",
    "profile": "IOptimizationProfile",
    "tensor": "ITensor",
    "err": "ParserError",
    "engine": "ICudaEngine",
    "self.engine": "ICudaEngine",
    "self.context": "IExecutionContext",
    "context": "IExecutionContext",
    "self.runtime": "Runtime",
}
# names used only where a feature of tensorrt_compat says the version has them
GUARDED = {
    "IProgressMonitor": "progress_monitor",
    "IInt8EntropyCalibrator2": "implicit_int8_calibration",
    "BuilderFlag.INT8": "implicit_int8_calibration",  # DLA's calibration cache (Q/DQ: compat)
    "IBuilderConfig.int8_calibrator": "implicit_int8_calibration",
    "IBuilderConfig.progress_monitor": "progress_monitor",
}


@pytest.fixture(scope="module")
def apis():
    got = trt_api.prepare()
    missing = {v: why for v, why in got.items() if why}
    if len(missing) == len(trt_api.WHEELS):
        pytest.skip("no TensorRT binding wheel could be had: " + "; ".join(missing.values()))
    return {v: trt_api.api(v) for v in trt_api.WHEELS if not got[v]}


def _members(api: dict, cls: str) -> set:
    entry = api["names"].get(cls) or {}
    return set(entry.get("members", [])) | set(entry.get("attributes", []))


def _uses() -> list[tuple]:
    """(module:line, owner, attribute, call) for every ``trt.X[.Y]`` and ``obj.attr`` in edgert's
    TensorRT modules, with whether a ``hasattr(obj, "attr")`` in the same function guards it;
    ``call``: the ast.Call when the attribute is called."""
    out = []
    for path in MODULES:
        tree = ast.parse(path.read_text())
        parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            owner = ast.unparse(node.value)
            where = f"{path.name}:{node.lineno}"
            call = parents.get(node) if isinstance(parents.get(node), ast.Call) else None
            if call is not None and call.func is not node:
                call = None
            ours = owner in OBJECTS or owner == "trt"
            if ours or (owner.startswith("trt.") and owner.count(".") == 1):
                out.append((where, owner, node.attr, call, _guarded(node, parents)))
    return out


def _guarded(node, parents) -> bool:
    """Whether the function around ``node`` asks ``hasattr(<its owner>, "<its name>")``."""
    fn = node
    while fn in parents and not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        fn = parents[fn]
    owner = ast.unparse(node.value)
    for n in ast.walk(fn):
        if (
            isinstance(n, ast.Call)
            and ast.unparse(n.func) == "hasattr"
            and len(n.args) == 2
            and ast.unparse(n.args[0]) == owner
            and isinstance(n.args[1], ast.Constant)
            and n.args[1].value == node.attr
        ):
            return True
    return False


def _call_fits(call: ast.Call, signatures: list[str]) -> bool:
    keywords = {k.arg for k in call.keywords if k.arg}
    return any(trt_fake.takes(trt_fake._params(s), len(call.args), keywords) for s in signatures)


def _run(version: str, script: str, stdin: str | None = None, timeout: float = 120) -> str:
    """``script`` run by Python with ``version``'s real bindings importable; its stdout."""
    got = subprocess.run(
        [sys.executable, "-c", script],
        input=stdin,
        capture_output=True,
        text=True,
        env=trt_api.env(version),
        cwd=ROOT,
        timeout=timeout,
    )
    assert got.returncode == 0, (version, got.stderr[-2000:])
    return got.stdout


def _feature(version: tuple, name: str) -> bool:
    return getattr(compat.features(version), name)


def test_the_compat_layer_names_only_what_each_version_has(apis):
    for v, api in apis.items():
        version = trt_api.VERSIONS[v]
        f = compat.features(version)
        flags, ndcf = _members(api, "BuilderFlag"), _members(api, "NetworkDefinitionCreationFlag")
        for precision, qdq, typed in itertools.product(PRECISIONS, (True, False), (True, False)):
            assert set(compat.builder_flag_names(version, precision, qdq)) <= flags, (v, precision)
            assert set(compat.cleared_builder_flag_names(version, precision)) <= flags, v
            assert set(compat.network_flag_names(version, typed)) <= ndcf, (v, typed)
        assert f.weak_typing == ("FP16" in flags), v  # 11.4: no FP16 / INT8 / FP8 builder flags
        assert f.strongly_typed_flag == ("STRONGLY_TYPED" in ndcf) or not f.weak_typing, v
        assert f.progress_monitor == ("IProgressMonitor" in api["names"]), v
        assert f.implicit_int8_calibration == ("IInt8EntropyCalibrator2" in api["names"]), v
        assert f.device_memory_attr in _members(api, "ICudaEngine"), v
        real = set(api["names"]["DataType"]["members"])
        assert set(compat.data_types(version)) == real, (v, sorted(real))


def test_every_name_edgert_touches_exists_or_is_guarded(apis):
    uses = _uses()
    assert len(uses) > 60, len(uses)  # the scan sees the build and load paths
    wrong = []
    for v, api in apis.items():
        version = trt_api.VERSIONS[v]
        for where, owner, attr, call, guarded in uses:
            if owner == "trt":
                cls, have = attr, set(api["names"])
                key = attr
            elif owner.startswith("trt."):
                cls = owner.split(".")[1]
                have, key = _members(api, cls), f"{cls}.{attr}"
            else:
                cls = OBJECTS[owner]
                have, key = _members(api, cls), f"{cls}.{attr}"
            if attr.startswith("__"):
                continue
            feature = GUARDED.get(key)
            if feature is not None:
                # a guard that the version needs: present where the feature says so, else absent
                if _feature(version, feature) != (attr in have):
                    wrong.append(
                        f"{v} {where}: {key} present={attr in have}, {feature} says otherwise"
                    )
                continue
            if attr not in have:
                if not guarded:
                    wrong.append(f"{v} {where}: TensorRT {v} has no {key}")
                continue
            if call is not None:
                sigs = api["names"].get(cls, {}).get("signatures", {}).get(attr, [])
                if sigs and not _call_fits(call, sigs):
                    wrong.append(f"{v} {where}: {ast.unparse(call)} does not fit {sigs}")
    assert wrong == [], "\n".join(wrong)


def test_a_wrong_call_is_caught_with_the_version_and_the_real_signature(apis):
    """The checks above can fail: a removed member, a misspelt keyword."""
    v = max(apis, key=lambda k: trt_api.VERSIONS[k])
    api = apis[v]
    assert "INT8" not in _members(api, "BuilderFlag") or v != "11.4"
    call = ast.parse("config.set_timing_cache(cache, ignore_mismatches=False)").body[0].value
    sigs = api["names"]["IBuilderConfig"]["signatures"]["set_timing_cache"]
    assert not _call_fits(call, sigs) and "ignore_mismatch" in sigs[0]
    good = ast.parse("config.set_timing_cache(cache, ignore_mismatch=False)").body[0].value
    assert _call_fits(good, sigs)


TRAMPOLINES = r"""
import json, sys
from tests import trt_api, trt_fake
trt = trt_api.activate()
from edgert.runtime.backends import tensorrt_compat as compat
from edgert.runtime.backends import tensorrt_logger, tensorrt_plan
out = {}
logger = tensorrt_logger.process_logger()
out["logger_is_ilogger"] = isinstance(logger, trt.ILogger)
mark = logger.mark()
logger.log(trt.ILogger.Severity.ERROR, "a message from TensorRT")
out["logged"] = logger.since(mark)
f = compat.features(compat.parse_version(trt.__version__))
if f.progress_monitor:
    bar = tensorrt_plan._progress_monitor(trt)
    bar.phase_start("Building", None, 4)
    out["monitor"] = [isinstance(bar, trt.IProgressMonitor), bar.step_complete("Building", 1)]
if f.implicit_int8_calibration:
    cal = tensorrt_plan._calibrator(trt, b"TRT-8600-EntropyCalibration2\n")
    out["calibrator"] = [isinstance(cal, trt.IInt8EntropyCalibrator2),
                         cal.read_calibration_cache().decode(), cal.get_batch_size()]
try:
    trt.Builder(logger)
except Exception as exc:  # the stub libraries return no builder
    out["builder"] = type(exc).__name__
json.dump(out, sys.stdout)
"""


def test_edgerts_trampolines_subclass_the_real_classes(apis):
    for v in apis:
        stdout = _run(v, TRAMPOLINES)
        out = json.loads(stdout.strip().splitlines()[-1])
        assert out["logger_is_ilogger"], (v, out)
        assert any("a message from TensorRT" in m for m in out["logged"]), (v, out)
        major = trt_api.VERSIONS[v][0]
        assert ("monitor" in out) == (major >= 10), (v, out)
        if "monitor" in out:
            assert out["monitor"] == [True, True], (v, out)
        assert ("calibrator" in out) == (major < 11), (v, out)
        if "calibrator" in out:
            assert out["calibrator"][0] and "EntropyCalibration2" in out["calibrator"][1], out
        assert out.get("builder"), (v, out)  # nothing here pretends to build
        assert re.match(r"\d+\.\d+", v)


BUILD = r"""
import json, sys
from pathlib import Path
from tests import trt_api, trt_fake
trt = trt_api.activate()
import onnx
from edgert.runtime.backends.tensorrt_plan import BuildOptions, _build_plan
from edgert.runtime.errors import EdgertError

def run(s):
    model = onnx.load(s["onnx"])
    inputs = [(i.name, [d.dim_value if d.HasField("dim_value") else -1
                        for d in i.type.tensor_type.shape.dim]) for i in model.graph.input]
    calls, state = [], {"data": 0}
    A = {}
    def obj(cls, answers=A):
        return trt_fake.Stand(trt, cls, answers, calls)
    def tensor(i):
        name, shape = inputs[i]
        return obj("ITensor", {"ITensor.name": name, "ITensor.shape": shape})
    def created(data):
        state["data"] = len(data)
        return None if s.get("cache") == "corrupt" and data else obj("ITimingCache")
    error = obj("ParserError", {"ParserError.desc": lambda: "no importer for op Foo",
                                "ParserError.node": lambda: 3,
                                "ParserError.node_name": lambda: "Foo_3",
                                "ParserError.node_operator": lambda: "Foo"})
    A.update({
        "Builder.create_network": lambda flags: obj("INetworkDefinition"),
        "Builder.create_builder_config": lambda: obj("IBuilderConfig"),
        "Builder.create_optimization_profile": lambda: obj("IOptimizationProfile"),
        "Builder.build_serialized_network": lambda network, config: b"PLAN",
        "Builder.num_DLA_cores": 2,
        "OnnxParser.parse_from_file": lambda path: not s.get("broken"),
        "OnnxParser.num_errors": 1,
        "OnnxParser.get_error": lambda i: error,
        "INetworkDefinition.num_inputs": len(inputs),
        "INetworkDefinition.get_input": tensor,
        "IBuilderConfig.create_timing_cache": created,
        "IBuilderConfig.set_timing_cache": lambda c, ignore_mismatch: not (
            s.get("cache") == "foreign" and state["data"]),
        "IBuilderConfig.get_timing_cache": lambda: obj(
            "ITimingCache", {"ITimingCache.serialize": lambda: b"CACHE"}),
    })
    trt_fake.install(trt, A, calls)
    cache = Path(s["cache_path"]) if s.get("cache_path") else None
    options = BuildOptions(
        precision=s["precision"], opt_level=s.get("opt_level"), dla_core=s.get("dla"),
        shapes={k: tuple(map(tuple, v)) for k, v in s.get("shapes", {}).items()},
        timing_cache=cache, workspace_bytes=s.get("workspace"),
        calibration_cache=s["calibration"].encode() if s.get("calibration") else None)
    out = {"calls": calls}
    try:
        out["plan"] = _build_plan(Path(s["onnx"]), options).decode()
    except (EdgertError, trt_fake.Mismatch, AttributeError, TypeError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["cache_written"] = cache.read_bytes().decode() if cache and cache.exists() else None
    return out

json.dump([run(s) for s in json.loads(sys.stdin.read())], sys.stdout)
"""


def _onnx(path: Path, dynamic: bool) -> Path:
    import onnx
    from onnx import TensorProto, helper

    dims = ["N", 3, 8, 8] if dynamic else [1, 3, 8, 8]
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _calls(run: dict, key: str) -> list:
    return [c for c in run["calls"] if c[0] == key]


def test_the_build_path_runs_on_each_versions_real_api(apis, tmp_path):
    """``_build_plan`` itself, on stand-ins derived from each version's real classes: every
    precision, DLA, a fresh, foreign and corrupt timing cache, an optimisation level, dynamic
    shapes with and without a profile, a model the parser refuses; the flags it sets are the
    compat layer's, every call fits the real signatures."""
    static, dynamic = _onnx(tmp_path / "s.onnx", False), _onnx(tmp_path / "d.onnx", True)
    scenarios = [{"precision": p, "onnx": str(static)} for p in PRECISIONS]
    scenarios += [
        {"precision": "int8", "onnx": str(static), "dla": 0, "calibration": "TRT-8600-Entropy\n"},
        {"precision": "fp16", "onnx": str(static), "cache": "foreign", "opt_level": 3},
        {"precision": "fp16", "onnx": str(static), "cache": "corrupt", "workspace": 1 << 30},
        {
            "precision": "fp16",
            "onnx": str(dynamic),
            "shapes": {"x": [[1, 3, 8, 8]] * 2 + [[4, 3, 8, 8]]},
        },
        {"precision": "fp16", "onnx": str(dynamic)},
        {"precision": "fp16", "onnx": str(static), "broken": True},
    ]
    for v in apis:
        version = trt_api.VERSIONS[v]
        for i, s in enumerate(scenarios):
            path = tmp_path / f"{v}-{i}.cache"
            if s.get("cache"):
                path.write_bytes(b"a cache from elsewhere")
            s["cache_path"] = str(path)
        stdout = _run(v, BUILD, json.dumps(scenarios), timeout=300)
        runs = json.loads(stdout)
        f = compat.features(version)
        for i, s in enumerate(scenarios[: len(PRECISIONS)]):
            r = runs[i]
            p = s["precision"]
            assert "error" not in r, (v, p, r.get("error"))
            assert r["plan"] == "PLAN" and r["cache_written"] == "CACHE", (v, p)
            flags = [c[1][0] for c in _calls(r, "IBuilderConfig.set_flag")]
            want = compat.builder_flag_names(version, p, qdq_model=p == "int8")
            assert flags == [f"BuilderFlag.{n}" for n in want], (v, p, flags)
            cleared = [c[1][0] for c in _calls(r, "IBuilderConfig.clear_flag")]
            assert cleared == [
                f"BuilderFlag.{n}" for n in compat.cleared_builder_flag_names(version, p)
            ]
            (net,) = _calls(r, "Builder.create_network")
            names = compat.network_flag_names(version, strongly_typed=not f.weak_typing)
            assert (net[1][0] != 0) == bool(names), (v, net, names)
            assert bool(_calls(r, "IBuilderConfig.progress_monitor")) == f.progress_monitor, v
        dla, foreign, corrupt, profiled, unprofiled, broken = runs[len(PRECISIONS) :]
        if f.implicit_int8_calibration:
            assert "error" not in dla, (v, dla.get("error"))
            sets = {c[0]: c[2] for c in dla["calls"] if c[1] == "set"}
            assert sets["IBuilderConfig.default_device_type"] == "DeviceType.DLA", sets
            assert sets["IBuilderConfig.DLA_core"] == 0 and "IBuilderConfig.int8_calibrator" in sets
            flags = [c[1][0] for c in _calls(dla, "IBuilderConfig.set_flag")]
            assert "BuilderFlag.INT8" in flags and "BuilderFlag.GPU_FALLBACK" in flags, flags
        else:
            assert "no implicit INT8 calibration" in dla["error"], (v, dla)
        for r in (foreign, corrupt):  # refused or unreadable: a fresh cache, the build goes on
            assert "error" not in r and r["plan"] == "PLAN", (v, r.get("error"))
            assert len(_calls(r, "IBuilderConfig.create_timing_cache")) == 2, v
        levels = [
            c for c in foreign["calls"] if c[0] == "IBuilderConfig.builder_optimization_level"
        ]
        assert ["IBuilderConfig.builder_optimization_level", "set", 3] in levels, (v, levels)
        pool = ["IBuilderConfig.set_memory_pool_limit", ["MemoryPoolType.WORKSPACE", 1 << 30], {}]
        assert pool in corrupt["calls"], v
        assert _calls(profiled, "IOptimizationProfile.set_shape") == [
            ["IOptimizationProfile.set_shape", ["x", [1, 3, 8, 8], [1, 3, 8, 8], [4, 3, 8, 8]], {}]
        ], v
        assert "error" not in profiled and "--shapes" in unprofiled["error"], (v, unprofiled)
        assert (
            "cannot parse the model" in broken["error"]
            and "no importer for op Foo" in broken["error"]
        )
        has_name = "node_name" in apis[v]["names"]["ParserError"]["attributes"]
        assert ("node Foo_3 (Foo)" in broken["error"]) == has_name, (v, broken["error"])


def test_a_stand_in_refuses_what_the_real_class_would(apis):
    """The stand-ins can fail: a name the real class lacks, a property it cannot set, a keyword
    it does not take, an int where it wants one of its enums."""
    for v in apis:
        script = r"""
from tests import trt_api, trt_fake
trt = trt_api.activate()
calls = []
config = trt_fake.Stand(trt, "IBuilderConfig", {}, calls)
said = []
for attempt in (
    lambda: config.no_such_method(),
    lambda: setattr(config, "no_such_property", 1),
    lambda: config.set_flag(3),
    lambda: config.set_memory_pool_limit(pool=trt.MemoryPoolType.WORKSPACE, size=1),
    lambda: config.set_flag(trt.BuilderFlag.TF32, True),
):
    try:
        attempt()
        said.append("taken")
    except (AttributeError, trt_fake.Mismatch) as exc:
        said.append(str(exc))
config.set_flag(trt.BuilderFlag.TF32)
print(repr(said))
"""
        stdout = _run(v, script)
        said = ast.literal_eval(stdout.strip().splitlines()[-1])
        assert all(s != "taken" for s in said), (v, said)
        assert f"TensorRT {trt_api.WHEELS[v].split('==')[1]}" in said[0], said
        assert "fits no signature" in said[2] and "set_flag" in said[2], said


LOAD = r"""
import json
import numpy as np
from tests import trt_api, trt_fake
trt = trt_api.activate()
from edgert.runtime.backends.tensorrt import TensorRTBackend
from edgert.runtime.errors import ShapeError

calls = []
names = ["images", "scores"]
shapes = {"images": (-1, 3, 8, 8), "scores": (-1, 10)}
now = {"batch": 4}
modes = {"images": trt.TensorIOMode.INPUT, "scores": trt.TensorIOMode.OUTPUT}
engine = trt_fake.Stand(trt, "ICudaEngine", {
    "ICudaEngine.num_io_tensors": 2,
    "ICudaEngine.get_tensor_name": lambda i: names[i],
    "ICudaEngine.get_tensor_mode": lambda n: modes[n],
    "ICudaEngine.get_tensor_dtype": lambda n: trt.DataType.FLOAT,
    "ICudaEngine.get_tensor_shape": lambda n: shapes[n],
    "ICudaEngine.get_tensor_profile_shape": lambda n, p: [(1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8)],
    "ICudaEngine.is_shape_inference_io": lambda n: False,
}, calls)

def set_shape(name, shape):
    now["batch"] = shape[0]
    return True

context = trt_fake.Stand(trt, "IExecutionContext", {
    "IExecutionContext.set_input_shape": set_shape,
    "IExecutionContext.get_tensor_shape": lambda n: (now["batch"], 10),
    "IExecutionContext.infer_shapes": lambda: [],
}, calls)
backend = TensorRTBackend.__new__(TensorRTBackend)
backend.trt, backend.cuda_engine, backend.context = trt, engine, context
io = backend._describe_io()
backend.io, backend._current_shapes = io, {}
changed = backend._apply_shapes({"images": np.zeros((2, 3, 8, 8), np.float32)})
try:
    backend._apply_shapes({"images": np.zeros((5, 3, 8, 8), np.float32)})
    outside = None
except ShapeError as exc:
    outside = str(exc)
print(json.dumps({
    "io": [[t.name, t.is_input, t.dtype, list(t.shape), t.min_shape and list(t.min_shape),
            list(t.max_shape)] for t in io],
    "changed": changed, "outside": outside, "calls": calls,
}))
"""


def test_the_load_paths_io_description_runs_on_each_versions_real_api(apis):
    """``TensorRTBackend._describe_io`` and ``_apply_shapes`` on stand-ins of the real
    ``ICudaEngine`` and ``IExecutionContext`` (the CUDA parts are not touched): the real enums'
    names (``TensorIOMode``, ``DataType`` as ``str()`` gives them) read as edgert expects, the
    profile is taken, output capacity sized at the profile's maximum, a shape outside refused."""
    for v in apis:
        stdout = _run(v, LOAD)
        out = json.loads(stdout.strip().splitlines()[-1])
        assert out["io"] == [
            ["images", True, "float32", [-1, 3, 8, 8], [1, 3, 8, 8], [4, 3, 8, 8]],
            ["scores", False, "float32", [-1, 10], None, [4, 10]],
        ], (v, out["io"])
        assert out["changed"] is True, v
        assert "outside the engine's profile 1x3x8x8 .. 4x3x8x8" in out["outside"], (v, out)
        used = {c[0] for c in out["calls"]}
        assert {"ICudaEngine.get_tensor_profile_shape", "IExecutionContext.infer_shapes"} <= used
