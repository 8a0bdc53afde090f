"""``edgert export --uint8-input``: the preprocessing's arithmetic folded into the graph, the
runtime writing pixels as they are. Real models (PyTorch exported, ONNX built here), real ONNX
Runtime, the real photos: the folded bundle gives the float bundle's outputs, each through its
own preprocessing; a fold in the wrong channel order is caught before anything is written;
what cannot be folded is refused in one sentence."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgert.export import export_model
from edgert.export import uint8_input as u8
from edgert.runtime import ModelError, ParityError
from edgert.runtime.engine import Engine
from edgert.runtime.sample_data import ALL_PHOTOS, load_photo
from tests.conftest import run_cli

pytestmark = pytest.mark.subprocess

MEAN, STD = "0.485,0.456,0.406", "0.229,0.224,0.225"


def _outputs(bundle, photo):
    with Engine.load(bundle) as engine:
        x, _ = engine.preprocessing.apply(photo)
        return x, engine.infer(x[None])


def test_the_cli_writes_a_uint8_bundle_that_answers_as_the_float_one(tmp_path):
    model = "tests/export/models.py:SmallConv"
    common = ["--input-shape", "1x3x64x64", "--dynamic-batch", "--mean", MEAN, "--std", STD]
    proc = run_cli("export", model, *common, "-o", tmp_path / "f.edgert")
    assert proc.returncode == 0, proc.stderr
    # the same weights: the float bundle's ONNX, its preprocessing read from the metadata in it
    onnx_file = tmp_path / "f.edgert" / "model.onnx"
    proc = run_cli("export", onnx_file, "--uint8-input", "-o", tmp_path / "u.edgert")
    assert proc.returncode == 0, proc.stderr
    assert "input  input: uint8 [-1, 3, 64, 64]" in proc.stdout
    assert "uint8 input: the model normalises its pixels" in proc.stdout
    m = json.loads((tmp_path / "u.edgert" / "manifest.json").read_text())
    pre = m["preprocessing"]
    assert (pre["dtype"], pre["scale"], pre["mean"], pre["std"]) == ("uint8", 1, [0] * 3, [1] * 3)
    folded = m["export"]["uint8_input"]
    assert folded["folded"]["mean"] == [0.485, 0.456, 0.406] and folded["parity"]["passed"]
    assert {c["batch"] for c in folded["parity"]["cases"]} == {1, 3}  # dynamic: 1 and several
    for name in ALL_PHOTOS:
        photo = load_photo(name)
        xf, want = _outputs(tmp_path / "f.edgert", photo)
        xu, got = _outputs(tmp_path / "u.edgert", photo)
        assert xf.dtype == np.float32 and xu.dtype == np.uint8 and xu.nbytes * 4 == xf.nbytes
        np.testing.assert_allclose(got["output"], want["output"], rtol=1e-6, atol=1e-6)


def _nhwc_model(path, dtype=TensorProto.FLOAT, with_if=False):
    """[1, 32, 32, 3] in (NHWC), per-channel sums of the pixels out [1, 3] (so a mean or std
    applied on the wrong axis shows); ``with_if``: the input also read inside an If's branch."""
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["xf", "axes"], ["sums"], keepdims=0),
    ]
    inits = [helper.make_tensor("axes", TensorProto.INT64, [2], [1, 2])]
    outputs = [helper.make_tensor_value_info("sums", TensorProto.FLOAT, [1, 3])]
    if with_if:
        branch = helper.make_graph(
            [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0)],
            "branch",
            [],
            [helper.make_tensor_value_info("m", dtype, [])],
        )
        inits.append(helper.make_tensor("yes", TensorProto.BOOL, [], [True]))
        nodes.append(
            helper.make_node("If", ["yes"], ["top"], then_branch=branch, else_branch=branch)
        )
        outputs.append(helper.make_tensor_value_info("top", dtype, []))
    graph = helper.make_graph(
        nodes, "nhwc", [helper.make_tensor_value_info("x", dtype, [1, 32, 32, 3])], outputs, inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16])
def test_an_nhwc_model_is_normalised_per_channel_on_its_last_axis(tmp_path, dtype):
    src = _nhwc_model(tmp_path / "m.onnx", dtype, with_if=True)
    options = dict(preprocess={"mean": "0.1,0.5,0.9", "std": "0.2,0.3,0.4"}, task="generic")
    float_b = export_model(str(src), tmp_path / "f.edgert", **options).bundle
    result = export_model(str(src), tmp_path / "u.edgert", uint8_input=True, **options)
    assert result.manifest["preprocessing"]["layout"] == "NHWC"
    folded = onnx.load(result.bundle / "model.onnx")
    ops = [n.op_type for n in folded.graph.node]
    want = ["Cast", "Mul", "Sub", "Div"] + (["Cast"] if dtype == TensorProto.FLOAT16 else [])
    assert ops[: len(want)] == want
    assert folded.graph.input[0].type.tensor_type.elem_type == TensorProto.UINT8
    photo = load_photo("coffee")
    _, want_out = _outputs(float_b, photo)
    _, got = _outputs(result.bundle, photo)
    np.testing.assert_allclose(got["sums"], want_out["sums"], rtol=2e-3 if dtype == 10 else 1e-5)
    np.testing.assert_allclose(got["top"], want_out["top"], rtol=1e-3)  # the If's branch reads it


def test_a_fold_in_the_wrong_channel_order_is_caught_before_anything_is_written(
    tmp_path, monkeypatch
):
    src = _nhwc_model(tmp_path / "m.onnx")
    real = u8.fold_normalisation

    def channels_reversed(model, pre):  # the mean and std of the other channel order
        from dataclasses import replace

        return real(model, replace(pre, mean=pre.mean[::-1], std=pre.std[::-1]))

    monkeypatch.setattr(u8, "fold_normalisation", channels_reversed)
    with pytest.raises(ParityError, match="differs from the float model on real photos"):
        export_model(
            str(src),
            tmp_path / "u.edgert",
            uint8_input=True,
            task="generic",
            preprocess={"mean": "0.1,0.5,0.9", "std": "0.2,0.3,0.4"},
        )
    assert not (tmp_path / "u.edgert").exists()


def test_what_cannot_be_folded_is_refused_in_one_sentence(tmp_path):
    pair = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3, 8, 8]) for n in "ab"]
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        "two",
        pair,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "2.onnx"
    )
    two = run_cli("export", tmp_path / "2.onnx", "--uint8-input", "-o", tmp_path / "two.edgert")
    seq = run_cli(
        "export",
        "tests/export/models.py:TinyAttention",
        "--input-shape",
        "1x4x12",
        "--uint8-input",
        "-o",
        tmp_path / "seq.edgert",
    )
    for proc in (two, seq):
        assert proc.returncode != 0 and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "one image input; this one has 2 inputs" in two.stderr
    assert "takes an image input (4-D); input 'input' has 3 dimensions" in seq.stderr
    with pytest.raises(ModelError, match="records none"):  # a tensor model: no preprocessing
        export_model(
            str(_nhwc_model(tmp_path / "m.onnx")),
            tmp_path / "n.edgert",
            task="generic",
            uint8_input=True,
        )
    u = export_model(
        "tests/export/models.py:SmallConv",
        tmp_path / "u.edgert",
        input_shape="1x3x8x8",
        preprocess={"resize": "stretch"},
        uint8_input=True,
    ).bundle
    with pytest.raises(ModelError, match="in front of a float input; input 'input' is uint8"):
        export_model(str(u / "model.onnx"), tmp_path / "again.edgert", uint8_input=True)
    model = onnx.load(u / "model.onnx")
    with pytest.raises(ModelError, match="no uint8 pixel value"):
        from edgert.runtime import Preprocessing

        pre = Preprocessing(size=(8, 8), resize="letterbox", pad_value=114.5)
        u8.fold_normalisation(_float_again(model), pre)
    assert not (tmp_path / "again.edgert").exists()
    with pytest.raises(ModelError, match="zoo:mtcnn has several"):  # three networks
        export_model("zoo:mtcnn", tmp_path / "faces.edgert", uint8_input=True)
    assert not (tmp_path / "faces.edgert").exists()


def _float_again(model):
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT
    return model


def test_the_camera_finds_the_same_objects_with_a_uint8_detector(tmp_path):
    """A real detector (tests.tiny.blob_detector, letterboxed from its Ultralytics metadata) as
    a float and as a uint8 bundle, through ``edgert camera`` on the tracking tests' video: every
    frame's boxes, scores and tracks, and the line's counts, the same."""
    from tests.apps.test_tracking_camera import scene_video
    from tests.tiny import blob_detector

    onnx_path = blob_detector(tmp_path / "det.onnx", ultralytics=True)
    video = scene_video(tmp_path / "scene.mp4")
    got = {}
    for kind, fold in (("float", False), ("uint8", True)):
        b = export_model(str(onnx_path), tmp_path / f"{kind}.edgert", uint8_input=fold).bundle
        out = tmp_path / kind
        out.mkdir()
        proc = run_cli(
            "camera", b, "--source", video, "--headless", "--json", "--conf", "0.75",
            "--line", "door=160,0,160,240", "--jsonl", out / "frames.jsonl",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        lines = (out / "frames.jsonl").read_text().splitlines()[1:]
        got[kind] = (json.loads(proc.stdout), [json.loads(x) for x in lines])
    (fs, frames_f), (us, frames_u) = got["float"], got["uint8"]
    assert (
        json.loads((tmp_path / "uint8.edgert" / "manifest.json").read_text())["inputs"][0]["dtype"]
        == "uint8"
    )
    assert fs["streams"][0]["counts"] == us["streams"][0]["counts"]
    assert (
        fs["streams"][0]["counts"]["door"]["in"],
        fs["streams"][0]["counts"]["door"]["out"],
    ) == (1, 1)
    assert len(frames_f) == len(frames_u) > 60
    for a, b in zip(frames_f, frames_u, strict=True):
        assert [o.get("track_id") for o in a["results"]] == [
            o.get("track_id") for o in b["results"]
        ]
        for oa, ob in zip(a["results"], b["results"], strict=True):
            np.testing.assert_allclose(ob["box"], oa["box"], atol=1e-3)
            assert abs(ob["score"] - oa["score"]) < 1e-5


def test_a_model_that_takes_pixels_gets_them_as_they_are(tmp_path):
    """An ONNX of uint8 input brought as it is (no edgert metadata): the default preprocessing
    writes uint8 pixels, scale 1 (it wrote float32 x 1/255 before, which the engine refused)."""
    src = _nhwc_model(tmp_path / "u.onnx", TensorProto.UINT8)
    b = export_model(str(src), tmp_path / "p.edgert", preprocess={"resize": "stretch"}).bundle
    pre = json.loads((b / "manifest.json").read_text())["preprocessing"]
    assert (pre["dtype"], pre["scale"], pre["layout"]) == ("uint8", 1.0, "NHWC")
    photo = load_photo("rocket")
    x, out = _outputs(b, photo)
    assert x.dtype == np.uint8
    np.testing.assert_allclose(out["sums"][0], x.reshape(-1, 3).sum(0, dtype=np.float64), rtol=1e-6)


def test_bench_feeds_a_pixel_input_pixels(tmp_path):
    """``edgert bench``'s random inputs for a uint8 model span 0..255 (it fed 0 and 1)."""
    from edgert.apps.bench.config import make_inputs

    b = export_model(
        str(_nhwc_model(tmp_path / "m.onnx")), tmp_path / "u.edgert", uint8_input=True,
        preprocess={"resize": "stretch"},
    ).bundle  # fmt: skip
    with Engine.load(b) as engine:
        x = make_inputs(engine, 1)["x"]
        assert x.dtype == np.uint8 and x.min() < 16 and x.max() > 240
        assert engine.infer(x)["sums"].shape == (1, 3)
