"""The engine cache: keys, atomic writes, and two processes building one key."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap

import pytest

from edgert.runtime.backends.plan_cache import PlanCache, PlanKey, bundle_shapes
from edgert.runtime.backends.plan_key import select_plan
from tests.conftest import run_cli

KEY = PlanKey(
    onnx_sha256="a" * 64,
    precision="int8",
    tensorrt="10.3.0.26",
    device_name="Orin",
    compute_capability="8.7",
    calibration_sha256="c" * 64,
    dla_core=None,
    shapes={"input": [[1, 3, 224, 224], [1, 3, 224, 224], [8, 3, 224, 224]]},
    builder={"workspace_bytes": None, "opt_level": None},
)


def test_key_is_stable_and_changes_with_every_ingredient():
    same = PlanKey(**dataclasses.asdict(KEY))
    assert same.digest == KEY.digest and len(KEY.digest) == 20
    changes = {
        "onnx_sha256": "b" * 64,
        "precision": "fp16",
        "tensorrt": "10.3.0.30",
        "device_name": "Xavier",
        "compute_capability": "7.2",
        "calibration_sha256": "d" * 64,
        "dla_core": 0,
        "shapes": {"input": [[1, 3, 224, 224]] * 3},
        "builder": {"workspace_bytes": 1 << 30, "opt_level": None},
    }
    digests = {KEY.digest}
    for field, value in changes.items():
        digests.add(dataclasses.replace(KEY, **{field: value}).digest)
    assert len(digests) == len(changes) + 1


BUILDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from edgert.runtime.backends.plan_cache import PlanCache
    from tests.quantize.test_plan_cache import KEY

    log = Path(sys.argv[2])

    def slow_build():
        with open(log, "a") as fh:
            fh.write("built\\n")
        time.sleep(1.0)  # long enough for the other process to arrive while this one builds
        return b"PLAN" * 1000

    path, built = PlanCache(sys.argv[1]).get_or_build(KEY, slow_build)
    print(path.name, built)
    """
)


@pytest.mark.subprocess
def test_two_processes_one_key_build_once(tmp_path):
    from tests.conftest import ROOT

    engines = tmp_path / "engines"
    log = tmp_path / "builds.log"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILDER, str(engines), str(log)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert log.read_text().count("built") == 1
    assert sorted(o[1] for o in outs) == ["False", "True"]
    plans = list(engines.glob("*.engine"))
    assert len(plans) == 1 and plans[0].read_bytes() == b"PLAN" * 1000
    # one record: the sidecar the cache wrote reads back as the key the plan was built for
    info = PlanKey.read(plans[0])
    assert info == KEY and info.digest == KEY.digest and plans[0].name == KEY.filename
    assert [p.name for p in engines.iterdir() if p.name.endswith(".tmp")] == []
    # what the cache wrote is what the runtime selects for that GPU and TensorRT, and nothing else
    assert select_plan(engines, "int8", "10.3.0.26", "Orin", "8.7")[0] == plans[0]
    assert select_plan(engines, "int8", "10.3.0.26", "NVIDIA H200", "9.0")[0] is None


@pytest.mark.subprocess
def test_cache_list_and_clear_cli(tmp_path):
    from edgert.export import export_model

    bundle = export_model("zoo:digits_cnn", tmp_path / "d.edgert").bundle
    PlanCache(bundle / "engines").get_or_build(KEY, lambda: b"x" * 2048)
    listed = run_cli("cache", "list", bundle)
    assert listed.returncode == 0 and "int8" in listed.stdout and "Orin (8.7)" in listed.stdout
    cleared = run_cli("cache", "clear", bundle)
    assert cleared.returncode == 0 and "removed 1 plan" in cleared.stdout
    assert list((bundle / "engines").glob("*.engine")) == []
    assert "no TensorRT plans" in run_cli("cache", "list", bundle).stdout


def test_bundle_shapes_from_the_recorded_batch_range(tmp_path):
    from edgert.export import export_model
    from edgert.runtime import Bundle

    bundle = export_model("zoo:digits_cnn", tmp_path / "d.edgert", max_batch=8).bundle
    shapes = bundle_shapes(Bundle(bundle).manifest)
    assert shapes == {"input": [[1, 1, 8, 8], [1, 1, 8, 8], [8, 1, 8, 8]]}
    assert bundle_shapes(Bundle(bundle).manifest, {"input": ((2, 1, 8, 8),) * 3}) == {
        "input": [[2, 1, 8, 8]] * 3
    }
    json.dumps(shapes)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--calib", "{tmp}/empty"], "holds no images"),
        (["--calib", "{tmp}/broken"], "fail to decode"),
        (["--calib", "{tmp}/few"], "only 3 usable samples"),
        (["--calib", "{tmp}/nope"], "does not exist"),
        (["--calib", "{tmp}/wrong.npz"], "model input input is [1, 1, 8, 8]"),
        (["--calib-size", "2"], "too small"),
    ],
)
def test_bad_calibration_input(tmp_path, args, fragment):
    import cv2
    import numpy as np

    from edgert.export import export_model
    from tests.conftest import assert_user_error

    bundle = export_model("zoo:digits_cnn", tmp_path / "d.edgert").bundle
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "a.jpg").write_bytes(b"not a jpeg")
    (tmp_path / "few").mkdir()
    for i in range(3):
        cv2.imwrite(str(tmp_path / "few" / f"{i}.png"), np.full((20, 20, 3), i * 40, np.uint8))
    np.savez(tmp_path / "wrong.npz", input=np.zeros((20, 3, 8, 8), np.float32))
    proc = run_cli("build", bundle, "--precision", "int8", *[a.format(tmp=tmp_path) for a in args])
    assert_user_error(proc, fragment)
    assert not (bundle / "model.int8.onnx").exists()


def test_ensure_plan_takes_its_precision_from_one_place(tmp_path):
    """Options of another precision than the one asked for are refused before anything runs
    (the cache key and the build would have disagreed)."""
    from edgert.runtime.backends.plan_cache import ensure_plan
    from edgert.runtime.backends.tensorrt_plan import BuildOptions
    from edgert.runtime.errors import EdgertError

    with pytest.raises(EdgertError, match="options are for fp16, not int8"):
        ensure_plan(tmp_path, "int8", options=BuildOptions(precision="fp16"))
    # and the options cannot be changed behind the key's back: they are frozen
    with pytest.raises(dataclasses.FrozenInstanceError):
        BuildOptions(precision="int8").precision = "fp16"


def test_one_plan_check_judges_deletes_and_says(tmp_path, monkeypatch):
    """plan_check.verify_plan is the one check of a plan against FP32 (the device's cosine
    judge, or the build's gate metrics): a failing plan is deleted with its sidecar and said in
    one sentence. TensorRT's run of the stored samples cannot happen here (no TensorRT on CI):
    what it returns is given, the judging and the deletion are what is tested."""
    import numpy as np

    from edgert.runtime.backends import plan_check
    from edgert.runtime.errors import GateFailed

    plan = tmp_path / "engines" / "int8-abc.engine"
    plan.parent.mkdir()
    ref = {"logits": np.random.default_rng(0).normal(size=(8, 10)).astype(np.float32)}

    def plan_returns(outputs):
        plan.write_bytes(b"PLAN")
        plan.with_suffix(".json").write_text("{}")
        monkeypatch.setattr(plan_check, "run_stored_samples", lambda b, p: (ref, outputs, 8))

    plan_returns({"logits": ref["logits"] * 1.01 + 0.001})
    check = plan_check.verify_plan(tmp_path, plan)
    assert check.samples == 8 and check.metrics["cosine"] > 0.999 and plan.exists()
    assert check.summary.endswith("vs FP32 on 8 stored samples")

    plan_returns({"logits": -ref["logits"]})
    with pytest.raises(GateFailed, match=r"differ from FP32: cosine -1.00000 < 0.99 on 8 stored"):
        plan_check.verify_plan(tmp_path, plan)
    assert not plan.exists() and not plan.with_suffix(".json").exists()

    # a plan that outputs nothing but zeros is not "cosine 1" (a zero-norm row is only equal to
    # a zero reference)
    plan_returns({"logits": np.zeros_like(ref["logits"])})
    with pytest.raises(GateFailed, match=r"cosine 0.00000 < 0.99"):
        plan_check.verify_plan(tmp_path, plan)
    assert not plan.exists()
    zeros = {"logits": np.zeros_like(ref["logits"])}
    monkeypatch.setattr(plan_check, "run_stored_samples", lambda b, p: (zeros, zeros, 8))
    plan.write_bytes(b"PLAN")
    assert plan_check.verify_plan(tmp_path, plan).metrics["cosine"] == 1.0

    # another judge (the build passes its gate's): its failures decide, the same deletion
    plan_returns({"logits": ref["logits"]})
    with pytest.raises(GateFailed, match="agreement 0.5 < 0.9"):
        plan_check.verify_plan(tmp_path, plan, lambda r, g: (["agreement 0.5 < 0.9"], "", {}))
    assert not plan.exists()

    monkeypatch.setattr(plan_check, "run_stored_samples", lambda b, p: None)
    assert plan_check.verify_plan(tmp_path, plan) is None  # no stored samples: nothing judged


def test_a_plan_built_on_first_use_is_checked_as_edgert_build_checks_it(tmp_path, monkeypatch):
    """Engine.load's first-use build follows the same policy as edgert build
    (plan_check.build_checked_plan): a plan just built whose outputs differ from FP32 is deleted
    and the engine falls back, saying why. Building and running a plan need TensorRT, absent
    here: the cache's build and the plan's run of the samples are given; the policy is tested."""
    import numpy as np

    from edgert.runtime import engine
    from edgert.runtime.backends import plan_cache, plan_check

    plan = tmp_path / "engines" / "fp16-abc.engine"
    ref = {"logits": np.random.default_rng(1).normal(size=(4, 10)).astype(np.float32)}

    def built(bundle_dir, precision, device=0, options=None):
        plan.parent.mkdir(exist_ok=True)
        plan.write_bytes(b"PLAN")
        plan.with_suffix(".json").write_text("{}")
        return plan, True, None

    monkeypatch.setattr(plan_cache, "ensure_plan", built)
    target = engine.Target(tmp_path, bundle_dir=tmp_path)
    monkeypatch.setattr(
        plan_check, "run_stored_samples", lambda b, p: (ref, {"logits": -ref["logits"]}, 4)
    )
    got, why = engine._build_on_first_use(target, "fp16", 0, "no plan for this GPU")
    assert got is None and "building one failed" in why and "differ from FP32" in why
    assert not plan.exists() and not plan.with_suffix(".json").exists()

    monkeypatch.setattr(plan_check, "run_stored_samples", lambda b, p: (ref, ref, 4))
    got, why = engine._build_on_first_use(target, "fp16", 0, "no plan for this GPU")
    assert got == plan and plan.exists() and "cosine 1.00000 vs FP32 on 4 stored samples" in why


@pytest.mark.subprocess
def test_plans_go_to_the_node_s_folder_and_leave_the_bundle_alone(tmp_path, monkeypatch):
    """EDGERT_PLAN_DIR (the Helm chart's hostPath, issue 54): a bundle mounted read-only keeps
    its plans in that folder's subfolder named as the bundle (the bundle's files are not
    touched), `edgert cache` reads them there, and plans of another JetPack's TensorRT or
    another module sit beside them, never in their place (their names digest different keys)."""
    from edgert.export import export_model
    from edgert.runtime import Bundle

    bundle = export_model("zoo:digits_cnn", tmp_path / "d.edgert").bundle
    before = sorted(p.relative_to(bundle) for p in bundle.rglob("*"))
    plans = tmp_path / "node" / "plans"
    monkeypatch.setenv("EDGERT_PLAN_DIR", str(plans))
    where = Bundle(bundle).engines_dir
    model_sha = json.loads((bundle / "manifest.json").read_text())["hashes"]["model.onnx"]
    assert where == plans / f"d.edgert-{model_sha[:12]}"
    jp6 = PlanCache(where).get_or_build(KEY, lambda: b"x" * 2048)[0]
    jp5 = dataclasses.replace(KEY, tensorrt="8.5.2.2")
    other = dataclasses.replace(KEY, module="nvidia,p3767-0005")
    names = {PlanCache(where).get_or_build(k, lambda: b"y" * 1024)[0].name for k in (jp5, other)}
    assert len(names | {jp6.name}) == 3 and jp6.read_bytes() == b"x" * 2048
    listed = run_cli("cache", "list", bundle)
    assert listed.returncode == 0 and listed.stdout.count("Orin (8.7)") == 3, listed.stdout
    assert sorted(p.relative_to(bundle) for p in bundle.rglob("*")) == before
    monkeypatch.delenv("EDGERT_PLAN_DIR")
    assert "no TensorRT plans" in run_cli("cache", "list", bundle).stdout


def test_the_tensorrt_backend_looks_for_plans_where_the_cache_puts_them(tmp_path, monkeypatch):
    """With EDGERT_PLAN_DIR, `Engine.load`'s plan selection reads the same folder the cache and
    `edgert build` write (it read the bundle's engines/ before: a cached plan was never found
    and every start built one again). TensorRT and CUDA are stand-ins here: the question is
    only which folder ``select`` reads."""
    from types import SimpleNamespace

    from edgert.export import export_model
    from edgert.runtime import device, engine
    from edgert.runtime.backends import plan_key, tensorrt

    bundle = export_model("zoo:digits_cnn", tmp_path / "d.edgert").bundle
    monkeypatch.setenv("EDGERT_PLAN_DIR", str(tmp_path / "plans"))
    target = engine._resolve(bundle)[0]
    folder = tmp_path / "plans" / f"d.edgert-{target.onnx_hashes['model.onnx'][:12]}"
    assert target.engines_dir == folder
    gpu = SimpleNamespace(name="Orin", cc=(8, 7), multiprocessors=8)
    monkeypatch.setattr(tensorrt, "import_tensorrt", lambda: SimpleNamespace(__version__="10.3.0"))
    monkeypatch.setattr(device, "probe_cuda", lambda: SimpleNamespace(devices=[gpu]))
    monkeypatch.setattr(device, "jetson_module", lambda: None)
    read = []
    monkeypatch.setattr(
        plan_key, "select_plan", lambda folder, *a, **k: (read.append(folder), (None, "none"))[1]
    )
    tensorrt.TensorRTBackend.select(target, "fp16", 0)
    assert read == [folder]
    (tmp_path / "plans" / "d.edgert").mkdir(parents=True)  # an older edgert's: read after
    tensorrt.TensorRTBackend.select(target, "fp16", 0)
    assert read[1:] == [folder, tmp_path / "plans" / "d.edgert"]
    monkeypatch.delenv("EDGERT_PLAN_DIR")
    tensorrt.TensorRTBackend.select(engine._resolve(bundle)[0], "fp16", 0)
    assert read[-1] == bundle / "engines"


def _shared_plans(tmp_path, monkeypatch):
    """Two bundles both named model.edgert (a/ and b/, different models) under one
    EDGERT_PLAN_DIR, as the review's G10 set it up: each one's plan in its own folder, and in the
    folder named as the bundle alone (an older edgert's, shared by both) a's plan, b's plan with
    an older sidecar (no ``bundle``, the model file's hash only), a file without a sidecar, a link
    to a file outside, and a plan whose sidecar is a FIFO."""
    import os

    from edgert.runtime import Bundle
    from edgert.runtime.backends.plan_cache import owner_of
    from tests.tiny import classifier_bundle

    a = Bundle(classifier_bundle(tmp_path / "a", name="model", size=16))
    b = Bundle(classifier_bundle(tmp_path / "b", name="model", size=24))
    shared = tmp_path / "shared"
    monkeypatch.setenv("EDGERT_PLAN_DIR", str(shared))
    assert a.engines_dir != b.engines_dir and a.engines_dir.parent == shared
    old = shared / "model.edgert"
    own = {"bundle": owner_of(b)}
    own_a = {"bundle": owner_of(a)}
    plans = {
        "b": PlanCache(b.engines_dir).get_or_build(KEY, lambda: b"b" * 64, own)[0],
        "a": PlanCache(a.engines_dir).get_or_build(KEY, lambda: b"a" * 64, own_a)[0],
        "a-old": PlanCache(old).get_or_build(KEY, lambda: b"a" * 64, own_a)[0],
    }
    b_sha = b.manifest.hashes["model.onnx"]
    older = dataclasses.replace(KEY, onnx_sha256=b_sha, precision="fp16")
    plans["b-old"] = PlanCache(old).get_or_build(older, lambda: b"o" * 64)[0]
    (old / "notes.engine").write_text("my notes")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.engine").write_text("precious")
    (old / "link.engine").symlink_to(victim / "precious.engine")
    (old / "p.engine").write_text("x")
    os.mkfifo(old / "p.json")
    return a, b, plans, old


@pytest.mark.subprocess
def test_cache_clear_in_a_shared_plan_folder_removes_only_this_bundle_s_plans(
    tmp_path, monkeypatch
):
    """Round 6, G10 and G14: with EDGERT_PLAN_DIR, `edgert cache clear b/model.edgert` removed
    a/model.edgert's plans (one folder for both), a file without a sidecar and a link; a FIFO
    sidecar hung `cache list`. Now each bundle has a folder of its own (name and model hash),
    and clear removes only regular plans with edgert's sidecar built for b (in its folder and
    in the old shared one), says what it left, and list shows the FIFO sidecar as such."""
    a, b, plans, old = _shared_plans(tmp_path, monkeypatch)
    env = {"EDGERT_PLAN_DIR": str(tmp_path / "shared")}
    listed = run_cli("cache", "list", b.path, env=env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "(its sidecar is not a regular file (a FIFO))" in listed.stdout, listed.stdout
    assert "notes.engine" in listed.stdout and "(no sidecar)" in listed.stdout
    cleared = run_cli("cache", "clear", b.path, "--json", env=env, timeout=60)
    assert cleared.returncode == 0, cleared.stderr
    said = json.loads(cleared.stdout)
    assert sorted(said["removed"]) == sorted([plans["b"].name, plans["b-old"].name])
    assert said["left"] == {
        plans["a-old"].name: "another bundle's plan",
        "link.engine": "a link",
        "notes.engine": "no sidecar",
        "p.engine": "its sidecar is not a regular file (a FIFO)",
    }
    assert not plans["b"].exists() and not plans["b-old"].exists()
    assert plans["a"].read_bytes() == plans["a-old"].read_bytes() == b"a" * 64
    assert (old / "link.engine").is_symlink() and (old / "notes.engine").exists()
    assert (tmp_path / "victim" / "precious.engine").read_text() == "precious"
    text = run_cli("cache", "clear", b.path, env=env, timeout=60).stdout
    assert text.startswith("removed 0 plan(s)\nleft 4 file(s) that are not this bundle's plans")


@pytest.mark.subprocess
def test_plan_selection_reads_no_fifo_or_device_as_a_sidecar(tmp_path):
    """Round 6, G14: `select_plan` (a TensorRT load's plan choice) read a FIFO sidecar for ever
    and a /dev/zero one until memory ran out. In a subprocess with a time limit: it now passes
    over them (a plan of unknown origin is never selected) and picks the good plan beside them."""
    import os

    engines = tmp_path / "engines"
    good = PlanCache(engines).get_or_build(KEY, lambda: b"x" * 64)[0]
    for name, sidecar in (("fifo", None), ("zero", "/dev/zero")):
        (engines / f"{name}.engine").write_bytes(b"y")
        if sidecar is None:
            os.mkfifo(engines / f"{name}.json")
        else:
            (engines / f"{name}.json").symlink_to(sidecar)
    code = textwrap.dedent(f"""
        from pathlib import Path
        from edgert.runtime.backends.plan_key import select_plan
        print(select_plan(Path({str(engines)!r}), "auto", "10.3.0.26", "Orin", "8.7")[0])
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == str(good), proc.stderr


def test_a_plan_is_read_only_from_a_regular_file(tmp_path):
    """The plan file itself (tensorrt.py read it with read_bytes(), a FIFO blocking, /dev/zero
    never ending): a regular file, a link to one included, is read; anything else is one
    sentence."""
    import os

    from edgert.runtime.backends.plan_key import read_plan
    from edgert.runtime.errors import ModelError

    (tmp_path / "ok.engine").write_bytes(b"plan")
    (tmp_path / "link.engine").symlink_to(tmp_path / "ok.engine")
    assert read_plan(tmp_path / "ok.engine") == read_plan(tmp_path / "link.engine") == b"plan"
    os.mkfifo(tmp_path / "fifo.engine")
    (tmp_path / "zero.engine").symlink_to("/dev/zero")
    for name, kind in (("fifo", "a FIFO"), ("zero", "a character device")):
        with pytest.raises(
            ModelError, match=f"is not a regular file \\({kind}\\): not a TensorRT plan"
        ):
            read_plan(tmp_path / f"{name}.engine")


@pytest.mark.subprocess
def test_cache_prints_a_plan_folder_s_newline_escaped(tmp_path):
    """Round 6, G22: EDGERT_PLAN_DIR holding a newline was printed raw (a second line)."""
    from tests.tiny import classifier_bundle

    bundle = classifier_bundle(tmp_path / "m")
    proc = run_cli("cache", "list", bundle, env={"EDGERT_PLAN_DIR": str(tmp_path / "a\nb")})
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1, proc.stdout
    assert "a\\nb" in proc.stdout
