"""The build's commit (quantize/staging.py) as one change: a crash at any step leaves the old
bundle or the new one, never a manifest naming a file that is missing or differs."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap

import pytest

# Run in a child process: it forks once per step of a commit. Each fork counts the file-system
# changes Python reports (audit events: every open for writing, link, rename, remove, mkdir,
# rmtree, and the look-up of renameat2 just before the folders trade places) and dies with
# os._exit (what kill -9 leaves: no cleanup, no finally) just before the k-th. The parent then
# opens the bundle as the runtime does and checks it, puts the original back, and goes on with
# k + 1 until a commit runs to its end.
CHILD = textwrap.dedent("""
    import json, os, shutil, sys
    from pathlib import Path

    from edgert.quantize import staging
    from edgert.runtime import atomic
    from edgert.runtime.bundle import Bundle, sha256_file

    bundle, pristine, plan = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
    if sys.argv[4] == "aside":  # a file system without RENAME_EXCHANGE: rename aside, then in
        atomic._exchange = lambda a, b: False
    files = {n: (None if d is None else d.encode()) for n, d in plan["files"].items()}
    CHANGES = {"os.rename", "os.link", "os.remove", "os.rmdir", "os.symlink", "os.mkdir",
               "os.chmod", "shutil.rmtree", "ctypes.dlsym"}

    def writes(args):
        mode = args[1] if len(args) > 1 else "r"
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        if isinstance(mode, str):
            return any(c in mode for c in "wax+")
        return bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))

    def state():
        b = Bundle(bundle)  # as the runtime opens it (a swapped-out folder is put back)
        for name, digest in b.manifest.hashes.items():
            if name == "source":
                continue
            assert (bundle / name).is_file(), f"the manifest names {name}, which is missing"
            assert sha256_file(bundle / name) == digest, f"{name} is not what the manifest says"
        return "new" if b.manifest.raw.get("note") == "new" else "old"

    seen, k = [], 1
    while True:
        pid = os.fork()
        if pid == 0:
            count = 0

            def hook(event, args):
                global count
                if event in CHANGES or (event == "open" and writes(args)):
                    count += 1
                    if count == k:
                        os._exit(9)

            sys.addaudithook(hook)
            staging.commit(bundle, plan["manifest"], files)
            os._exit(0)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        seen.append(state())
        if code == 0:
            gone = [n for n, d in plan["files"].items() if d is None and (bundle / n).exists()]
            assert not gone, gone
            break
        assert code == 9, code
        shutil.rmtree(bundle)
        shutil.copytree(pristine, bundle, symlinks=True)
        k += 1
    print(json.dumps(seen))
""")


def _plan(bundle) -> dict:
    """A commit as an INT8 build makes one: a new model file, calibration ranges in a subfolder,
    a replaced file, a removed one, and the manifest recording them."""
    from edgert.runtime.bundle import sha256_bytes

    manifest = json.loads((bundle / "manifest.json").read_text())
    files = {
        "model.int8.onnx": "int8 " * 1000,
        "calibration/ranges.json": '{"thresholds": {}}',
        "verify.npz": "new samples",
        "model.fp16.onnx": None,
    }
    hashes = {k: v for k, v in manifest["hashes"].items() if k != "model.fp16.onnx"}
    hashes.update({n: sha256_bytes(d.encode()) for n, d in files.items() if d is not None})
    return {"manifest": {**manifest, "hashes": hashes, "note": "new"}, "files": files}


@pytest.mark.subprocess
@pytest.mark.parametrize("swap", ["exchange", "aside"])
def test_a_crash_at_any_step_of_the_commit_leaves_the_old_or_the_new_bundle(tmp_path, swap):
    """Round 6, G21: the commit wrote .pending files, then the manifest, then renamed them; a
    kill -9 between the manifest and the renames left a manifest recording
    model.int8.fp16.onnx while only .model.int8.fp16.onnx.pending existed (3 of 10 kills).
    Killed before each of its steps in turn (and with the rename-aside route of a file system
    without RENAME_EXCHANGE), the bundle opens every time, every file its manifest names is
    there with its hash, and it is the old bundle until one step makes it the new one."""
    import shutil

    from edgert.quantize.staging import commit
    from edgert.runtime.bundle import sha256_bytes
    from tests.tiny import classifier_bundle

    bundle = classifier_bundle(tmp_path / "m", name="model")
    old = json.loads((bundle / "manifest.json").read_text())
    old["hashes"]["model.fp16.onnx"] = sha256_bytes(b"fp16")
    old["hashes"]["verify.npz"] = sha256_bytes(b"old samples")
    commit(bundle, old, {"model.fp16.onnx": b"fp16", "verify.npz": b"old samples"})
    (bundle / ".build.lock").touch()
    pristine = tmp_path / "pristine"
    shutil.copytree(bundle, pristine, symlinks=True)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(bundle), str(pristine), json.dumps(_plan(bundle)), swap],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout)
    assert len(seen) > 10 and seen[-1] == "new", seen
    switch = seen.index("new")  # one step makes it the new bundle, and it stays new
    assert set(seen[:switch]) == {"old"} and set(seen[switch:]) == {"new"}, seen
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".model.edgert.")]
    commit(bundle, _plan(bundle)["manifest"], {})  # the next write removes dead ones' stages
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".model.edgert.")] == [], leftovers


def test_the_commit_keeps_the_files_it_does_not_change_and_the_lock_it_holds(tmp_path):
    """What the new folder keeps of the old: every file the commit does not replace or remove,
    as the same file (hard links: no copy, no space), a link as a link, and the build lock as
    the very file this build holds (a waiting build keeps waiting on it)."""
    import os

    from edgert.quantize.staging import commit
    from tests.tiny import classifier_bundle

    bundle = classifier_bundle(tmp_path / "m", name="model")
    (bundle / "engines" / "p.engine").write_bytes(b"plan")
    (bundle / "notes.txt").symlink_to("model.onnx")
    lock = bundle / ".build.lock"
    lock.touch()
    before = {p: os.stat(bundle / p).st_ino for p in ("model.onnx", "engines/p.engine")}
    with open(lock) as held:
        plan = _plan(bundle)
        files = {n: (None if d is None else d.encode()) for n, d in plan["files"].items()}
        commit(bundle, plan["manifest"], files)
        assert os.fstat(held.fileno()).st_ino == os.stat(lock).st_ino
    assert {p: os.stat(bundle / p).st_ino for p in before} == before
    assert os.readlink(bundle / "notes.txt") == "model.onnx"
    assert (bundle / "model.int8.onnx").read_bytes() == files["model.int8.onnx"]
    assert json.loads((bundle / "manifest.json").read_text())["note"] == "new"


def _assert_whole(bundle) -> None:
    """The bundle opens, and every file its manifest records is there with its hash."""
    from edgert.runtime.bundle import Bundle, sha256_file

    b = Bundle(bundle)
    for name, digest in b.manifest.hashes.items():
        if name != "source":
            assert sha256_file(bundle / name) == digest, name


@pytest.mark.subprocess
def test_kill_9_the_moment_the_manifest_changes_leaves_a_whole_bundle(tmp_path):
    """The review's loop (G21), bounded: real `edgert build --precision int8` processes, the
    bundle's manifest.json polled every 0.2 ms and the build killed with SIGKILL the moment it
    changes (4 builds), and once at a fixed moment mid-build. Each time the bundle opens with
    every recorded file present and matching; the next build completes."""
    import os
    import signal
    import time

    import cv2
    import numpy as np

    from tests.conftest import run_cli
    from tests.tiny import classifier_bundle

    bundle = classifier_bundle(tmp_path / "m", name="k")
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for i in range(40):
        cv2.imwrite(str(images / f"{i:02d}.png"), rng.integers(0, 256, (20, 20, 3), np.uint8))
    args = [
        sys.executable,
        "-m",
        "edgert.apps",
        "build",
        str(bundle),
        "--precision",
        "int8",
        "--calib",
        str(images),
        "--calib-size",
        "32",
        "--prepare",
        "none",
        "--gate",
        "off",
        "--no-engine",
    ]
    manifest = bundle / "manifest.json"
    for trial in range(5):
        before = os.stat(manifest).st_mtime_ns
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        try:
            if trial < 4:
                while proc.poll() is None and time.monotonic() < deadline:
                    with contextlib.suppress(FileNotFoundError):
                        if os.stat(manifest).st_mtime_ns != before:
                            break
                    time.sleep(0.0002)
            else:
                time.sleep(1.5)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
        _assert_whole(bundle)
        # a new manifest differs each time: clear the INT8 record so the next build writes one
        if trial < 4:
            data = json.loads(manifest.read_text())
            data.pop("quantization", None)
            data["hashes"] = {k: v for k, v in data["hashes"].items() if "int8" not in k}
            from edgert.quantize.staging import commit

            commit(bundle, data, {"model.int8.onnx": None})
            _assert_whole(bundle)
    done = run_cli(*args[3:], timeout=120)
    assert done.returncode == 0, done.stderr
    _assert_whole(bundle)
    assert (bundle / "model.int8.onnx").is_file()
