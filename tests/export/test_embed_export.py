"""Export of encoders (the embed task): an ONNX graph or a PyTorch model cut at a named layer
(--embed-layer), and zoo:mobilenet_v2_embed, the ImageNet MobileNetV2's pooled features."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from edgert.export import export_model
from edgert.runtime.errors import ModelError
from edgert.runtime.sample_data import PHOTOS, load_photo
from edgert.runtime.tasks import load_task_model
from tests.conftest import assert_user_error, run_cli
from tests.embed_models import classifier, reference

PRE = {"resize": "stretch", "size": "16x16", "scale": 1 / 255}


def test_an_onnx_classifier_cut_at_a_tensor_is_an_encoder_of_that_tensor(tmp_path):
    src = classifier(tmp_path / "cls.onnx")
    out = export_model(str(src), tmp_path / "e.edgert", embed_layer="h", preprocess=dict(PRE))
    manifest = json.loads((out.bundle / "manifest.json").read_text())
    assert manifest["task"] == "embed" and manifest["labels"] is None
    assert manifest["outputs"] == [{"name": "h", "dtype": "float32", "shape": [-1, 8]}]
    assert manifest["embedding"]["size"] == 8 and manifest["embedding"]["layer"] == "h"
    # the cut graph's vector is the full graph's tensor "h", read from the full graph itself
    import onnx

    full = onnx.load(str(src))
    full.graph.output.append(onnx.helper.make_empty_tensor_value_info("h"))
    sess = ort.InferenceSession(full.SerializeToString(), providers=["CPUExecutionProvider"])
    with load_task_model(out.bundle) as model:
        image = load_photo("rocket")
        tensor, _ = model.preprocess(image)
        got = model(image).embedding
    want = sess.run(["h"], {"x": tensor[None]})[0][0]
    np.testing.assert_allclose(want, reference(tensor[None].astype(np.float64))[0], rtol=1e-4)
    assert got.norm == pytest.approx(float(np.linalg.norm(want)), rel=1e-5)
    np.testing.assert_allclose(got.vector, want / np.linalg.norm(want), atol=1e-5)


def test_a_layer_that_is_not_there_or_a_cut_for_another_task_is_one_sentence(tmp_path):
    src = str(classifier(tmp_path / "cls.onnx"))
    with pytest.raises(ModelError, match=r"--embed-layer 'hh' names no tensor .*'h'"):
        export_model(src, tmp_path / "a.edgert", embed_layer="hh", preprocess=dict(PRE))
    with pytest.raises(ModelError, match=r"--embed-layer cuts the model into an encoder"):
        export_model(src, tmp_path / "b.edgert", embed_layer="h", task="classify")
    assert not (tmp_path / "a.edgert").exists() and not (tmp_path / "b.edgert").exists()


def test_a_pytorch_model_cut_at_a_module_is_that_modules_output_with_parity(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 6, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(6, 3),
    ).eval()
    out = export_model(
        net, tmp_path / "t.edgert", input_shape="1x3x16x16", embed_layer="3", preprocess=dict(PRE)
    )
    assert out.parity.passed and out.manifest["outputs"][0]["shape"] == [1, 6]
    assert out.manifest["embedding"]["layer"] == "3"
    with load_task_model(out.bundle) as model:
        image = load_photo("chelsea")
        tensor, _ = model.preprocess(image)
        got = model(image).embedding
    with torch.no_grad():
        want = net[:4](torch.from_numpy(tensor[None])).numpy()[0]
    np.testing.assert_allclose(got.vector, want / np.linalg.norm(want), atol=1e-5)
    with pytest.raises(ModelError, match=r"names no module of the PyTorch model"):
        export_model(net, tmp_path / "u.edgert", input_shape="1x3x16x16", embed_layer="9")


@pytest.mark.subprocess
def test_zoo_mobilenet_v2_embed_and_run_with_a_gallery(tmp_path):
    bundle = tmp_path / "mnv2e.edgert"
    proc = run_cli("export", "zoo:mobilenet_v2_embed", "-o", bundle)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["outputs"][0]["shape"] == [1, 1280] and manifest["task"] == "embed"
    assert manifest["embedding"]["layer"] == "classifier.0" and manifest["parity"]["passed"]
    gallery = tmp_path / "gallery"
    gallery.mkdir()
    import cv2

    for name in PHOTOS:
        cv2.imwrite(str(gallery / f"{name}.png"), load_photo(name))
    flipped = tmp_path / "flipped_chelsea.png"
    cv2.imwrite(str(flipped), load_photo("chelsea")[:, ::-1])
    proc = run_cli("run", bundle, flipped, "--gallery", gallery, "--top-k", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    with load_task_model(bundle) as model:
        vectors = {n: model(load_photo(n)).embedding.vector for n in PHOTOS}
        query = model(load_photo("chelsea")[:, ::-1].copy()).embedding.vector
    sims = sorted(((float(v @ query), n) for n, v in vectors.items()), reverse=True)
    assert [n["image"] for n in record["neighbours"]] == [
        str(gallery / f"{n}.png") for _, n in sims[:2]
    ]
    assert [n["similarity"] for n in record["neighbours"]] == pytest.approx(
        [s for s, _ in sims[:2]], abs=1e-4
    )
    assert sims[0][1] == "chelsea"  # the cat, flipped, finds the cat first
    assert record["results"]["size"] == 1280
    text = run_cli("run", bundle, flipped, "--gallery", gallery, "--top-k", "1").stdout
    assert "vector: 1280 values, norm" in text
    assert f"nearest of {len(PHOTOS)} in {gallery}" in text and "chelsea.png" in text


@pytest.mark.subprocess
def test_the_cli_says_a_missing_layer_in_one_sentence(tmp_path):
    src = classifier(tmp_path / "cls.onnx")
    proc = run_cli("export", src, "--embed-layer", "nope", "--size", "16x16")
    assert_user_error(proc, "--embed-layer 'nope' names no tensor of the ONNX graph")
