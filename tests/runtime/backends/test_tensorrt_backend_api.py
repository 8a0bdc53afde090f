"""``TensorRTBackend``'s whole life on each TensorRT version's real API (issue 51): loaded from a
plan, run, shared by threads, closed, and refused with one sentence, on stand-ins of the real
``Runtime``, ``ICudaEngine`` and ``IExecutionContext`` (tests/trt_fake.py: exactly the real
attributes, every call held to the real pybind11 signature) and a thin fake of edgert's own CUDA
surface (tests/cuda_fake.py: streams that queue their work until synchronised, graphs that replay
what they captured, memory that needs the context current).

The fake TensorRT "runs" the model by reading the input at the address edgert gave
``set_tensor_address`` and writing ``2x + 1`` of its first ten values at the output's: a result
is right only when edgert set the addresses, shapes, copies, launch and synchronisation right.
What only a GPU proves: that the real TensorRT and CUDA do what these stand-ins do.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import trt_api
from tests.conftest import ROOT

pytestmark = pytest.mark.subprocess


LIFE = r"""
import json, sys, threading
from pathlib import Path
import numpy as np
from tests import cuda_fake, trt_api, trt_fake
trt = trt_api.activate()
from edgert.runtime.backends import plan_key
from edgert.runtime.backends.tensorrt import TensorRTBackend
from edgert.runtime.backends.tensorrt_logger import process_logger
from edgert.runtime.errors import EdgertError

logger = process_logger()
SEVERITY = {"error": trt.ILogger.Severity.ERROR, "warning": trt.ILogger.Severity.WARNING}


def expected(x):
    return x.reshape(len(x), -1)[:, :10] * 2 + 1


def run(s, folder):
    device = cuda_fake.Device(name="Orin", cc=(8, 7), integrated=s.get("zero_copy", False))
    cuda_fake.install(device)
    cuda_fake.CudaGraph.fail_capture = s.get("capture_fails")
    calls, state = [], {"shape": {}, "addr": {}}
    local = threading.local()  # the shapes one execution context holds (one per backend here)

    def obj(cls, answers):
        return trt_fake.Stand(trt, cls, answers, calls)

    def set_shape(name, shape):
        state["shape"][name] = tuple(shape)
        return True

    def out_shape(name):
        b = state["shape"]["images"][0]
        return (b, 10) if name == "scores" else (b, 3, 8, 8)

    def set_address(name, address):
        state["addr"][name] = address
        return not s.get("address_refused")

    def launch(handle):
        if s.get("execute_fails"):
            logger.log(SEVERITY["error"], s["execute_fails"])
            return False
        shape = state["shape"]["images"]
        addr = dict(state["addr"])

        def work():
            x = device.view(addr["images"], shape, np.float32)
            device.view(addr["scores"], (shape[0], 10), np.float32)[...] = expected(x)

        device.streams[handle].queue(work)
        return True

    context = obj("IExecutionContext", {
        "IExecutionContext.set_input_shape": set_shape,
        "IExecutionContext.get_tensor_shape": out_shape,
        "IExecutionContext.infer_shapes": lambda: [],
        "IExecutionContext.set_tensor_address": set_address,
        "IExecutionContext.execute_async_v3": launch,
    })
    names = ["images", "scores"]
    modes = {"images": trt.TensorIOMode.INPUT, "scores": trt.TensorIOMode.OUTPUT}
    engine = obj("ICudaEngine", {
        "ICudaEngine.num_io_tensors": 2,
        "ICudaEngine.get_tensor_name": lambda i: names[i],
        "ICudaEngine.get_tensor_mode": lambda n: modes[n],
        "ICudaEngine.get_tensor_dtype": lambda n: trt.DataType.FLOAT,
        "ICudaEngine.get_tensor_shape": lambda n: (-1, 3, 8, 8) if n == "images" else (-1, 10),
        "ICudaEngine.get_tensor_profile_shape":
            lambda n, p: [(1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8)],
        "ICudaEngine.is_shape_inference_io": lambda n: False,
        "ICudaEngine.create_execution_context": lambda: None if s.get("no_context") else context,
    })

    def deserialize(data):
        for severity, message in s.get("log", []):
            logger.log(SEVERITY[severity], message)
        return None if s.get("refuse") else engine

    trt_fake.install(trt, {"Runtime.deserialize_cuda_engine": deserialize}, calls)
    plan = Path(folder) / "model.engine"
    header = b""
    if s.get("ultralytics"):  # Ultralytics' .engine: int32 length, JSON metadata, the plan
        meta = json.dumps({"task": "detect", "names": {"0": "person"}, "imgsz": [8, 8]}).encode()
        header = len(meta).to_bytes(4, "little", signed=True) + meta
    plan.write_bytes(header + b"PLAN")
    key = plan_key.PlanKey("fp16", s.get("built_by", trt.__version__), "Orin", "8.7",
                         dla_core=s.get("dla"))
    plan.with_suffix(".json").write_text(json.dumps(key.sidecar(4)))
    out = {"calls": calls}
    try:
        backend = TensorRTBackend(plan, 0, use_graph=s.get("graph", False), spin=False)
    except EdgertError as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["left"] = [len(device.memory), len(device.streams)]
        return out
    out["description"] = backend.description
    out["metadata"] = backend.plan_metadata
    out["inputs"] = [[t.name, t.dtype, list(t.shape)] for t in backend.inputs]

    def infer(batch, seed):
        x = np.random.default_rng(seed).standard_normal((batch, 3, 8, 8)).astype(np.float32)
        try:
            got = backend.run({"images": x})["scores"]
        except EdgertError as exc:
            return f"{type(exc).__name__}: {exc}"
        return "right" if np.array_equal(got, expected(x)) else "wrong"

    out["runs"] = [infer(b, seed) for seed, b in enumerate(s.get("batches", []))]
    if s.get("threads"):
        said = []

        def worker(k):
            cuda_fake.DEVICE = device
            said.extend(infer(1 + (k + i) % 4, 100 * k + i) for i in range(s["threads"][1]))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(s["threads"][0])]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out["threaded"] = sorted(set(said))
    out["graph"] = backend.graph_status
    backend.close()
    out["left"] = [len(device.memory), len(device.streams), device.graphs_live]
    return out


scenarios, folder = json.loads(sys.stdin.read())
json.dump([run(s, folder) for s in scenarios], sys.stdout)
"""


def _life(version: str, scenarios: list, folder: Path) -> list:
    got = subprocess.run(
        [sys.executable, "-c", LIFE],
        input=json.dumps([scenarios, str(folder)]),
        capture_output=True,
        text=True,
        env=trt_api.env(version),
        cwd=ROOT,
        timeout=300,
    )
    assert got.returncode == 0, (version, got.stderr[-3000:])
    return json.loads(got.stdout)


@pytest.fixture(scope="module")
def versions():
    got = trt_api.prepare()
    have = [v for v, why in got.items() if not why]
    if not have:
        pytest.skip("no TensorRT binding wheel could be had: " + "; ".join(got.values()))
    return have


def _keys(run: dict) -> list[str]:
    return [c[0] for c in run["calls"]]


def test_a_plan_loads_runs_and_closes_on_each_versions_real_api(versions, tmp_path):
    """Copies (a discrete GPU) and zero-copy (Jetson), changing batch sizes inside the profile,
    one outside it; the results are the model's; everything allocated is freed on close."""
    scenarios = [
        {"batches": [2, 2, 4, 1, 5]},
        {"batches": [1, 4, 3], "zero_copy": True},
        {"batches": [1], "ultralytics": True},
    ]
    for v in versions:
        copies, zero, ultralytics = _life(v, scenarios, tmp_path)
        for r in (copies, zero, ultralytics):
            assert "error" not in r, (v, r.get("error"))
            assert r["inputs"] == [["images", "float32", [-1, 3, 8, 8]]], v
            assert r["left"] == [0, 0, 0], (v, r["left"])  # buffers, streams, graphs
        assert copies["runs"][:4] == ["right"] * 4, (v, copies["runs"])
        assert "outside the engine's profile 1x3x8x8 .. 4x3x8x8" in copies["runs"][4], v
        assert zero["runs"] == ["right"] * 3, (v, zero["runs"])
        assert "pinned copies" in copies["description"] and "zero-copy" in zero["description"]
        # the plan behind Ultralytics' metadata header is what TensorRT is given, as Ultralytics does
        assert ultralytics["runs"] == ["right"] and ultralytics["metadata"]["task"] == "detect"
        given = [c for c in ultralytics["calls"] if c[0] == "Runtime.deserialize_cuda_engine"]
        assert given[0][1] == ["<4 bytes>"], (v, given)
        assert "metadata header skipped" in ultralytics["description"]
        assert copies["metadata"] is None, v
        keys = _keys(copies)
        assert keys.index("Runtime.deserialize_cuda_engine") < keys.index(
            "ICudaEngine.create_execution_context"
        )
        # every address given before the first launch, shapes set only when they change
        first = keys.index("IExecutionContext.execute_async_v3")
        assert keys[:first].count("IExecutionContext.set_tensor_address") == 2, v
        shapes = [c[1] for c in copies["calls"] if c[0] == "IExecutionContext.set_input_shape"]
        assert [s[1][0] for s in shapes] == [4, 2, 4, 1], (v, shapes)  # capacity, then changes


def test_a_cuda_graph_replays_fresh_inputs_and_is_captured_again_on_a_new_shape(versions, tmp_path):
    """The graph replays the copies from the pinned buffers: each run's new data must reach
    them (a stale input would give the previous run's answer), and a new shape recaptures."""
    scenarios = [
        {"graph": True, "batches": [2, 2, 2, 3, 3]},
        {"graph": True, "batches": [2, 2], "zero_copy": True},
        {"graph": True, "batches": [2, 2], "capture_fails": "operation not permitted"},
    ]
    for v in versions:
        graph, zero, failed = _life(v, scenarios, tmp_path)
        assert graph["runs"] == ["right"] * 5 and graph["graph"] == "captured", (v, graph)
        launches = _keys(graph).count("IExecutionContext.execute_async_v3")
        assert launches == 4, (v, launches)  # a plain run and a capture per shape, none replayed
        assert zero["runs"] == ["right"] * 2, (v, zero["runs"])
        assert failed["runs"] == ["right"] * 2, (v, failed["runs"])
        assert failed["graph"] == "failed: operation not permitted", (v, failed["graph"])
        for r in (graph, zero, failed):
            assert r["left"] == [0, 0, 0], (v, r["left"])


def test_one_backend_shared_by_threads_gives_each_caller_its_own_answer(versions, tmp_path):
    """Four threads, batch sizes 1 to 4 interleaved: shapes, copies and the launch of one call
    never mix with another's (each thread pushes the context itself)."""
    for v in versions:
        (r,) = _life(v, [{"threads": [4, 6]}], tmp_path)
        assert r["threaded"] == ["right"], (v, r["threaded"])
        assert r["left"] == [0, 0, 0], v


def test_a_dla_plan_sets_the_runtimes_core_before_deserialising(versions, tmp_path):
    for v in versions:
        (r,) = _life(v, [{"dla": 1, "batches": [1]}], tmp_path)
        assert r["runs"] == ["right"], (v, r)
        keys = _keys(r)
        core = [c for c in r["calls"] if c[0] == "Runtime.DLA_core"]
        assert core == [["Runtime.DLA_core", "set", 1]], (v, core)
        assert keys.index("Runtime.DLA_core") < keys.index("Runtime.deserialize_cuda_engine")


# What TensorRT logs when deserialize_cuda_engine returns None, verbatim as users reported it
# (the GitHub thread and the TensorRT version beside each; the logger's own "[TRT] [E]" prefix
# dropped), and what edgert must make of it: the error class and a fragment of its sentence.
REFUSALS = [
    (  # RootKit-Org/AI-Aimbot#109, 8.5.1.7 given an 8.5.3.1 plan
        [
            "6: The engine plan file is not compatible with this version of TensorRT, expecting "
            "library version 8.5.1.7 got 8.5.3.1, please rebuild.",
            "4: [runtime.cpp::nvinfer1::Runtime::deserializeCudaEngine::66] Error Code 4: "
            "Internal Error (Engine deserialization failed.)",
        ],
        "EngineMismatch",
        "built by TensorRT 8.5.3.1, this is 8.5.1.7",
    ),
    (  # HKUST-Aerial-Robotics/D2SLAM#52, 8.4 given an 8.6 plan
        [
            "1: [stdArchiveReader.cpp::StdArchiveReader::40] Error Code 1: Serialization "
            "(Serialization assertion stdVersionRead == serializationVersion failed.Version tag "
            "does not match. Note: Current Version: 213, Serialized Engine Version: 232)"
        ],
        "EngineMismatch",
        "its serialization version 232, this TensorRT reads 213",
    ),
    (  # ack00gar/FunGen-AI-Powered-Funscript-Generator#36, 10.11
        [
            "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization "
            "assertion stdVersionRead == kSERIALIZATION_VERSION failed.Version tag does not "
            "match. Note: Current Version: 240, Serialized Engine Version: 239)"
        ],
        "EngineMismatch",
        "its serialization version 239, this TensorRT reads 240",
    ),
    (  # westNeighbor/ComfyUI-ultimate-openpose-estimator#9, 10.12: "got" names no version
        [
            "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine plan "
            "file is not compatible with this version of TensorRT, expecting library version "
            "10.12.0.36 got .)"
        ],
        "EngineMismatch",
        "was built by another TensorRT version; rebuild",
    ),
    (  # NVIDIA/TensorRT#2195, 8.4 given a safety-runtime plan
        [
            "1: [stdArchiveReader.cpp::StdArchiveReader::35] Error Code 1: Serialization "
            "(Serialization assertion safeVersionRead == safeSerializationVersion failed.Version "
            "tag does not match. Note: Current Version: 0, Serialized Engine Version: 96)"
        ],
        "EngineMismatch",
        "safety runtime",
    ),
    (  # NVIDIA/trt-samples-for-hackathon-cn cookbook/08-Advance/Safety, late 10.x
        [
            "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization "
            "assertion header.magicTag == kEXPECTED_MAGIC_TAG failed.Trying to load an engine "
            "created with incompatible serialization version (1297697870 != 1953657958). Check "
            "that the engine was not created using safety runtime, same OS was used and version "
            "compatibility parameters were set accordingly and that it is a TRT engine file. In "
            "throwUnlessHeaderOk at /_src/runtime/dispatch/runtime.cpp:42)"
        ],
        "EngineMismatch",
        "or no plan at all",
    ),
    (  # NVIDIA/TensorRT#2177, 8.x on another GPU
        [
            "6: The engine plan file is generated on an incompatible device, expecting compute "
            "6.1 got compute 8.6, please rebuild.",
            "4: [runtime.cpp::deserializeCudaEngine::76] Error Code 4: Internal Error (Engine "
            "deserialization failed.)",
        ],
        "EngineMismatch",
        "built for compute 8.6, this GPU is compute 6.1",
    ),
    (  # deepinsight/insightface#2882, 10.8 on another GPU
        [
            "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine plan "
            "file is generated on an incompatible device, expecting compute 8.9 got compute 8.6, "
            "please rebuild.)"
        ],
        "EngineMismatch",
        "built for compute 8.6, this GPU is compute 8.9",
    ),
    (  # pytorch/TensorRT#3090, 10.x, a plan from another OS
        [
            "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization "
            "assertion plan->header.pad == expectedPlatformTag failed.Platform specific tag "
            "mismatch detected. TensorRT plan files are only supported on the target runtime "
            "platform they were created on.)"
        ],
        "EngineMismatch",
        "built on another platform",
    ),
    (  # triple-mu/YOLOv8-TensorRT#308, 10.x's lean runtime
        [
            "IRuntime::deserializeCudaEngine: Error Code 1: Internal Error (Unexpected call to "
            "stub loadRunner for ReformatRunner.)"
        ],
        "EngineMismatch",
        "lean runtime",
    ),
    (  # Xiao-Hu-Z/pointpillars_int8#2, 8.5/8.6, not a plan
        [
            "1: [stdArchiveReader.cpp::StdArchiveReader::30] Error Code 1: Serialization "
            "(Serialization assertion magicTagRead == kMAGIC_TAG failed.Magic tag does not match)"
        ],
        "ModelError",
        "corrupt or not a plan): 1: [stdArchiveReader",
    ),
    (  # NVIDIA/TensorRT#3155, 8.6.1, not a plan
        [
            "1: [runtime.cpp::parsePlan::314] Error Code 1: Serialization (Serialization "
            "assertion plan->header.magicTag == rt::kPLAN_MAGIC_TAG failed.)"
        ],
        "ModelError",
        "corrupt or not a plan",
    ),
    (  # 8.x, a plan cut short (quoted in users' notes; no thread recorded)
        [
            "1: [stdArchiveReader.cpp::StdArchiveReader::57] Error Code 1: Serialization "
            "(Serialization assertion sizeRead == static_cast<uint64_t>(mEnd - mCurrent) "
            "failed.Size specified in header does not match archive size)",
            "4: [runtime.cpp::deserializeCudaEngine::65] Error Code 4: Internal Error (Engine "
            "deserialization failed.)",
        ],
        "ModelError",
        "truncated or damaged",
    ),
    (  # open-mmlab/mmdetection#11511, 8.6, a plan with a plugin not registered
        [
            "3: getPluginCreator could not find plugin: TRTBatchedNMS version: 1",
            "1: [pluginV2Runner.cpp::nvinfer1::rt::load::303] Error Code 1: Serialization "
            "(Serialization assertion creator failed.Cannot deserialize plugin since "
            "corresponding IPluginCreator not found in Plugin Registry)",
        ],
        "ModelError",
        "uses the TensorRT plugin TRTBatchedNMS (version 1)",
    ),
    (  # laugh12321/TensorRT-YOLO#118, 10.x, the same
        [
            "IPluginRegistry::getPluginCreator: Error Code 4: API Usage Error (Cannot find "
            "plugin: EfficientIdxNMS_TRT, version: 1, namespace:.)",
            "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization "
            "assertion creator failed.Cannot deserialize plugin since corresponding "
            "IPluginCreator not found in Plugin Registry)",
        ],
        "ModelError",
        "uses the TensorRT plugin EfficientIdxNMS_TRT (version 1)",
    ),
    (  # VoltaML/voltaML-fast-stable-diffusion#27, 8.6, no GPU memory left
        ["1: [defaultAllocator.cpp::allocate::20] Error Code 1: Cuda Runtime (out of memory)"],
        "CudaError",
        "the GPU has no room to load",
    ),
]


def test_a_refused_plan_is_one_sentence_and_leaves_nothing_allocated(versions, tmp_path):
    """deserialize_cuda_engine returning None after TensorRT logged what it logs; a warning
    that the plan comes from another model of the device; no execution context; an address
    refused; a failed launch: each one sentence of the right kind, nothing left allocated."""
    scenarios = [{"refuse": True, "log": [("error", m) for m in ms]} for ms, _, _ in REFUSALS]
    scenarios += [
        {
            "log": [
                (
                    "warning",
                    "Using an engine plan file across different models of devices is not "
                    "recommended and is likely to affect performance or even cause errors.",
                )
            ]
        },
        {"no_context": True},
        {"address_refused": True},
        {"execute_fails": "1: [runner.cpp::execute::1052] Error Code 1: Cask", "batches": [1]},
        {"built_by": "7.1.3", "batches": [1]},
    ]
    for v in versions:
        runs = _life(v, scenarios, tmp_path)
        for (messages, kind, fragment), r in zip(REFUSALS, runs[: len(REFUSALS)], strict=True):
            assert r["error"].startswith(kind + ":"), (v, messages, r["error"])
            assert fragment in r["error"] and "\n" not in r["error"], (v, r["error"])
            assert r["left"] == [0, 0], (v, r["left"])
        foreign, no_context, refused, failed, older = runs[len(REFUSALS) :]
        assert foreign["error"].startswith("EngineMismatch:"), (v, foreign)
        assert "another model of Orin" in foreign["error"], foreign["error"]
        assert (
            no_context["error"].startswith("ModelError:")
            and "execution context" in (no_context["error"])
        )
        assert "refused the buffer address for images" in refused["error"], refused
        assert refused["left"] == [0, 0], (v, refused["left"])  # freed on the way out
        assert failed["runs"][0].startswith("ModelError: TensorRT execute_async_v3 failed"), v
        assert "Error Code 1: Cask" in failed["runs"][0], failed["runs"]
        assert (
            older["error"].startswith("EngineMismatch:") and "TensorRT 7.1.3" in (older["error"])
        ), (v, older)
        assert "Runtime.deserialize_cuda_engine" not in _keys(older), v  # not even tried
