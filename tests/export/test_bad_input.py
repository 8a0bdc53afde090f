"""Each bad input: one sentence on stderr, exit 2, no traceback, nothing half-written."""

from __future__ import annotations

import json

import pytest
import torch

from edgert.export import export_model
from tests.conftest import ROOT, assert_user_error, leftovers, run_cli
from tests.export import models

MODELS_PY = ROOT / "tests" / "export" / "models.py"


@pytest.mark.subprocess
def test_missing_path(tmp_path):
    proc = run_cli("export", tmp_path / "nope.pt", "-o", tmp_path / "o.edgert")
    assert_user_error(proc, "does not exist")


@pytest.mark.subprocess
def test_file_that_is_not_a_model(tmp_path):
    (tmp_path / "notes.pt").write_text("these are not weights\n")
    assert_user_error(run_cli("export", tmp_path / "notes.pt"), "not a model file")
    (tmp_path / "broken.onnx").write_bytes(b"\x08\x07garbage\xff\xfe" * 10)
    assert_user_error(run_cli("export", tmp_path / "broken.onnx"), "broken.onnx")
    assert leftovers(tmp_path) == []


@pytest.mark.subprocess
def test_state_dict_alone_is_explained(tmp_path):
    torch.save(models.SmallConv().state_dict(), tmp_path / "w.pt")
    assert_user_error(run_cli("export", tmp_path / "w.pt"), "state_dict", "--weights")


@pytest.mark.subprocess
def test_factory_not_returning_a_module(tmp_path):
    proc = run_cli("export", f"{MODELS_PY}:build_not_a_module", "--input-shape", "1x3x8x8")
    assert_user_error(proc, "returned dict", "torch.nn.Module")


@pytest.mark.subprocess
def test_factory_function_missing():
    assert_user_error(
        run_cli("export", f"{MODELS_PY}:no_such_function"), "has no function named no_such_function"
    )


@pytest.mark.subprocess
def test_input_shape_rejected(tmp_path):
    proc = run_cli(
        "export", f"{MODELS_PY}:build", "--input-shape", "1x5x8x8", "-o", tmp_path / "x.edgert"
    )
    assert_user_error(proc, "rejects input shape 1x5x8x8")
    assert not (tmp_path / "x.edgert").exists()


@pytest.mark.subprocess
def test_input_shape_required_and_parsed(tmp_path):
    assert_user_error(run_cli("export", f"{MODELS_PY}:build"), "--input-shape is required")
    assert_user_error(
        run_cli("export", f"{MODELS_PY}:build", "--input-shape", "1x3xbig"), "not of the form"
    )


@pytest.mark.subprocess
def test_operator_needing_a_newer_opset(tmp_path):
    proc = run_cli(
        "export",
        f"{MODELS_PY}:build_grid_sample",
        "--input-shape",
        "1x3x8x8",
        "--opset",
        "15",
        "-o",
        tmp_path / "g",
    )
    assert_user_error(proc, "aten::grid_sampler", "opset 15", "--opset 16")
    assert not (tmp_path / "g").exists()


@pytest.mark.subprocess
def test_operator_without_onnx_equivalent():
    proc = run_cli("export", f"{MODELS_PY}:build_eigh", "--input-shape", "1x3x3")
    assert_user_error(proc, "aten::linalg_eigh", "no ONNX equivalent")


@pytest.mark.subprocess
def test_weights_not_matching_architecture(tmp_path):
    state = models.SmallConv().state_dict()
    state["fc.weight"] = torch.zeros(7, 8)
    state.pop("bn.running_var")
    state["extra.weight"] = torch.zeros(1)
    torch.save(state, tmp_path / "w.pth")
    proc = run_cli(
        "export", f"{MODELS_PY}:build", "--weights", tmp_path / "w.pth", "--input-shape", "1x3x8x8"
    )
    assert_user_error(
        proc,
        "do not match the architecture",
        "missing: bn.running_var",
        "unexpected: extra.weight",
        "fc.weight (7, 8) vs (5, 8)",
    )


@pytest.mark.subprocess
def test_unwritable_output(tmp_path):
    (tmp_path / "a_file").write_text("x")
    proc = run_cli(
        "export",
        f"{MODELS_PY}:build",
        "--input-shape",
        "1x3x8x8",
        "-o",
        tmp_path / "a_file" / "b.edgert",
    )
    assert_user_error(proc, "cannot write")
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "precious.txt").write_text("mine")
    proc = run_cli(
        "export", f"{MODELS_PY}:build", "--input-shape", "1x3x8x8", "-o", tmp_path / "keep"
    )
    assert_user_error(proc, "not an edgert bundle", "refusing")
    assert (tmp_path / "keep" / "precious.txt").read_text() == "mine"


@pytest.mark.subprocess
def test_missing_torch_prints_install_line(tmp_path):
    blocker = tmp_path / "block"
    blocker.mkdir()
    # a stand-in that makes `import torch` fail the way it does where PyTorch is not installed
    (blocker / "torch.py").write_text("raise ImportError('No module named torch')\n")
    proc = run_cli("export", "zoo:digits_cnn", env={"PYTHONPATH": str(blocker)})
    assert_user_error(proc, "pip install 'edgert[export]'", code=1)
    helped = run_cli("export", "--help", env={"PYTHONPATH": str(blocker)})
    assert helped.returncode == 0 and "opset" in helped.stdout


# -- issue 28.10, 13, 14: what the export must not do silently -----------------------------------
BRANCHY = """
import torch


class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = self.fc(x)
        return y if y.sum() > 0 else -y


class Named(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return {"logits": self.fc(x), "features": x * 2}


class Wide(torch.nn.Module):
    def forward(self, x):
        return x.flatten(1)


class Log(torch.nn.Module):
    def forward(self, x):
        return torch.log(x)


def branchy():
    return Branchy()


def named():
    return Named()


def wide():
    return Wide()


def log():
    return Log()
"""


@pytest.fixture()
def branchy_py(tmp_path):
    path = tmp_path / "branchy.py"
    path.write_text(BRANCHY)
    return path


@pytest.mark.subprocess
def test_data_dependent_control_flow_is_refused(tmp_path, branchy_py):
    """`y if y.sum() > 0 else -y`: the trace keeps one branch. Refused with the tracer's words and
    the model's line; with --allow-trace-warnings the parity on negated inputs sees the other
    branch and nothing is written either."""
    proc = run_cli("export", f"{branchy_py}:branchy", "--input-shape", "1x8", "-o", tmp_path / "b")
    assert_user_error(
        proc, "tracer fixed a data-dependent step", "branchy.py:13", "--allow-trace-warnings"
    )
    proc = run_cli(
        "export",
        f"{branchy_py}:branchy",
        "--input-shape",
        "1x8",
        "-o",
        tmp_path / "b",
        "--allow-trace-warnings",
    )
    assert proc.returncode == 2 and "differs from PyTorch" in proc.stderr, proc.stderr
    assert "WARNING: tracer: Converting a tensor to a Python boolean" in proc.stderr
    assert not (tmp_path / "b").exists()


def test_dict_outputs_keep_their_names(tmp_path, branchy_py):
    result = export_model(f"{branchy_py}:named", tmp_path / "n", input_shape="1x8")
    assert [o["name"] for o in result.manifest["outputs"]] == ["logits", "features"]


@pytest.mark.subprocess
def test_a_wide_output_exports_and_a_big_manifest_is_a_bundle(tmp_path, branchy_py):
    """An output of 1,080,000 values (over the 2**20 the manifest used to allow), and a manifest
    over 1 MiB (50,000 labels) that build and export-triton still take for a bundle."""
    from edgert.runtime.bundle import Bundle, is_bundle

    result = export_model(f"{branchy_py}:wide", tmp_path / "w", input_shape="1x3x600x600")
    assert Bundle(result.bundle).manifest.outputs[0].shape == (1, 1_080_000)
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"a fairly long class name number {i}\n" for i in range(50_000)))
    big = export_model(f"{branchy_py}:named", tmp_path / "big", input_shape="1x8")
    manifest = json.loads((big.bundle / "manifest.json").read_text())
    manifest["labels"] = labels.read_text().splitlines()
    (big.bundle / "manifest.json").write_text(json.dumps(manifest))
    assert (big.bundle / "manifest.json").stat().st_size > 1 << 20
    assert is_bundle(big.bundle) and len(Bundle(big.bundle).manifest.labels) == 50_000
    proc = run_cli("export-triton", big.bundle, "--repo", tmp_path / "repo")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.subprocess
def test_nan_from_pytorch_itself_is_blamed_on_the_model(tmp_path, branchy_py):
    proc = run_cli("export", f"{branchy_py}:log", "--input-shape", "1x8", "-o", tmp_path / "l")
    assert_user_error(proc, "the model's own output", "before any onnx")
