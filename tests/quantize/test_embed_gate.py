"""The build's gate for encoders (the embed task): the quantized model's neighbours against
FP32's on the hold-out, the cosine of each vector to FP32's, the vectors' spread; an FP32
encoder that fails the health check is refused before anything is written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgert.quantize import gate
from edgert.runtime.errors import ModelError
from edgert.runtime.sample_data import ALL_PHOTOS, load_photo
from tests.embed_models import SAID, encoder_bundle


def _crops(path, n: int = 160, size: int = 48, seed: int = 0) -> str:
    """Random crops of the bundled photos, uint8 images in an .npz (calibration and hold-out)."""
    rng = np.random.default_rng(seed)
    photos = [load_photo(p) for p in ALL_PHOTOS]
    out = []
    for _ in range(n):
        img = photos[rng.integers(len(photos))]
        y, x = rng.integers(0, img.shape[0] - size), rng.integers(0, img.shape[1] - size)
        out.append(img[y : y + size, x : x + size])
    np.savez(path, images=np.stack(out))
    return str(path)


def _clusters(seed: int = 0, n: int = 120, dim: int = 32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((12, dim))
    return centres[rng.integers(12, size=n)] + 0.6 * rng.standard_normal((n, dim))


def test_the_gate_measures_neighbours_cosine_and_spread():
    ref = _clusters()
    rules = gate.parse_gate(None)
    near = gate.evaluate({"v": ref}, {"v": ref + 1e-3 * np.ones_like(ref)}, "embed")
    assert near.metrics["neighbour_recall"] > 0.95 and near.passes(rules)
    assert near.metrics["cosine_min"] > 0.99 and near.metrics["spread"] > 0.5
    rng = np.random.default_rng(1)
    shuffled = gate.evaluate({"v": ref}, {"v": ref[rng.permutation(len(ref))]}, "embed")
    assert shuffled.metrics["neighbour_recall"] < 0.5
    assert any(f.startswith("neighbour_recall") for f in shuffled.failures(rules))
    flat = np.ones_like(ref) + 1e-4 * rng.standard_normal(ref.shape)
    collapsed = gate.evaluate({"v": ref}, {"v": flat}, "embed")
    assert any(f.startswith("spread 0.0000 < 0.01") for f in collapsed.failures(rules))
    with pytest.raises(ModelError, match=r"^FP32: the encoder's vectors are nearly the same"):
        gate.evaluate({"v": flat}, {"v": ref}, "embed")


def test_an_int8_encoder_is_built_when_it_keeps_fp32s_neighbours(tmp_path):
    from edgert.quantize import build

    bundle = encoder_bundle(tmp_path, "healthy")
    calib = _crops(tmp_path / "crops.npz")
    build(bundle, "int8", calib=calib, calib_size=100, holdout_size=60, prepare="none")
    q = json.loads((bundle / "manifest.json").read_text())["quantization"]["int8"]
    held = q["holdout"]
    assert q["passed"] and held["neighbour_recall"] >= 0.9 and held["cosine"] >= 0.99
    assert held["spread"] >= 0.01 and held["spread_fp32"] >= 0.01
    assert held["cosine_min"] <= held["cosine"]


@pytest.mark.parametrize("kind", sorted(SAID))
def test_a_broken_fp32_encoder_is_refused_at_build_in_one_sentence(tmp_path, kind):
    from edgert.quantize import build

    bundle = encoder_bundle(tmp_path, kind)
    before = (bundle / "manifest.json").read_text()
    calib = _crops(tmp_path / "crops.npz", n=60)
    if kind != "nan":  # FP16 is measured, not gated: a broken FP32 is refused all the same
        with pytest.raises(ModelError, match=f"^FP32: {SAID[kind]}"):
            build(bundle, "fp16", calib=calib, calib_size=30, holdout_size=30, no_engine=True)
        assert (bundle / "manifest.json").read_text() == before
    with pytest.raises(ModelError) as caught:
        build(bundle, "int8", calib=calib, calib_size=30, holdout_size=30, prepare="none")
    said = str(caught.value)
    # NaN: the calibration's own check says it first, before any range is measured
    want = "the FP32 model itself outputs NaN in 'v'" if kind == "nan" else f"FP32: {SAID[kind]}"
    assert said.startswith(want) and "\n" not in said, said
    assert (bundle / "manifest.json").read_text() == before
