"""The task registry: one spec per task a manifest may name, and the parts that follow it."""

from __future__ import annotations

import pytest

from edgert.runtime.bundle import TASKS, TensorSpec
from edgert.runtime.errors import ModelError
from edgert.runtime.tasks import TASK_SPECS, check_task_outputs, task_spec
from tests.conftest import run_cli


def test_every_task_a_manifest_may_name_has_one_spec():
    assert tuple(TASK_SPECS) == TASKS
    assert all(spec.name == name for name, spec in TASK_SPECS.items())
    # a task is one engine's outputs decoded, or a bundle of several networks with its own module
    for spec in TASK_SPECS.values():
        assert spec.decode is None or spec.model is None
    with pytest.raises(ModelError, match="unknown task 'depth'; choose one of classify, detect"):
        task_spec("depth")


@pytest.mark.subprocess
def test_the_cli_offers_what_the_specs_say():
    camera = run_cli("camera", "--help").stdout
    export = run_cli("export", "--help").stdout
    for spec in TASK_SPECS.values():
        offered = camera.split("--task {")[1].split("}")[0].split(",")
        assert (spec.name in offered) == spec.camera, spec.name
        offered = export.split("--task {")[1].split("}")[0].split(",")
        assert (spec.name in offered) == spec.export_option, spec.name


def test_first_output_shapes_come_from_the_spec():
    vector = [TensorSpec("y", "float32", (1,))]
    scores = [TensorSpec("y", "float32", (1, 10))]
    with pytest.raises(ModelError, match=r"classify reads class scores \[N, C\]"):
        check_task_outputs("classify", vector)
    with pytest.raises(ModelError, match=r"segment reads per-pixel class scores"):
        check_task_outputs("segment", scores)
    check_task_outputs("classify", scores)
    check_task_outputs("generic", vector)  # raw outputs: any shape
