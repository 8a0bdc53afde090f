"""Each bad input: one sentence on stderr, exit 2, no traceback, nothing half-written."""

from __future__ import annotations

import torch

from tests.conftest import ROOT, assert_user_error, leftovers, run_cli
from tests.export import models

MODELS_PY = ROOT / "tests" / "export" / "models.py"


def test_missing_path(tmp_path):
    proc = run_cli("export", tmp_path / "nope.pt", "-o", tmp_path / "o.edgert")
    assert_user_error(proc, "does not exist")


def test_file_that_is_not_a_model(tmp_path):
    (tmp_path / "notes.pt").write_text("these are not weights\n")
    assert_user_error(run_cli("export", tmp_path / "notes.pt"), "not a model file")
    (tmp_path / "broken.onnx").write_bytes(b"\x08\x07garbage\xff\xfe" * 10)
    assert_user_error(run_cli("export", tmp_path / "broken.onnx"), "broken.onnx")
    assert leftovers(tmp_path) == []


def test_state_dict_alone_is_explained(tmp_path):
    torch.save(models.SmallConv().state_dict(), tmp_path / "w.pt")
    assert_user_error(run_cli("export", tmp_path / "w.pt"), "state_dict", "--weights")


def test_factory_not_returning_a_module(tmp_path):
    proc = run_cli("export", f"{MODELS_PY}:build_not_a_module", "--input-shape", "1x3x8x8")
    assert_user_error(proc, "returned dict", "torch.nn.Module")


def test_factory_function_missing():
    assert_user_error(
        run_cli("export", f"{MODELS_PY}:no_such_function"), "has no function named no_such_function"
    )


def test_input_shape_rejected(tmp_path):
    proc = run_cli(
        "export", f"{MODELS_PY}:build", "--input-shape", "1x5x8x8", "-o", tmp_path / "x.edgert"
    )
    assert_user_error(proc, "rejects input shape 1x5x8x8")
    assert not (tmp_path / "x.edgert").exists()


def test_input_shape_required_and_parsed(tmp_path):
    assert_user_error(run_cli("export", f"{MODELS_PY}:build"), "--input-shape is required")
    assert_user_error(
        run_cli("export", f"{MODELS_PY}:build", "--input-shape", "1x3xbig"), "not of the form"
    )


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


def test_operator_without_onnx_equivalent():
    proc = run_cli("export", f"{MODELS_PY}:build_eigh", "--input-shape", "1x3x3")
    assert_user_error(proc, "aten::linalg_eigh", "no ONNX equivalent")


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


def test_missing_torch_prints_install_line(tmp_path):
    blocker = tmp_path / "block"
    blocker.mkdir()
    # a stand-in that makes `import torch` fail the way it does where PyTorch is not installed
    (blocker / "torch.py").write_text("raise ImportError('No module named torch')\n")
    proc = run_cli("export", "zoo:digits_cnn", env={"PYTHONPATH": str(blocker)})
    assert_user_error(proc, "pip install 'edgert[export]'", code=1)
    helped = run_cli("export", "--help", env={"PYTHONPATH": str(blocker)})
    assert helped.returncode == 0 and "opset" in helped.stdout
