"""tests/quick.py: which tests a touched file picks, and how the command line is split."""

from __future__ import annotations

from tests import quick

# (module names are built, not written out: a test file naming a module is picked for it)
_module = quick.module_of


def _picked(*files: str) -> dict:
    picked, unmatched = quick.pick(list(files))
    assert not unmatched, unmatched
    return picked


def test_a_module_picks_the_tests_that_mirror_it_and_those_that_import_it():
    picked = _picked("runtime/images/preprocess.py")
    assert (
        "mirrors runtime/images/preprocess.py" in picked["tests/runtime/images/test_preprocess.py"]
    )
    assert (
        "mirrors runtime/images/preprocess.py"
        in picked["tests/runtime/images/test_preprocess_parity.py"]
    )
    assert (
        f"imports {_module('runtime/images/preprocess.py')}"
        in picked["tests/runtime/tasks/test_detection.py"]
    )
    assert "tests/runtime/tracking/test_tracking.py" not in picked
    # test_cli.py mirrors apps/cli.py; test_clip_folders.py does not
    picked = _picked("apps/cli.py")
    assert "tests/apps/test_cli.py" in picked and "tests/apps/test_clip_folders.py" not in picked
    pipeline = _picked("apps/camera/pipeline.py")
    assert f"imports {_module('apps/camera/pipeline.py')}" in pipeline["tests/apps/test_camera.py"]


def test_a_name_re_exported_by_a_package_counts_as_an_import_of_its_module():
    # test_camera.py imports HttpOutput from the camera package; sinks/web.py defines it
    picked = _picked("apps/camera/sinks/web.py")
    assert f"imports {_module('apps/camera/sinks/web.py')}" in picked["tests/apps/test_camera.py"]


def test_test_files_helpers_and_files_no_test_matches():
    assert _picked("tests/apps/test_gate.py") == {"tests/apps/test_gate.py": ["changed"]}
    assert list(_picked("tests/markers.py")) == ["tests/test_markers.py"]
    via_helper = _picked("tests/tiny.py")
    assert (
        f"imports {_module('tests/tiny.py')}" in via_helper["tests/runtime/test_engine_basics.py"]
    )
    assert list(_picked("tests/conftest.py")) == ["tests"]
    # no test imports or names the Kalman filter's module (the tracker's tests reach it)
    assert _picked("runtime/tracking/kalman.py") == {
        "tests/runtime": ["nothing matched runtime/tracking/kalman.py: its package's tests"]
    }
    assert (
        "names Dockerfile.jetson"
        in _picked("Dockerfile.jetson")["tests/apps/test_docker_triton.py"]
    )
    lone = "benchmarks/" + "_".join(("named", "by", "no", "test")) + ".py"  # not even this one
    assert quick.pick([lone]) == ({}, [lone])


def test_modules_of_files():
    assert quick.module_of("runtime/power/meter.py") == "edgert.runtime.power.meter"
    assert quick.module_of("apps/camera/__init__.py") == "edgert.apps.camera"
    assert quick.module_of("tests/tiny.py") == "tests.tiny"
    assert quick.module_of("benchmarks/serve.py") is None
    assert quick.module_of("README.md") is None


def test_paths_selections_and_pytest_options_are_told_apart():
    files, selections, options = quick.split(
        ["runtime/engine.py", "-k", "runtime/engine.py or x", "tests/apps::test_y", "-x", "tests"]
    )
    assert files == ["runtime/engine.py"]
    assert selections == ["tests/apps::test_y", "tests"]
    assert options == ["-k", "runtime/engine.py or x", "-x"]
    files, _, options = quick.split(["apps/telemetry", "--", "-m", "subprocess"])
    assert "apps/telemetry/__init__.py" in files and options == ["-m", "subprocess"]
