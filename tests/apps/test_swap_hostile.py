"""Hot-swap against what a local user can put where bundles are (issue 46): a link re-pointed
outside ``--allow-models`` after the request was accepted, a model file linked outside, bundles
that differ only behind links, a manifest that is a FIFO or a device, a ``hashes`` key that
climbs out, ``"force": "false"``, a NUL in the path, request numbers, a burst of SIGHUPs and a
SIGHUP before the model is loaded. Real bundles (ONNX Runtime), real files, links and FIFOs, a
real camera process and real signals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from edgert.apps.swap.camera import Loaded, ModelSlot, SwapOptions, model_info
from edgert.runtime.bundle import Bundle
from edgert.runtime.errors import BundleError, ModelError
from tests.apps.test_hot_swap import Camera, _http
from tests.tiny import classifier_bundle


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-swap")
    allowed = root / "models"
    a = classifier_bundle(allowed / "a", name="a")
    b = classifier_bundle(allowed / "b", name="b", size=24)
    evil = classifier_bundle(root / "outside" / "evil", name="evil")
    return allowed, a, b, evil


def _copy(bundle: Path, to: Path) -> Path:
    shutil.copytree(bundle, to)
    return to


def test_the_identity_hashes_what_links_lead_to_and_reads_only_regular_files(bundles, tmp_path):
    allowed, a, b, evil = bundles
    # two bundles with one manifest whose model.onnx links lead to different models
    one, two = _copy(a, tmp_path / "one.edgert"), _copy(a, tmp_path / "two.edgert")
    (one / "model.onnx").unlink()
    (one / "model.onnx").symlink_to(a / "model.onnx")
    (two / "model.onnx").unlink()
    (two / "model.onnx").symlink_to(evil / "model.onnx")
    assert model_info(one)["hash"] == model_info(a)["hash"] != model_info(two)["hash"]
    # with --allow-models, a file whose link leads outside them is refused
    with pytest.raises(ModelError, match="leads outside the folders --allow-models names"):
        model_info(two, [str(tmp_path), str(a)])
    # a manifest that is a FIFO or a device: refused at once, never read
    fifo = _copy(a, tmp_path / "fifo.edgert")
    (fifo / "manifest.json").unlink()
    os.mkfifo(fifo / "manifest.json")
    zero = _copy(a, tmp_path / "zero.edgert")
    (zero / "manifest.json").unlink()
    (zero / "manifest.json").symlink_to("/dev/zero")
    for bad in (fifo, zero):
        t0 = time.monotonic()
        with pytest.raises(ModelError, match="manifest.json is not a regular file"):
            model_info(bad)
        with pytest.raises(BundleError):
            Bundle(bad)
        assert time.monotonic() - t0 < 2
    # a hashes key that names a path out of the bundle
    climb = _copy(a, tmp_path / "climb.edgert")
    manifest = json.loads((climb / "manifest.json").read_text())
    manifest["hashes"]["../../outside/model.onnx"] = "0" * 64
    (climb / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="not a file name of the bundle"):
        Bundle(climb)
    with pytest.raises(ModelError, match="not a file of the bundle"):
        model_info(climb)


def test_allow_models_is_checked_where_the_path_leads_at_the_swap(bundles, tmp_path):
    """A link inside the allowed folder when POSTed, re-pointed outside before the swap thread
    takes the request: refused then, with force too; nothing outside is ever loaded."""
    from edgert.runtime.tasks import load_task_model

    allowed, a, b, evil = bundles
    link = allowed / "current"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(b, target_is_directory=True)
    loaded_paths, said = [], []

    def load(path):
        loaded_paths.append(os.path.realpath(path))
        return load_task_model(Bundle(path))

    first = Loaded(load_task_model(Bundle(a)), model_info(a), str(a))
    slot = ModelSlot(
        first, load, SwapOptions(endpoint=True, allow=(str(allowed),)), say=said.append
    )
    try:
        code, body, _ = slot.http_post(json.dumps({"bundle": str(link), "force": True}).encode())
        assert code == 202, body
        link.unlink()
        link.symlink_to(evil, target_is_directory=True)  # moved while the request waited
        slot.start()
        deadline = time.monotonic() + 30
        while slot.refusals + slot.swaps == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert slot.refusals == 1 and slot.swaps == 0, said
        assert "outside the folders --allow-models names" in said[-1], said
        assert not any(p.startswith(str(evil.parent)) for p in loaded_paths), loaded_paths
        # the answers of the endpoint: booleans only, no NUL, numbers never repeated
        answers = [
            slot.http_post(json.dumps({"bundle": str(b), "force": f}).encode())
            for f in ("false", "0", 1)
        ]
        assert [c for c, _, _ in answers] == [400, 400, 400], answers
        assert b"JSON boolean" in answers[0][1]
        code, body, _ = slot.http_post(json.dumps({"bundle": str(b) + "\u0000x"}).encode())
        assert code == 400 and b"NUL" in body
        numbers = [
            json.loads(slot.http_post(json.dumps({"bundle": str(b)}).encode())[1])["request"]
            for _ in range(3)
        ]
        assert len(set(numbers)) == 3, numbers
    finally:
        slot.close()
        slot.current.close()
        link.unlink()


@pytest.mark.subprocess
def test_a_burst_of_sighups_leaves_the_camera_healthy_and_stoppable(bundles):
    """1000 SIGHUPs in a burst (the review's run deadlocked the main thread: /live failed,
    SIGTERM was ignored); then the camera answers /live, re-read the bundle, and stops on
    SIGTERM."""
    _, a, _, _ = bundles
    cam = Camera(a)
    for _ in range(1000):
        os.kill(cam.proc.pid, signal.SIGHUP)
    time.sleep(3.0)
    live = f"http://127.0.0.1:{cam.port}/live"
    assert _http("GET", live)[0] == 200
    m = cam.model()
    assert not m["busy"] and m["swaps"] == 0, m
    t0 = time.monotonic()
    summary = cam.stop()
    assert time.monotonic() - t0 < 15
    assert summary["frames_processed"] > 0


@pytest.mark.subprocess
def test_a_sighup_before_the_model_is_loaded_does_not_end_the_run(bundles, tmp_path):
    """SIGHUP has one meaning whatever the phase: sent while the camera is still starting (its
    sources open, the model not loaded yet), the run goes on and re-reads the bundle."""
    import subprocess

    from tests.conftest import ROOT
    from tests.procs import edgert

    _, a, _, _ = bundles
    proc = subprocess.Popen(
        edgert("camera", a, "--source", "synthetic://", "--headless", "--duration", "6"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("source"):  # sources open; the model loads next
            proc.send_signal(signal.SIGHUP)
            break
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "is the model in use (SIGHUP); nothing to swap" in out, "".join(lines) + out


def test_setting_clocks_keeps_the_meaning_the_run_gave_sighup(tmp_path):
    """The camera's ~19 s clock measurement took SIGHUP for "stop" (ClockSession's own handler)
    while the run had given it "read the bundle again": a run's handler now stays; a bench
    (SIGHUP left at its default) still stops and puts the clocks back; under nohup (SIGHUP
    ignored, as this suite may itself be run) it stays ignored."""
    from edgert.apps.swap.core import catch_hangups
    from edgert.runtime.power import clocks
    from tests.clock_plant import write_layout

    write_layout(tmp_path, "orin-jp5")
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        restore = catch_hangups()
        try:
            ours = signal.getsignal(signal.SIGHUP)
            with clocks.ClockSession(clocks.find(tmp_path), tmp_path) as s:
                s.set(gpu=s.candidates("gpu")[1])
                assert signal.getsignal(signal.SIGHUP) is ours
                os.kill(os.getpid(), signal.SIGHUP)  # counted, nothing raised
                time.sleep(0.05)
        finally:
            restore()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
        with clocks.ClockSession(clocks.find(tmp_path), tmp_path) as s:
            s.set(gpu=s.candidates("gpu")[1])
            assert signal.getsignal(signal.SIGHUP) is clocks._hangup
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        with clocks.ClockSession(clocks.find(tmp_path), tmp_path) as s:
            s.set(gpu=s.candidates("gpu")[1])
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before if before is not None else signal.SIG_DFL)
