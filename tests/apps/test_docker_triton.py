"""Dockerfile.jetson (parsed, and linted with hadolint where installed) and Triton repositories
(config parsed with Triton's own protobuf schema, every field checked against the bundle)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from edgert.export import export_model
from edgert.runtime import Bundle
from edgert.runtime.backends.plan_cache import PlanCache, PlanKey
from tests.conftest import ROOT, assert_user_error, run_cli

DOCKERFILE = ROOT / "Dockerfile.jetson"


def instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def test_dockerfile_structure():
    ins = instructions()
    args = dict(re.match(r"(\w+)=?(.*)", rest).groups() for op, rest in ins if op == "ARG")
    assert args["L4T_TAG"].startswith("r36")  # JetPack 6 by default (TensorRT 10.3)
    assert "r35" in DOCKERFILE.read_text()  # the JetPack 5 build argument is documented
    froms = [rest for op, rest in ins if op == "FROM"]
    # the wheel is built with a current Python; the JetPack image (Python 3.8 on JetPack 5)
    # installs that wheel, as users do, never the source tree
    assert froms == ["python:3.12-slim AS wheel", "nvcr.io/nvidia/l4t-jetpack:${L4T_TAG}"]
    copies = [rest for op, rest in ins if op == "COPY"]
    assert "pyproject.toml setup.py README.md LICENSE ./" in copies
    assert "--from=wheel /wheels /tmp/wheels" in copies
    final_runs = " ".join(
        rest for op, rest in ins[[op for op, _ in ins].index("FROM", 1) :] if op == "RUN"
    )
    assert "edgert-*.whl" in final_runs and "install ." not in final_runs
    assert "pycuda>=2025.1.2" in final_runs  # CUDA 13 (JetPack 7) needs it
    users = [rest for op, rest in ins if op == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert any("--groups video" in rest for op, rest in ins if op == "RUN")
    assert [rest for op, rest in ins if op == "ENTRYPOINT"] == ['["edgert"]']
    run = " ".join(rest for op, rest in ins if op == "RUN")
    assert "onnxruntime-gpu" in run and "pycuda" in run
    assert (
        "tensorrt" not in run.split("pip install")[1].split("&&")[0]
    )  # TensorRT from the base image, not pip


@pytest.mark.subprocess
@pytest.mark.skipif(
    shutil.which("hadolint") is None and not (ROOT / ".venv/bin/hadolint").exists(),
    reason="hadolint not installed",
)
def test_hadolint_clean():
    exe = shutil.which("hadolint") or str(ROOT / ".venv/bin/hadolint")
    proc = subprocess.run([exe, str(DOCKERFILE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return export_model(
        "zoo:digits_cnn", tmp_path_factory.mktemp("t") / "digits.edgert", max_batch=8
    ).bundle


def parse(path):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


@pytest.mark.subprocess
def test_onnx_repository_matches_the_bundle(bundle, tmp_path):
    proc = run_cli("export-triton", bundle, "--repo", tmp_path / "models", "--instances", "2")
    assert proc.returncode == 0, proc.stderr
    m = Bundle(bundle).manifest
    folder = tmp_path / "models" / m.name
    cfg = parse(folder / "config.pbtxt")
    from tritonclient.grpc import model_config_pb2 as pb

    assert cfg.name == m.name and cfg.platform == "onnxruntime_onnx" and cfg.max_batch_size == 8
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [
        ("input", pb.TYPE_FP32, [1, 8, 8])
    ]
    assert [(o.name, o.data_type, list(o.dims)) for o in cfg.output] == [
        ("logits", pb.TYPE_FP32, [10])
    ]
    assert cfg.output[0].label_filename == "labels.txt"
    assert (folder / "labels.txt").read_text().split() == list(m.labels)
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 8]
    assert cfg.instance_group[0].count == 2
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert json.loads(params["edgert.preprocessing"]) == m.preprocessing.to_dict()
    assert params["edgert.task"] == "classify"
    assert (folder / "1" / "model.onnx").read_bytes() == (bundle / "model.onnx").read_bytes()


@pytest.mark.subprocess
def test_plan_repository_and_fixed_batch(bundle, tmp_path):
    key = PlanKey("fp16", "10.3.0.26", "Orin", "8.7", onnx_sha256="a" * 64)
    plan, _ = PlanCache(bundle / "engines").get_or_build(key, lambda: b"PLAN")
    proc = run_cli("export-triton", bundle, "--repo", tmp_path / "m", "--engine", key.digest[:8])
    assert proc.returncode == 0, proc.stderr
    cfg = parse(tmp_path / "m" / "digits_cnn" / "config.pbtxt")
    from tritonclient.grpc import model_config_pb2 as pb

    assert (
        cfg.platform == "tensorrt_plan"
        and cfg.instance_group[0].kind == pb.ModelInstanceGroup.KIND_GPU
    )
    assert (tmp_path / "m" / "digits_cnn" / "1" / "model.plan").read_bytes() == b"PLAN"
    static = export_model("zoo:digits_cnn", tmp_path / "static.edgert").bundle
    assert run_cli("export-triton", static, "--repo", tmp_path / "s").returncode == 0
    cfg = parse(tmp_path / "s" / "digits_cnn" / "config.pbtxt")
    assert (
        cfg.max_batch_size == 0
        and list(cfg.input[0].dims) == [1, 1, 8, 8]
        and not cfg.HasField("dynamic_batching")
    )


@pytest.mark.subprocess
def test_triton_bad_input(bundle, tmp_path):
    assert_user_error(
        run_cli("export-triton", bundle, "--repo", tmp_path, "--max-batch", "64"),
        "exceeds the bundle's maximum batch 8",
    )
    assert_user_error(
        run_cli("export-triton", bundle, "--repo", tmp_path, "--engine", "nope"), "matches 0 plans"
    )
