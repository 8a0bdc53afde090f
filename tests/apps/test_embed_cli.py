"""``edgert run`` with encoders: each broken encoder refused in one sentence before any image
runs, and ``--gallery`` refused for a model that gives no vectors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgert.runtime import embeddings
from edgert.runtime.sample_data import ALL_PHOTOS, photo_path
from tests.conftest import assert_user_error, run_cli
from tests.embed_models import SAID, encoder_bundle
from tests.tiny import classifier_bundle


@pytest.mark.subprocess
@pytest.mark.parametrize("kind", sorted(SAID))
def test_run_refuses_a_broken_encoder_in_one_sentence(tmp_path, kind):
    bundle = encoder_bundle(tmp_path, kind)
    proc = run_cli("run", bundle, photo_path("coffee"))
    assert_user_error(proc, SAID[kind], "refusing to load it")
    assert proc.stdout == ""


@pytest.mark.subprocess
def test_gallery_neighbours_are_the_cosines_numpy_ranks(tmp_path):
    bundle = encoder_bundle(tmp_path, "healthy")
    gallery = photo_path("coffee").parent
    proc = run_cli("run", bundle, photo_path("rocket"), "--gallery", gallery, "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    from edgert.runtime.images import read_image
    from edgert.runtime.tasks import load_task_model

    with load_task_model(bundle) as model:
        query = model(read_image(photo_path("rocket"))).embedding.vector
        files = sorted(f for f in gallery.iterdir() if f.suffix == ".jpg")
        rows = np.stack([model(read_image(f)).embedding.vector for f in files])
    idx, sims = embeddings.neighbours(rows, query[None], 5)
    assert [n["image"] for n in record["neighbours"]] == [str(files[i]) for i in idx[0]]
    assert [n["similarity"] for n in record["neighbours"]] == pytest.approx(sims[0], abs=1e-5)
    assert record["neighbours"][0]["image"].endswith("rocket.jpg")
    assert len(files) == len(ALL_PHOTOS)


@pytest.mark.subprocess
def test_gallery_with_a_classifier_is_one_sentence(tmp_path):
    bundle = classifier_bundle(tmp_path)
    proc = run_cli("run", bundle, photo_path("coffee"), "--gallery", photo_path("coffee").parent)
    assert_user_error(proc, "--gallery ranks an encoder's vectors", "not a classification model")


@pytest.mark.subprocess
def test_a_file_name_with_a_newline_cannot_start_a_line_of_run_s_output(tmp_path):
    """A gallery's (or an image's) file name is the user's or someone else's: printed with its
    control characters escaped, so a name cannot forge a line of edgert run's text output."""
    import shutil

    bundle = encoder_bundle(tmp_path, "healthy")
    gallery = tmp_path / "gallery"
    gallery.mkdir()
    forged = "a\nforged 1.0000  line.jpg"
    shutil.copy(photo_path("coffee"), gallery / forged)
    shutil.copy(photo_path("coffee"), tmp_path / forged)
    proc = run_cli("run", bundle, tmp_path / forged, "--gallery", gallery)
    assert proc.returncode == 0, proc.stderr
    assert not any(line.startswith("forged") for line in proc.stdout.splitlines()), proc.stdout
    assert "a\\nforged" in proc.stdout
