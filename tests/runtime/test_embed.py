"""The embed task: encoders' vectors as typed results, the health check that refuses a constant,
a NaN and a collapsed encoder at load (and so at every swap, which loads the candidate the same
way), the swap check's measure, and the vectors' compact stored forms."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgert.runtime import embeddings
from edgert.runtime.errors import ModelError
from edgert.runtime.images import read_image
from edgert.runtime.results import Embedding, Result
from edgert.runtime.sample_data import ALL_PHOTOS, load_photo, photo_path
from edgert.runtime.tasks import TASK_SPECS, load_task_model
from tests.embed_models import SAID, encoder_bundle, reference


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("encoders")
    return {kind: encoder_bundle(root, kind) for kind in ("healthy", *SAID)}


def test_an_encoder_gives_one_unit_vector_per_image_with_its_raw_norm(bundles):
    with load_task_model(bundles["healthy"]) as model:
        image = load_photo("coffee")
        result = model(image)
        tensor, _ = model.preprocess(image)
    want = reference(tensor[None].astype(np.float64))[0]
    assert result.kind == "embedding" and result.task == "embed"
    e = result.embedding
    assert e.size == 8
    assert e.norm == pytest.approx(np.linalg.norm(want), rel=1e-5)
    np.testing.assert_allclose(e.vector, want / np.linalg.norm(want), atol=1e-5)
    assert np.linalg.norm(e.vector) == pytest.approx(1.0, abs=1e-6)
    record = json.loads(json.dumps(result.to_records()))
    assert record["size"] == 8 and len(record["vector"]) == 8
    assert record["norm"] == pytest.approx(e.norm, rel=1e-5)
    assert TASK_SPECS["embed"].lines(result) == [
        f"  vector: 8 values, norm {e.norm:.4f} (L2-normalised to 1 by edgert)"
    ]


def test_the_manifest_records_the_vectors_and_their_normalisation(bundles):
    manifest = json.loads((bundles["healthy"] / "manifest.json").read_text())
    assert manifest["task"] == "embed"
    assert manifest["embedding"]["size"] == 8
    assert manifest["embedding"]["normalized"].startswith("L2, after the graph, by edgert")


@pytest.mark.parametrize("kind", sorted(SAID))
def test_the_health_check_refuses_a_broken_encoder_at_load_in_one_sentence(bundles, kind):
    with pytest.raises(ModelError) as caught:
        load_task_model(bundles[kind])
    said = str(caught.value)
    assert said.startswith(SAID[kind]) and said.endswith("; refusing to load it")
    assert "\n" not in said and f"{len(ALL_PHOTOS)} probe photos" in said


def test_the_health_check_bounds_come_from_what_it_measures():
    rng = np.random.default_rng(0)
    spread_out = rng.standard_normal((20, 64))
    assert embeddings.why_unhealthy(spread_out, "x") is None
    near = np.ones((20, 64)) + 1e-3 * rng.standard_normal((20, 64))
    assert "nearly the same" in embeddings.why_unhealthy(near, "x")
    assert "same vector" in embeddings.why_unhealthy(np.ones((5, 4)), "x")
    assert "same vector" in embeddings.why_unhealthy(np.zeros((5, 4)), "x")
    bad = spread_out.copy()
    bad[3, 5] = np.inf
    assert embeddings.why_unhealthy(bad, "x").startswith(
        "the encoder returns NaN or infinite values for 1 of 20 x"
    )


def test_neighbours_and_recall_against_numpy():
    rng = np.random.default_rng(1)
    v, _ = embeddings.normalise(rng.standard_normal((30, 16)))
    idx, sims = embeddings.neighbours(v, v[:4], 5)
    full = v[:4].astype(np.float64) @ v.T.astype(np.float64)
    np.testing.assert_array_equal(idx, np.argsort(-full, axis=1)[:, :5])
    np.testing.assert_allclose(sims, -np.sort(-full, axis=1)[:, :5], atol=1e-6)
    assert embeddings.neighbour_recall(v, v, 5) == 1.0
    shuffled = v[rng.permutation(30)]
    assert embeddings.neighbour_recall(v, shuffled, 5) < 0.5
    labels = np.repeat(np.arange(3), 10)
    clustered = np.eye(3)[labels] + 0.01 * rng.standard_normal((30, 3))
    assert embeddings.label_recall(clustered, labels, 5) == 1.0


def test_the_swap_check_refuses_a_candidate_whose_vectors_are_of_another_space(bundles):
    from edgert.apps.swap.core import agreement, judge
    from edgert.apps.swap.options import SwapOptions

    images = [read_image(photo_path(p)) for p in ALL_PHOTOS]
    with load_task_model(bundles["healthy"]) as model:
        ref = [model(i) for i in images]
    same = agreement("embed", ref, ref)
    assert same["agreement"] == pytest.approx(1.0) and same["neighbours"] == 1.0
    assert judge("embed", same, SwapOptions(), "frames") is None
    rotation, _ = np.linalg.qr(np.random.default_rng(2).standard_normal((8, 8)))

    def moved(r):  # the same neighbours, in another space (a retrained encoder)
        v = (r.embedding.vector @ rotation).astype(np.float32)
        return Result("embedding", "embed", embedding=Embedding(v, r.embedding.norm))

    other = agreement("embed", ref, [moved(r) for r in ref])
    assert other["neighbours"] == 1.0 and other["agreement"] < 0.9
    why = judge("embed", other, SwapOptions(), "live frames")
    assert why.startswith("the candidate's vectors have a mean cosine of ")
    assert "to the model in use's on 7 live frames, under 0.90" in why
    shorter = [Result("embedding", "embed", embedding=Embedding(np.ones(4, np.float32) / 2, 1.0))]
    assert agreement("embed", ref[:1], shorter)["agreement"] == 0.0


@pytest.mark.parametrize(
    "form,size,tol", [("float32", 4, 0), ("float16", 2, 1e-3), ("int8", 1, 6e-3)]
)
def test_compact_forms_round_trip(form, size, tol):
    rng = np.random.default_rng(3)
    v, _ = embeddings.normalise(rng.standard_normal((1, 1280)))
    blob = embeddings.encode(v[0], form)
    assert len(blob) == 1 + size * 1280 + (4 if form == "int8" else 0)
    back = embeddings.decode(blob)
    assert back.dtype == np.float32 and back.shape == (1280,)
    assert np.abs(back - v[0]).max() <= tol
    assert float(back @ v[0]) / np.linalg.norm(back) > 0.9999
    with pytest.raises(ValueError, match="unknown vector form"):
        embeddings.encode(v[0], "bits")
    with pytest.raises(ValueError, match="unknown form 9"):
        embeddings.decode(b"\x09abc")
