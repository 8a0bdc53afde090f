"""Bundles come from other machines and live through crashes: hostile names, foreign manifest.json
folders, changed weights, unrecorded files, crash-safe replacement (issue: reliability 1, 3-5, 7)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from edgert.runtime import atomic
from edgert.runtime.bundle import Bundle, is_bundle
from edgert.runtime.engine import Engine
from edgert.runtime.errors import BundleError, OutputError
from tests.conftest import ROOT, assert_user_error, leftovers, run_cli
from tests.tiny import classifier_bundle


@pytest.fixture()
def tiny(tmp_path):
    return classifier_bundle(tmp_path / "src")


def _edit_manifest(bundle: Path, **changes) -> None:
    path = bundle / "manifest.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


@pytest.mark.subprocess
@pytest.mark.parametrize("name", ["../victim", "/tmp/abs", ".", "..", "a/b", "", ".hidden"])
def test_export_triton_refuses_names_that_are_paths(tmp_path, tiny, name):
    repo = tmp_path / "repo"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    (repo / "other").mkdir(parents=True)
    _edit_manifest(tiny, name=name)
    proc = run_cli("export-triton", tiny, "--repo", repo)
    assert_user_error(proc, "not a safe name")
    assert (victim / "keep.txt").read_text() == "mine"
    assert (repo / "other").is_dir() and sorted(p.name for p in repo.iterdir()) == ["other"]


@pytest.mark.subprocess
def test_hostile_manifest_fields_are_refused(tmp_path, tiny):
    cases = [
        ({"labels": ["a\nb", "c", "d"]}, "one line"),
        ({"inputs": [{"name": 'x"\n}', "dtype": "float32", "shape": [-1, 3, 16, 16]}]}, "tensor"),
        ({"inputs": "x"}, "inputs must be a list"),
        ({"inputs": [{"name": "x", "dtype": "complex", "shape": [1]}]}, "unknown dtype"),
        ({"inputs": [{"name": "x", "dtype": "float32", "shape": [1, "a"]}]}, "invalid shape"),
        ({"export": {"batch": {"max": 10**9}}}, "export.batch"),
        ({"models": {"pnet": {"file": "../../etc/passwd"}}}, "not a safe name"),
        ({"task": 5}, "unknown task"),
        ({"preprocessing": {"size": [0, 0]}}, "size"),
        ({"preprocessing": {"size": [16, 16], "mean": ["x"]}}, "preprocessing"),
        ({"preprocessing": {"size": [16, 16], "scale": float("nan")}}, "finite"),
    ]
    original = (tiny / "manifest.json").read_text()
    for change, fragment in cases:
        (tiny / "manifest.json").write_text(original)
        _edit_manifest(tiny, **change)
        with pytest.raises(BundleError, match=fragment):
            Bundle(tiny)
        assert_user_error(run_cli("run", tiny, tmp_path / "none.jpg"), fragment)


def test_a_source_record_that_is_not_an_object_reads_as_none(tmp_path, tiny):
    """The manifest's ``source`` of someone else's bundle may be anything: it reads as no
    source (its calibration then asks for --calib), never as a crash."""
    from edgert.runtime.bundle import Source

    for value in ("zoo:mobilenet_v2", ["zoo:x"], 5, {"spec": 5}, {"spec": ["zoo:x"]}):
        _edit_manifest(tiny, source=value)
        assert Bundle(tiny).manifest.source == Source() and Bundle(tiny).manifest.source.zoo is None
    _edit_manifest(tiny, source={"kind": "zoo", "spec": "zoo:mobilenet_v2"})
    assert Bundle(tiny).manifest.source.zoo == "mobilenet_v2"


@pytest.mark.subprocess
def test_export_never_replaces_a_folder_with_a_foreign_manifest(tmp_path):
    webapp = tmp_path / "site"
    webapp.mkdir()
    (webapp / "manifest.json").write_text('{"name": "my web app", "icons": []}')
    (webapp / "index.html").write_text("<html></html>")
    assert not is_bundle(webapp)
    onnx_path = classifier_bundle(tmp_path / "src").parent / "tiny.onnx"
    proc = run_cli("export", onnx_path, "-o", webapp)
    assert_user_error(proc, "not an edgert bundle")
    assert (webapp / "index.html").is_file()


@pytest.mark.subprocess
def test_changed_weights_are_refused_on_onnx_runtime(tmp_path, tiny):
    with Engine.load(tiny) as engine:  # loads and remembers the hash
        engine.infer(np.zeros((1, 3, 16, 16), np.float32))
    model = onnx.load(str(tiny / "model.onnx"))
    weights = onnx.numpy_helper.to_array(model.graph.initializer[0]).copy()
    model.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(weights * 2, "cw"))
    onnx.save(model, str(tiny / "model.onnx"))
    with pytest.raises(BundleError, match="does not match the SHA-256"):
        Engine.load(tiny)
    assert_user_error(run_cli("bench", tiny, "--iterations", "1"), "SHA-256")


def test_unrecorded_int8_model_never_runs(tmp_path, tiny):
    """What a build that died after writing its model leaves: a file the manifest does not record."""
    (tiny / "model.int8.onnx").write_bytes((tiny / "model.onnx").read_bytes())
    with pytest.raises(BundleError, match="not recorded in the bundle's manifest"):
        Engine.load(tiny, precision="int8")


def test_build_commits_models_and_manifest_together(tmp_path, tiny):
    from edgert.quantize.staging import commit as _commit

    def files():
        return sorted(str(p.relative_to(tiny)) for p in tiny.rglob("*") if p.is_file())

    before = files()
    manifest = json.loads((tiny / "manifest.json").read_text())
    bad = dict(manifest, format="something else")  # the manifest write fails validation
    with pytest.raises(BundleError):
        _commit(tiny, bad, {"model.int8.onnx": b"model", "calibration/ranges.json": b"{}"})
    assert files() == before  # nothing left behind
    _commit(tiny, manifest, {"model.int8.onnx": b"model"})
    assert (tiny / "model.int8.onnx").read_bytes() == b"model"
    assert not [p for p in tiny.iterdir() if p.name.endswith(".pending")]


CHILD = r"""
import os, shutil, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from edgert.runtime import atomic
target = Path(sys.argv[1]); mode = sys.argv[2]; crash_at = int(sys.argv[3])
steps = [0]
def step(fn):
    def wrapped(*args, **kwargs):
        steps[0] += 1
        if steps[0] == crash_at:
            os._exit(9)  # the process dies before this step
        return fn(*args, **kwargs)
    return wrapped
if mode == "fallback":
    atomic._exchange = lambda a, b: False
else:
    atomic._exchange = step(atomic._exchange)
os.replace = step(os.replace)
shutil.rmtree = step(shutil.rmtree)
generation = 100 + crash_at
while True:
    with atomic.staged_directory(target) as stage:
        (stage / "manifest.json").write_text('{"generation": %d}' % generation)
        (stage / "model.onnx").write_bytes(b"x" * 4096)
    if mode != "loop":
        break
    generation += 1
"""


def _generation(target: Path) -> int:
    return json.loads((target / "manifest.json").read_text())["generation"]


def _start(target: Path, mode: str, crash_at: int = 0):
    code = CHILD.replace("{root!r}", repr(str(ROOT)))
    return subprocess.Popen([sys.executable, "-c", code, str(target), mode, str(crash_at)])


@pytest.mark.subprocess
@pytest.mark.parametrize("mode", ["exchange", "fallback"])
def test_replacing_survives_a_crash_between_any_two_steps(tmp_path, mode):
    target = tmp_path / "m.edgert"
    assert _start(target, mode).wait() == 0
    previous = _generation(target)
    crashed = 0
    for crash_at in (1, 2, 3, 4):
        crashed += _start(target, mode, crash_at).wait() == 9
        atomic.recover(target)  # what every later write (and a bundle open) does first
        now = _generation(target)
        assert now in (previous, 100 + crash_at)  # the old or the new folder, never nothing
        previous = now
    assert crashed >= 2  # the crash points were really reached
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []


@pytest.mark.subprocess
def test_replacing_survives_sigkill_at_random_moments(tmp_path):
    target = tmp_path / "m.edgert"
    assert _start(target, "exchange").wait() == 0
    rng = np.random.default_rng(0)
    for _ in range(12):
        proc = _start(target, "loop")
        time.sleep(0.15 + rng.uniform(0, 0.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert _generation(target) >= 100  # loadable at every moment
    with atomic.staged_directory(target) as stage:  # the next write cleans dead writers' leftovers
        (stage / "manifest.json").write_text('{"generation": 0}')
    assert [p.name for p in tmp_path.iterdir()] == ["m.edgert"]


@pytest.mark.subprocess
def test_stale_leftovers_of_a_dead_writer_are_cleaned_but_live_ones_kept(tmp_path):
    target = tmp_path / "m.edgert"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".m.edgert.{dead.pid}.abc.partial"
    stale.mkdir()
    live = tmp_path / f".m.edgert.{os.getppid()}.abc.partial"  # our parent is alive
    live.mkdir()
    with atomic.staged_directory(target) as stage:
        (stage / "f").write_text("x")
    assert not stale.exists() and live.exists()


@pytest.mark.subprocess
def test_a_bundle_missing_after_a_crash_is_put_back_on_open(tmp_path, tiny):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    aside = tiny.parent / f".{tiny.name}.{dead.pid}.xyz.old"
    os.replace(tiny, aside)  # the crash came right after "rename the old one aside"
    assert Bundle(tiny).manifest.name == "tiny"


def test_staged_directory_refuses_when_told_not_to_replace(tmp_path):
    target = tmp_path / "t"
    target.mkdir()
    with (
        pytest.raises(OutputError, match="already exists"),
        atomic.staged_directory(target, replace=False) as stage,
    ):
        (stage / "f").write_text("x")


@pytest.mark.subprocess
def test_export_triton_writes_only_what_is_ours(tmp_path, tiny):
    """Issue 28.2: other versions and the user's files in REPO/NAME survive; a file in the way that
    we did not write is refused unless --force; our own earlier files are replaced."""
    repo = tmp_path / "repo"
    model = repo / Bundle(tiny).manifest.name
    (model / "2").mkdir(parents=True)
    (model / "2" / "model.onnx").write_bytes(b"version two")
    (model / "README.md").write_text("mine")
    proc = run_cli("export-triton", tiny, "--repo", repo)
    assert proc.returncode == 0, proc.stderr
    assert "also holds version(s) 2" in proc.stdout
    assert (model / "2" / "model.onnx").read_bytes() == b"version two"
    assert (model / "README.md").read_text() == "mine"
    assert (model / "1" / "model.onnx").is_file() and (model / "config.pbtxt").is_file()
    # again: the files are ours, so they are replaced without --force
    assert run_cli("export-triton", tiny, "--repo", repo, "--max-batch", "2").returncode == 0
    assert "max_batch_size: 2" in (model / "config.pbtxt").read_text()
    # the user edits config.pbtxt: no longer ours
    (model / "config.pbtxt").write_text("# tuned by hand\n")
    proc = run_cli("export-triton", tiny, "--repo", repo)
    assert_user_error(proc, "config.pbtxt is not a file edgert export-triton wrote", "--force")
    assert (model / "config.pbtxt").read_text() == "# tuned by hand\n"
    assert run_cli("export-triton", tiny, "--repo", repo, "--force").returncode == 0
    assert "max_batch_size" in (model / "config.pbtxt").read_text()
    # another version folder of ours, next to the user's version 2
    assert run_cli("export-triton", tiny, "--repo", repo, "--version", "3").returncode == 0
    assert (model / "3" / "model.onnx").is_file() and (model / "1" / "model.onnx").is_file()
    assert (model / "2" / "model.onnx").read_bytes() == b"version two"
    assert not leftovers(model) or leftovers(model) == [".edgert-export.json"]


@pytest.mark.subprocess
def test_export_through_a_symlinked_bundle_keeps_the_link(tmp_path):
    """14: `export -o LINK` replaced the link with a folder and left a `.partial` link forever."""
    from tests.tiny import image_classifier

    first = classifier_bundle(tmp_path / "a")
    link = tmp_path / "current.edgert"
    link.symlink_to(first)
    onnx = image_classifier(tmp_path / "m.onnx")
    proc = run_cli("export", onnx, "-o", link, "--task", "classify")
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.path.realpath(link) == str(first)
    assert Bundle(link).manifest.name == "m"
    assert leftovers(tmp_path) == [] and leftovers(first.parent) == []


@pytest.mark.subprocess
def test_small_sentences(tmp_path, tiny):
    """14: `cache clear --key ""`, a BOM in a labels file, a missing EDGERT_SYSFS_ROOT, task
    segment on a classifier."""
    proc = run_cli("cache", "clear", tiny, "--key", "")
    assert_user_error(proc, "--key is empty")
    labels = tmp_path / "labels.txt"
    labels.write_bytes("\ufeffcat\ndog\nbird\n".encode())
    from edgert.export.describe import read_labels

    assert read_labels(labels) == ["cat", "dog", "bird"]
    proc = run_cli(
        "power", "--json", "--no-nvml", env={"EDGERT_SYSFS_ROOT": str(tmp_path / "nope")}
    )
    assert "EDGERT_SYSFS_ROOT" in json.loads(proc.stdout)["reason"]
    _edit_manifest(tiny, task="segment")
    img = tmp_path / "a.png"
    import cv2

    cv2.imwrite(str(img), np.zeros((16, 16, 3), np.uint8))
    assert_user_error(run_cli("run", tiny, img), "task segment reads per-pixel class scores")


@pytest.mark.subprocess
def test_a_bundle_file_that_is_a_fifo_or_a_device_is_refused_not_hashed(tmp_path):
    """The manifest reader's rule for every file the manifest records (round 6, the G14/G15
    siblings): verify_hash (a face bundle's INT8 networks, a build's FP32 model) hashed a FIFO
    waiting for ever and /dev/zero without end. In a subprocess with a time limit: one
    sentence each."""
    os.mkfifo(tmp_path / "fifo.onnx")
    (tmp_path / "zero.onnx").symlink_to("/dev/zero")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from edgert.runtime.bundle import verify_hash\n"
        "from edgert.runtime.errors import BundleError\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        verify_hash(Path(name), '0' * 64)\n"
        "    except BundleError as exc:\n"
        "        print(exc)\n"
    )
    files = [str(tmp_path / "fifo.onnx"), str(tmp_path / "zero.onnx")]
    proc = subprocess.run(
        [sys.executable, "-c", code, *files], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"{files[0]} is not a regular file (a FIFO): not a bundle file",
        f"{files[1]} is not a regular file (a character device): not a bundle file",
    ]
