"""TensorRT version decisions and plan selection: pure functions, no TensorRT needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgert.runtime.backends import plan_key
from edgert.runtime.backends import tensorrt_compat as compat
from edgert.runtime.errors import ModelError


def test_parse_version():
    assert compat.parse_version("8.5.2.2") == (8, 5, 2, 2)
    assert compat.parse_version("10.3.0.26+cuda12.6") == (10, 3, 0, 26)
    with pytest.raises(ValueError):
        compat.parse_version("unknown")


@pytest.mark.parametrize(
    ("version", "net_flags", "fp16", "int8"),
    [
        ((8, 5, 2), ["EXPLICIT_BATCH"], ["FP16"], ["FP16", "INT8"]),
        ((8, 6, 1), ["EXPLICIT_BATCH"], ["FP16"], ["FP16", "INT8"]),
        ((10, 3, 0), [], ["FP16"], ["FP16", "INT8"]),
        ((11, 1, 0), [], [], []),
    ],
)
def test_network_and_builder_flags(version, net_flags, fp16, int8):
    assert compat.network_flag_names(version, strongly_typed=False) == net_flags
    assert compat.builder_flag_names(version, "fp32", qdq_model=False) == []
    assert compat.builder_flag_names(version, "fp16", qdq_model=False) == fp16
    assert compat.builder_flag_names(version, "int8", qdq_model=True) == int8


def test_version_features():
    assert compat.network_flag_names((10, 3), strongly_typed=True) == ["STRONGLY_TYPED"]
    assert compat.network_flag_names((11, 0), strongly_typed=True) == []  # the only mode in 11
    assert compat.onnx_for_precision((10, 3), "fp16") == "model.onnx"
    assert compat.onnx_for_precision((11, 0), "fp16") == "model.fp16.onnx"
    assert compat.onnx_for_precision((8, 5), "int8") == "model.int8.onnx"
    # TensorRT 11 builds INT8 from the variant with FP16 outside INT8 where the bundle has one
    both = ["model.onnx", "model.int8.onnx", "model.int8.fp16.onnx"]
    assert compat.onnx_for_precision((11, 0), "int8", available=both) == "model.int8.fp16.onnx"
    assert compat.onnx_for_precision((11, 0), "int8", available=both[:2]) == "model.int8.onnx"
    assert compat.onnx_for_precision((10, 3), "int8", available=both) == "model.int8.onnx"
    assert compat.onnx_for_precision((11, 0), "fp8", available=both) == "model.fp8.onnx"
    # and FP8 from its FP16-outside variant likewise (Thor: TensorRT 11)
    fp8 = ["model.onnx", "model.fp8.onnx", "model.fp8.fp16.onnx"]
    assert compat.onnx_for_precision((11, 0), "fp8", available=fp8) == "model.fp8.fp16.onnx"
    assert compat.onnx_for_precision((11, 0), "fp8", available=fp8[:2]) == "model.fp8.onnx"
    assert compat.onnx_for_precision((10, 3), "fp8", available=fp8) == "model.fp8.onnx"
    assert compat.onnx_for_precision((11, 0), "int8", available=fp8) == "model.int8.onnx"
    f85, f10, f11 = compat.features((8, 5, 2)), compat.features((10, 3)), compat.features((11, 0))
    assert (f85.progress_monitor, f10.progress_monitor) == (False, True)
    assert (f85.device_memory_attr, f10.device_memory_attr) == (
        "device_memory_size",
        "device_memory_size_v2",
    )
    assert f85.implicit_int8_calibration and not f11.implicit_int8_calibration
    assert f85.max_onnx_opset == 17
    assert compat.unsupported_reason((8, 4, 3)) and compat.unsupported_reason((8, 5, 1)) is None
    with pytest.raises(ValueError):
        compat.builder_flag_names((10, 0), "int4", qdq_model=True)


def write_plan(
    folder: Path, key: str, precision: str, trt: str, name: str, cc: str, onnx: str | None = None
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    plan = folder / f"{key}.engine"
    plan.write_bytes(b"plan bytes")
    sidecar = {
        "precision": precision,
        "tensorrt": trt,
        "device": {"name": name, "compute_capability": cc},
    }
    if onnx:
        sidecar["onnx_sha256"] = onnx
    (folder / f"{key}.json").write_text(json.dumps(sidecar))
    return plan


def test_select_plan_never_picks_another_gpu_or_version(tmp_path):
    engines = tmp_path / "engines"
    write_plan(engines, "a", "fp16", "10.3.0.26", "Orin", "8.7")
    write_plan(engines, "b", "fp16", "8.5.2.2", "Xavier", "7.2")
    int8 = write_plan(engines, "c", "int8", "10.3.0.26", "NVIDIA H200", "9.0", onnx="h1")
    plan, why = plan_key.select_plan(
        engines, "auto", "10.3.0.26", "NVIDIA H200", "9.0", {"int8": "h1"}
    )
    assert plan == int8 and "int8" in why
    plan, why = plan_key.select_plan(engines, "fp16", "10.3.0.26", "NVIDIA H200", "9.0")
    assert plan is None and "built for Orin (compute 8.7)" in why and "TensorRT 8.5.2.2" in why
    plan, why = plan_key.select_plan(
        engines, "int8", "10.3.0.26", "NVIDIA H200", "9.0", {"int8": "h2"}
    )
    assert plan is None and "older version of the model" in why
    plan, why = plan_key.select_plan(tmp_path / "none", "fp16", "10.3", "x", "9.0")
    assert plan is None and "no engines/" in why


def test_plan_mismatch_sentences():
    info = plan_key.PlanKey("fp16", "8.5.2.2", "Orin", "8.7")
    assert plan_key.plan_mismatch(info, "8.5.2.2", "Orin", "8.7") is None
    assert "TensorRT 8.5.2.2" in plan_key.plan_mismatch(info, "10.3.0", "Orin", "8.7")
    assert "this GPU is Xavier (compute 7.2)" in plan_key.plan_mismatch(
        info, "8.5.2.2", "Xavier", "7.2"
    )


@pytest.mark.parametrize(
    ("messages", "kind", "fragment"),
    [
        (
            [
                "6: The engine plan file is generated on an incompatible device, expecting compute 8.6 got compute 7.5, please rebuild."
            ],
            "device",
            "built for compute 7.5, this GPU is compute 8.6",
        ),
        (
            [
                "6: The engine plan file is not compatible with this version of TensorRT, expecting library version 8.5.2 got 8.2.1, please rebuild."
            ],
            "version",
            "built by TensorRT 8.2.1, this is 8.5.2",
        ),
        (
            [
                "1: [stdArchiveReader.cpp::StdArchiveReader::42] Error Code 1: Serialization (Serialization assertion stdVersionRead == kSERIALIZATION_VERSION failed.Version tag does not match. Note: Current Version: 236, Serialized Engine Version: 239)"
            ],
            "version",
            "another TensorRT version",
        ),
        (
            [
                "1: Serialization assertion magicTagRead == kMAGIC_TAG failed.Magic tag does not match"
            ],
            "corrupt",
            "corrupt",
        ),
    ],
)
def test_deserialize_failures_are_explained(messages, kind, fragment):
    got_kind, sentence = plan_key.explain_deserialize_failure(messages, Path("m.engine"))
    assert got_kind == kind and fragment in sentence
    if kind != "corrupt":
        assert "edgert build" in sentence


def test_an_ultralytics_engine_header_is_split_from_the_plan():
    """Ultralytics' .engine: a little-endian int32 length and JSON metadata before the plan
    (ultralytics/engine/exporter.py); a TensorRT plan (magic "ftrt") or anything else is kept."""
    meta = b'{"task": "pose", "kpt_shape": [17, 3]}'
    got, plan = plan_key.split_plan_header(len(meta).to_bytes(4, "little") + meta + b"ftrtPLAN")
    assert got == {"task": "pose", "kpt_shape": [17, 3]} and plan == b"ftrtPLAN"
    for data in (
        b"ftrt" + bytes(64),  # a plan
        (500).to_bytes(4, "little") + b"{short",  # a length past the end
        (6).to_bytes(4, "little") + b"{nope}rest",  # not JSON
        (2).to_bytes(4, "little") + b"[]rest",  # JSON, not metadata
        b"",
    ):
        assert plan_key.split_plan_header(data) == (None, data), data


def test_numpy_dtypes():
    assert compat.numpy_dtype("DataType.FLOAT") == "float32"
    assert compat.numpy_dtype("HALF") == "float16"
    with pytest.raises(ModelError):  # a sentence, not a bare ValueError (finding 11)
        compat.numpy_dtype("DataType.BF16")


def test_calibration_cache_text():
    from edgert.runtime.backends.tensorrt_plan import calibration_cache_text

    assert compat.calibration_cache_tag((8, 5, 2, 2)) == 8502
    assert compat.calibration_cache_tag((10, 3, 0)) == 100300
    text = calibration_cache_text((8, 5, 2), {"input": 127.0, "x": 2.54}).decode().splitlines()
    assert text[0] == "TRT-8502-EntropyCalibration2"
    assert text[1] == "input: 3f800000"  # scale 1.0
    assert text[2] == "x: 3ca3d70a"  # scale 0.02


@pytest.mark.parametrize(
    ("version", "compute", "fragment"),
    [
        ((10, 3, 0), (8, 7), "compute capability 8.7) has no FP8"),  # Jetson Orin
        ((10, 3, 0), (8, 6), "has no FP8 tensor cores"),  # Ampere
        ((8, 6, 1), (9, 0), "TensorRT 8.6.1 does not build FP8"),
        ((10, 3, 0), (8, 9), None),  # Ada
        ((10, 8, 0), (11, 0), None),  # Jetson Thor
        ((11, 0, 0), (9, 0), None),  # Hopper
    ],
)
def test_fp8_only_where_the_gpu_and_tensorrt_have_it(version, compute, fragment):
    why = compat.fp8_unsupported_reason(version, compute)
    assert why is None if fragment is None else fragment in why


def test_fp8_flags_and_model():
    assert compat.builder_flag_names((10, 3), "fp8", qdq_model=True) == ["FP16", "FP8"]
    assert compat.builder_flag_names((11, 0), "fp8", qdq_model=True) == []  # strongly typed
    assert compat.onnx_for_precision((10, 3), "fp8") == "model.fp8.onnx"
    assert compat.onnx_for_precision((11, 0), "fp8") == "model.fp8.fp16.onnx"  # as for INT8


def test_dla_is_checked_in_one_place():
    """One pure check for DLA, asked by edgert build before calibrating (cores unknown) and by
    the plan builder with TensorRT's core count."""
    assert compat.dla_refusal("int8", None) is None
    assert compat.dla_refusal("fp16", 1, cores=2) is None
    assert "FP16 or INT8 only" in compat.dla_refusal("fp8", 0)
    assert "FP16 or INT8 only" in compat.dla_refusal("fp32", 0, cores=2)
    assert "has 2 DLA core(s)" in compat.dla_refusal("int8", 2, cores=2)
    assert "numbered from 0" in compat.dla_refusal("int8", -1)
