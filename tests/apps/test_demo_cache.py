"""What a second ``edgert demo`` reuses: a real bundle and a real gated INT8 model, reused only
while the key of their inputs matches and their files are the ones recorded."""

from __future__ import annotations

import json

import pytest

from edgert.apps.commands import demo_cache
from edgert.export import export_model
from edgert.quantize import build


@pytest.fixture
def made(tmp_path):
    """A workdir whose bundle (zoo digits) and gated INT8 model are recorded as the demo does."""
    bundle = export_model("zoo:digits_cnn", tmp_path / "d.edgert").bundle
    export_key = demo_cache.key("export", {"model": "zoo:digits_cnn"})
    demo_cache.remember(tmp_path, "export", export_key, bundle, "model.onnx")
    build(bundle, "int8", calib_size=64, holdout_size=64, calib_method="percentile", prepare="none")
    int8_key = demo_cache.key("int8", {"calib_size": 64})
    demo_cache.remember(tmp_path, "int8", int8_key, bundle, "model.int8.onnx")
    return tmp_path, bundle, export_key, int8_key


def test_reused_while_inputs_and_files_are_unchanged(made):
    workdir, bundle, export_key, int8_key = made
    assert demo_cache.bundle_reusable(workdir, bundle, export_key)
    section = demo_cache.int8_reusable(workdir, bundle, int8_key)
    assert section is not None and section["passed"] is True
    assert section["calibration"]["method"] == "percentile"
    # another setting, another key: made again
    assert demo_cache.key("int8", {"calib_size": 65}) != int8_key
    assert (
        demo_cache.int8_reusable(workdir, bundle, demo_cache.key("int8", {"calib_size": 65}))
        is None
    )
    assert not demo_cache.bundle_reusable(workdir, bundle, demo_cache.key("export", {"model": "x"}))


def test_a_changed_file_or_a_new_export_is_not_reused(made):
    workdir, bundle, export_key, int8_key = made
    with open(bundle / "model.int8.onnx", "ab") as f:
        f.write(b"\0")
    assert demo_cache.int8_reusable(workdir, bundle, int8_key) is None
    assert demo_cache.bundle_reusable(workdir, bundle, export_key)
    with open(bundle / "model.onnx", "ab") as f:
        f.write(b"\0")
    assert not demo_cache.bundle_reusable(workdir, bundle, export_key)
    # a new export forgets the INT8 model made from the bundle before it
    demo_cache.remember(workdir, "export", export_key, bundle, "model.onnx")
    assert "int8" not in json.loads((workdir / demo_cache.RECORD).read_text())


def test_no_record_or_a_broken_one_reuses_nothing(tmp_path):
    assert not demo_cache.bundle_reusable(tmp_path, tmp_path / "none.edgert", "k")
    (tmp_path / demo_cache.RECORD).write_text("{not json")
    assert demo_cache.int8_reusable(tmp_path, tmp_path / "none.edgert", "k") is None


def test_the_key_covers_edgert_code_and_packages():
    digest = demo_cache.code_digest()
    assert len(digest) == 64 and digest == demo_cache.code_digest()
    versions = demo_cache.versions()
    assert versions["onnxruntime"] and versions["numpy"] and versions["edgert"]
