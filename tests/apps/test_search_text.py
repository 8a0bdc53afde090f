"""Text search over the history with a CLIP-style pair the user brings (issue 70): a pair built
here - a word-level HF ``tokenizers`` tokenizer trained on a few words and saved as
tokenizer.json, a text tower ONNX (embedding lookup, mean over the context, MatMul) and the
tiny image tower of test_search_camera - is exported as one bundle (``--text-tower``,
``--tokenizer``); its ranking of stored tracks for a text, over real HTTP (the camera's routes,
and a real camera) and by ``edgert events query --text``, equals numpy's computed from the same
weights (cosine of the text's vector to the stored vectors). Bad input - an empty or too long
text, a bundle without a text tower, vectors of another model, no ``tokenizers`` - is one
sentence: 4xx on the API, exit 2 on the command line."""

from __future__ import annotations

import base64
import json
import shutil
import sqlite3
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgert.apps.camera.sinks import retention
from edgert.apps.store.records import row_of
from edgert.apps.store.writer import StoreWriter
from edgert.export.text_tower import TextTowerArgs
from edgert.runtime import embeddings
from edgert.runtime.errors import BundleError, ModelError
from edgert.runtime.events import Event
from tests.apps.test_search_camera import _call, render, tiny_image_embedder
from tests.conftest import assert_user_error, run_cli
from tests.ports import free_ports
from tests.procs import running
from tests.tiny import blob_detector_bundle

WORDS = (
    "person with a red bag blue car dog cat on the grass green photo of an empty street at night"
)
SPECIAL = ["[PAD]", "[UNK]", "[END]"]  # ids 0, 1, 2
L, HIDDEN, DIM = 8, 16, 48
CAMS = ["rtsp://door/1", "rtsp://yard/1"]


def tokenizer_file(path):
    """A word-level tokenizer trained on WORDS, its end token appended to every text."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([WORDS], trainers.WordLevelTrainer(special_tokens=SPECIAL))
    tok.post_processor = processors.TemplateProcessing(
        single="$A [END]", special_tokens=[("[END]", 2)]
    )
    tok.save(str(path))
    return Tokenizer.from_file(str(path))


def weights(dim: int = DIM, seed: int = 7):
    """The text tower's embedding table (the pad's row zero) and projection."""
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((len(WORDS.split()) + len(SPECIAL), HIDDEN)).astype(np.float32)
    table[0] = 0.0
    return table, rng.standard_normal((HIDDEN, dim)).astype(np.float32)


def text_tower(path, table, proj, length=L):
    """ids int64 [1, L] -> Gather(table) -> mean over the L positions -> MatMul(proj)."""
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["e"]),
            helper.make_node("ReduceMean", ["e"], ["m"], axes=[1], keepdims=0),
            helper.make_node("MatMul", ["m", "proj"], ["v"]),
        ],
        "tiny_text",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, length])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, proj.shape[1]])],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(proj, "proj")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def numpy_text(tok, table, proj, text: str) -> np.ndarray:
    """The text's unit vector computed here: the tokenizer's ids (short texts: no cut), the
    mean of their rows over the context (the pads' rows are zero), projected, normalised."""
    ids = tok.encode(text).ids
    assert len(ids) <= L
    v = table[ids].sum(axis=0) / L @ proj
    return v / np.linalg.norm(v)


def pair_bundle(folder, name: str, dim: int):
    """A pair of ``dim``-d vectors named ``name``: an image tower x [N, 3, 16, 16] -> Flatten ->
    MatMul (random), and the text tower and tokenizer above."""
    from edgert.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    w = rng.standard_normal((768, dim)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["f"]), helper.make_node("MatMul", ["f", "w"], ["v"])],
        "tiny_flat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, ["N", dim])],
        [numpy_helper.from_array(w, "w")],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        str(folder / "i.onnx"),
    )
    tokenizer_file(folder / "tokenizer.json")
    table, proj = weights(dim)
    given = TextTowerArgs(
        str(text_tower(folder / "t.onnx", table, proj)), str(folder / "tokenizer.json")
    )
    pre = {"resize": "stretch", "size": "16x16", "scale": 1 / 255}
    return export_model(
        str(folder / "i.onnx"),
        folder / f"{name}.edgert",
        name=name,
        task="embed",
        preprocess=pre,
        text_tower=given,
    ).bundle


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(bundle with a text tower, bundle without, tokenizer, table, proj)."""
    root = tmp_path_factory.mktemp("pair")
    tok = tokenizer_file(root / "tokenizer.json")
    table, proj = weights()
    onnx_path = text_tower(root / "text.onnx", table, proj)
    given = TextTowerArgs(str(onnx_path), str(root / "tokenizer.json"))
    with_text = tiny_image_embedder(root / "a", text_tower=given)
    without = tiny_image_embedder(root / "b")
    return with_text, without, tok, table, proj


def _store(path, vectors, model="tiny", t0=None):
    """A store of one track per vector (streams alternate; every third a dog), int8 vectors
    of ``model``; returns {track_id: stored unit vector as the store decodes it}."""
    t0 = t0 or time.time() - 600
    w = StoreWriter(path, retention.run_id(), CAMS, batch_s=0.01)
    rows, stored = [], {}
    for i, v in enumerate(vectors):
        base = {"stream": i % 2, "track_id": i + 1, "label": "dog" if i % 3 == 0 else "person"}
        blob = embeddings.encode(v, "int8")
        stored[i + 1] = embeddings.decode(blob)
        fields = {"secondary": model, "dim": len(v), "form": "int8", "how": "mean", "crops": 1}
        fields["vector"] = base64.b64encode(blob).decode()
        rows += [
            row_of({**base, "event": "track_start", "time": t0 + i}, CAMS),
            row_of(Event("track_embedding", i % 2, i + 1, t0 + i + 0.5, fields).to_record(), CAMS),
            row_of({**base, "event": "track_end", "time": t0 + i + 1}, CAMS),
        ]
    w.put(rows)
    w.close()
    return stored


def _ranking(stored: dict, q: np.ndarray, keep=lambda tid: True) -> list:
    """numpy's order of the track_ids by the cosine of their stored vectors to ``q``."""
    ids = [t for t in sorted(stored) if keep(t)]
    m = np.stack([stored[t] / np.linalg.norm(stored[t]) for t in ids])
    return [ids[i] for i in np.argsort(-(m @ q), kind="stable")]


def _vectors(tok, table, proj, n=30, seed=3):
    """Random unit vectors, and the first two near the vectors of two texts."""
    rng = np.random.default_rng(seed)
    v = embeddings.normalise(rng.standard_normal((n, DIM)))[0]
    for i, text in enumerate(("person with a red bag", "a dog on the grass")):
        near = numpy_text(tok, table, proj, text) + 0.05 * v[i]
        v[i] = near / np.linalg.norm(near)
    return v


def test_the_bundle_records_the_text_tower_and_refuses_a_tampered_or_unfit_one(pair, tmp_path):
    from edgert.runtime.text_tower import TextTower, token_ids

    with_text, _, tok, table, proj = pair
    m = json.loads((with_text / "manifest.json").read_text())
    assert m["text"] == {
        "model": "text.onnx",
        "tokenizer": "tokenizer.json",
        "tokenizer_kind": "hf-tokenizers",
        "context_length": L,
        "pad_id": 0,
        "end_id": 2,
        "normalized": False,
        "size": DIM,
        "input": "ids",
        "mask": None,
        "output": "v",
    }
    assert {"text.onnx", "tokenizer.json"} <= set(m["hashes"])
    tower = TextTower(with_text)
    for text in ("person with a red bag", "  A Dog on the GRASS ", "blue car"):
        assert np.allclose(
            tower.encode(text), numpy_text(tok, table, proj, text.strip()), atol=1e-5
        )
    ids, n = token_ids(tower.tokenizer, tower.spec, "a red car on the grass at night photo")
    assert n == L and ids.shape == (1, L) and ids[0, -1] == 2  # cut to L, the end id kept last
    ids, n = token_ids(tower.tokenizer, tower.spec, "red car")
    assert n == 3 and list(ids[0]) == [*tok.encode("red car").ids, 0, 0, 0, 0, 0]
    # a tampered tower is refused as a tampered model is
    import shutil

    copy = tmp_path / "copy.edgert"
    shutil.copytree(with_text, copy)
    data = bytearray((copy / "text.onnx").read_bytes())
    data[-1] ^= 1
    (copy / "text.onnx").write_bytes(bytes(data))
    with pytest.raises(BundleError, match="does not match the SHA-256"):
        TextTower(copy)
    # towers that do not fit are refused at export, nothing written
    folder = tmp_path / "unfit"
    folder.mkdir()
    small = text_tower(folder / "small.onnx", table, proj[:, :32])
    dead = text_tower(folder / "dead.onnx", table, np.zeros_like(proj))
    same = table.copy()
    same[1:] = same[3]  # every word the same row: every text the same vector
    alike = text_tower(folder / "alike.onnx", same, proj)
    for onnx_file, said in (
        (small, "vectors of 32 values; the image tower's have 48"),
        (dead, "zero, NaN or infinite vectors"),
        (alike, "the same vector for 4 different probe texts"),
    ):
        given = TextTowerArgs(str(onnx_file), str(with_text / "tokenizer.json"))
        with pytest.raises(ModelError, match=said):
            tiny_image_embedder(folder / onnx_file.stem, text_tower=given)
        assert not (folder / onnx_file.stem / "tiny.edgert").exists()


def _routes(path, secondaries):
    """A real web viewer serving the store's routes, the camera's embedders on its probes."""
    from edgert.apps.camera.sinks.web import HttpOutput
    from edgert.apps.store.routes import Routes
    from edgert.apps.telemetry.http import Probes

    probes = Probes()
    Routes(path).attach(probes)
    for s in secondaries:
        probes.embedders[s.name] = s.embed_image
        probes.text_embedders[s.name] = s
    return HttpOutput("127.0.0.1", 0, streams=1, probes=probes)


def _secondary(bundle):
    """The camera's own embedder object (apps/camera/features/secondary_models.Secondary)."""
    from edgert.apps.camera.features.secondary_models import Secondary
    from edgert.apps.camera.features.secondary_spec import SecondarySpec
    from edgert.runtime.tasks import load_task_model

    model = load_task_model(bundle, None, "onnxruntime", "auto", spin=False)
    return Secondary(SecondarySpec.parse(str(bundle)), model, model.engine.manifest.name)


def _search(port, **q):
    from urllib.parse import urlencode

    return _call(port, "GET", "/api/search?" + urlencode(q))


def test_api_text_search_ranks_as_numpy_over_http_and_refuses_bad_input(
    pair, tmp_path, monkeypatch
):
    with_text, without, tok, table, proj = pair
    stored = _store(tmp_path / "s.db", _vectors(tok, table, proj))
    embedder = _secondary(with_text)
    out = _routes(tmp_path / "s.db", [embedder])
    try:
        port = out.port
        assert _call(port, "GET", "/api/events?limit=1")[1]["features"] == ["search", "text"]
        assert _search(port, text=" ")[0] == 400 and embedder.text is None  # loaded when asked
        for text in ("person with a red bag", "a dog on the grass", "blue car at night"):
            status, found = _search(port, text=text, limit=30)
            assert status == 200 and found["model"] == "tiny", found
            got = [r["track"]["track_id"] for r in found["results"]]
            assert got == _ranking(stored, numpy_text(tok, table, proj, text)), text
            assert embedder.text is not None
        status, found = _search(port, text="person with a red bag", limit=3)
        assert [r["track"]["track_id"] for r in found["results"]][0] == 1
        assert found["results"][0]["similarity"] > 0.99
        status, found = _search(port, text="a dog on the grass", label="dog", camera=CAMS[1])
        q = numpy_text(tok, table, proj, "a dog on the grass")
        dogs = _ranking(stored, q, lambda t: (t - 1) % 3 == 0 and (t - 1) % 2 == 1)
        assert status == 200 and [r["track"]["track_id"] for r in found["results"]] == dogs
        for q, code, said in (
            ({"text": "   "}, 400, "the text to search for is empty"),
            ({"text": "red " * 100}, 400, "the text has 399 characters; at most 300"),
            ({"text": "red", "similar_to": "1"}, 400, "give text= or similar_to=, not both"),
            ({"text": "red", "model": "other"}, 400, "model 'other' is not an embedder"),
            ({"text": "red", "colour": "x"}, 400, "unknown filter 'colour'"),
        ):
            status, answer = _search(port, **q)
            assert (status, answer["error"][: len(said)]) == (code, said), (q, answer)
    finally:
        out.close()
    # the store's vectors are another model's: refused; a camera whose embedder has no text
    # tower; no tokenizers library
    _store(tmp_path / "o.db", _vectors(tok, table, proj), model="emb")
    for path, secondary, said, code in (
        (
            tmp_path / "o.db",
            with_text,
            "the store's vectors are of model emb, the text tower's of tiny",
            400,
        ),
        (tmp_path / "s.db", without, "the embedder tiny carries no text tower", 404),
    ):
        out = _routes(path, [_secondary(secondary)])
        try:
            features = _call(out.port, "GET", "/api/events?limit=1")[1]["features"]
            assert ("text" in features) == (secondary == with_text)
            status, answer = _search(out.port, text="red bag")
            assert status == code and answer["error"].startswith(said), answer
        finally:
            out.close()
    monkeypatch.setitem(__import__("sys").modules, "tokenizers", None)
    out = _routes(tmp_path / "s.db", [_secondary(with_text)])
    try:
        status, answer = _search(out.port, text="red bag")
        assert status == 400 and answer["error"] == (
            "text search needs the tokenizers library, which is not installed: "
            "pip install 'edgert[text]'"
        )
    finally:
        out.close()


@pytest.mark.subprocess
def test_events_query_text_ranks_as_numpy_and_refuses_bad_input(pair, tmp_path):
    with_text, without, tok, table, proj = pair
    stored = _store(tmp_path / "s.db", _vectors(tok, table, proj))
    text = "person with a red bag"
    proc = run_cli(
        "events", "query", tmp_path / "s.db", "--text", text, "--bundle", with_text, "--json"
    )
    assert proc.returncode == 0, proc.stderr
    got = [r["track"]["track_id"] for r in json.loads(proc.stdout)["results"]]
    assert got == _ranking(stored, numpy_text(tok, table, proj, text))[:20]
    proc = run_cli(
        "events", "query", tmp_path / "s.db", "--text", text, "--bundle", with_text, "--limit", "2"
    )
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "2 track(s) by model tiny"
    _store(tmp_path / "o.db", _vectors(tok, table, proj), model="emb")
    # a camera names its embedder after the bundle's file (pair-v2.edgert: pair-v2), or name=
    # (emb): the command reads the same name from --bundle, or --model
    copy = tmp_path / "pair-v2.edgert"
    (shutil.copytree if Path(with_text).is_dir() else shutil.copy)(with_text, copy)
    _store(tmp_path / "v2.db", _vectors(tok, table, proj), model="pair-v2")
    for store, more in (
        ("v2.db", ("--bundle", copy)),
        ("o.db", ("--bundle", with_text, "--model", "emb")),
    ):
        proc = run_cli("events", "query", tmp_path / store, "--text", text, *more, "--json")
        assert proc.returncode == 0, proc.stderr
        got = [r["track"]["track_id"] for r in json.loads(proc.stdout)["results"]]
        assert got == _ranking(stored, numpy_text(tok, table, proj, text))[:20]
    shadow = tmp_path / "shadow" / "tokenizers"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed here')\n")
    s, o = tmp_path / "s.db", tmp_path / "o.db"
    for store, args, said, env in (
        (s, ("--text", "", "--bundle", with_text), "the text to search for is empty", None),
        (s, ("--text", "x" * 301, "--bundle", with_text), "the text has 301 characters", None),
        (s, ("--text", "red"), "--text needs --bundle", None),
        (s, ("--text", "red", "--bundle", without), "carries no text tower", None),
        (
            o,
            ("--text", "red", "--bundle", with_text),
            "vectors of another model do not compare",
            None,
        ),
        (
            s,
            ("--text", "red", "--bundle", with_text),
            "pip install 'edgert[text]'",
            {"PYTHONPATH": str(shadow.parent)},
        ),
    ):
        proc = run_cli("events", "query", store, *args, env=env)
        assert_user_error(proc, said)


def _stored(store) -> dict:
    conn = sqlite3.connect(store)
    try:
        rows = conn.execute("SELECT track, vector FROM embeddings WHERE model = 'tiny'")
        return {t: bytes(v) for t, v in rows}
    finally:
        conn.close()


@pytest.mark.subprocess
def test_a_camera_s_embedder_with_a_text_tower_answers_text_over_http(pair, tmp_path):
    with_text, _, tok, table, proj = pair
    det = blob_detector_bundle(tmp_path / "det")
    a, b = render(tmp_path / "a.mp4"), render(tmp_path / "b.mp4", 15)
    port = free_ports(1)[0]
    store = tmp_path / "s.db"
    app = running(
        *("camera", det, "--source", a, "--source", b, "--loop", "--headless"),
        *("--conf", "0.6", "--secondary", with_text, "--store", f"{store}?batch_s=0.2"),
        *("--output", f"http://127.0.0.1:{port}", "--duration", "90"),
    )
    try:
        deadline, page = time.monotonic() + 70, {}
        while time.monotonic() < deadline:
            try:
                page = _call(port, "GET", "/api/events?limit=200")[1]
                if len({e["track"] for e in page["events"] if e["kind"] == "track_embedding"}) >= 4:
                    break
            except (OSError, ValueError, KeyError, TypeError):
                pass
            time.sleep(0.5)
        assert "text" in page.get("features", []), page.get("features")
        text = "a red car on the grass"
        q = numpy_text(tok, table, proj, text)
        for _ in range(10):  # the store read before and after the answer: the same vectors
            before = _stored(store)
            status, found = _search(port, text=text, limit=200)
            if before == _stored(store):
                break
        assert status == 200 and len(found["results"]) >= 4, found
        stored = {t: embeddings.decode(blob) for t, blob in before.items()}
        # numpy's ranking; the same object's tracks (the looped video's) have the same vector,
        # so ties are in either order: each track's similarity is numpy's cosine, best first
        got = [r["track"]["id"] for r in found["results"]]
        sims = [r["similarity"] for r in found["results"]]
        assert set(got) == set(stored) and sims == sorted(sims, reverse=True)
        cosines = [float(stored[t] @ q / np.linalg.norm(stored[t])) for t in got]
        assert np.allclose(sims, cosines, atol=2e-4), (sims, cosines)
        want = [
            round(float(stored[t] @ q / np.linalg.norm(stored[t])), 4) for t in _ranking(stored, q)
        ]
        assert sims == pytest.approx(want, abs=2e-4)
    finally:
        app.terminate()
        app.communicate(timeout=60)


@pytest.mark.subprocess
def test_edgert_export_takes_the_text_tower_and_its_tokenizer(pair, tmp_path):
    with_text, _, tok, table, proj = pair
    image = tmp_path / "i.onnx"
    image.write_bytes(next((with_text.parent).glob("tiny.onnx")).read_bytes())
    text, tokenizer = text_tower(tmp_path / "t.onnx", table, proj), with_text / "tokenizer.json"
    out = tmp_path / "pair.edgert"
    flags = ("--task", "embed", "--resize", "stretch", "--size", "16x16", "--scale", "0.00392")
    proc = run_cli(
        "export", image, "-o", out, *flags, "--text-tower", text, "--tokenizer", tokenizer
    )
    assert proc.returncode == 0, proc.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["text"]["context_length"] == L and m["text"]["end_id"] == 2
    assert (out / "text.onnx").read_bytes() == text.read_bytes()
    proc = run_cli("export", image, "-o", tmp_path / "x.edgert", *flags, "--text-tower", text)
    assert_user_error(proc, "--text-tower and --tokenizer go together")
    proc = run_cli(
        "export", image, "-o", tmp_path / "y.edgert", "--text-tower", text, "--tokenizer", tokenizer
    )
    assert_user_error(proc, "--text-tower goes beside an image tower")
    assert not (tmp_path / "y.edgert").exists()
