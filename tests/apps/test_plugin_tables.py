"""Sources and sinks are plug-ins chosen through two tables (issue 34): a new kind is one module
and one row. A toy source scheme and a toy sink are added through the tables alone (a module on
sys.path and a row each, no edit elsewhere) and run through ``run_streams`` and ``run_camera``
with a real ONNX model; the same-file guard is checked for every scheme of both tables that
reads or writes files, taken from the tables themselves, not from a list kept beside them."""

from __future__ import annotations

import itertools
import json
import textwrap

import pytest

from edgert.apps.camera import CameraConfig, ModelOptions, RunOptions, SinkOptions, run_camera
from edgert.apps.camera.app import check_outputs_apart, run_streams
from edgert.apps.camera.sinks import SCHEMES as SINKS
from edgert.apps.camera.sinks import Scheme as SinkScheme
from edgert.apps.camera.sources import SCHEMES as SOURCES
from edgert.apps.camera.sources import Scheme as SourceScheme
from edgert.runtime.errors import OutputError
from edgert.runtime.tasks import load_task_model
from tests.tiny import classifier_bundle

TOY = '''
import json, time
from pathlib import Path

import numpy as np

from edgert.apps.camera.sinks import Sink
from edgert.apps.camera.sources import FrameSource


class Ramp(FrameSource):
    """ramp://N: N frames, frame i filled with the value i."""

    live = False

    def __init__(self, n):
        self.n, self.i, self.description, self.size = n, 0, f"ramp of {n}", (16, 16)

    def read(self):
        if self.i >= self.n:
            return None
        self.i += 1
        return np.full((16, 16, 3), self.i - 1, np.uint8), time.monotonic()

    def stats(self):
        return {"ramp_read": self.i}


def open_ramp(uri, opts):
    return Ramp(int(uri.split("://", 1)[1]))


class Tally(Sink):
    """tally://FILE: per frame, its stream, index and mean pixel; written at close."""

    draws = False
    takes_stats = True

    def __init__(self, path):
        self.path, self.rows, self.stats_seen = Path(path), [], 0

    def write(self, frame, image, record):
        self.rows.append([record["stream"], record["frame"], float(image.mean())])

    def stats(self, stats):
        self.stats_seen += 1

    def close(self):
        self.path.write_text(json.dumps(self.rows))

    def report(self):
        return {"output": "tally", "frames": len(self.rows)}


def open_tally(uri, ctx):
    return Tally(uri.split("://", 1)[1])


def tally_paths(uri, streams, mosaic):
    return [(f"--output {uri}", Path(uri.split("://", 1)[1]))]
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    (tmp_path / "toy_plugins.py").write_text(textwrap.dedent(TOY))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(SOURCES, "ramp", SourceScheme("ramp://N", "toy_plugins", "open_ramp"))
    monkeypatch.setitem(
        SINKS, "tally", SinkScheme("tally://FILE", "toy_plugins", "open_tally", paths="tally_paths")
    )
    return classifier_bundle(tmp_path / "model")


def test_a_toy_source_and_sink_run_through_the_tables_alone(toy, tmp_path):
    out = tmp_path / "tally.json"
    with load_task_model(toy) as model:
        summary = run_streams(model, ["ramp://7", "ramp://5"], sinks=[f"tally://{out}"])
    rows = json.loads(out.read_text())
    by_stream = {k: [r[1:] for r in rows if r[0] == k] for k in (0, 1)}
    # every frame of each stream, in order, with the pixels the source made (the clean frame)
    assert by_stream == {0: [[i, float(i)] for i in range(7)], 1: [[i, float(i)] for i in range(5)]}
    assert [s["ramp_read"] for s in summary["streams"]] == [7, 5]  # the source's own stats
    assert summary["outputs"] == [{"output": "tally", "frames": 12}]


def test_the_toy_sink_in_a_camera_run_and_its_file_guarded(toy, tmp_path):
    out = tmp_path / "tally.json"
    cfg = CameraConfig(
        ModelOptions(str(toy)),
        sources=["ramp://4"],
        sinks=[f"tally://{out}"],
        sink_options=SinkOptions(headless=True),
        run=RunOptions(max_frames=4),
    )
    summary = run_camera(cfg)
    assert len(json.loads(out.read_text())) == 4 and summary["frames_processed"] == 4
    clash = CameraConfig(
        ModelOptions(str(toy)), sources=["ramp://4"], sinks=[f"tally://{out}", f"jsonl://{out}"]
    )
    with pytest.raises(OutputError, match="would both write"):
        check_outputs_apart(clash)


def _source_uris(path) -> list[str]:
    """A URI of every source scheme that reads files, naming ``path``."""
    return [f"{name}://{path}" for name, s in SOURCES.items() if s.files] + [str(path)]


def _sink_uris(path) -> list[str]:
    """A URI of every sink scheme that writes files, naming ``path``."""
    return [f"{name}://{path}" for name, s in SINKS.items() if s.paths]


def test_every_sink_that_writes_files_is_kept_off_every_source_file(tmp_path):
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\0" * 64)  # only its identity matters: nothing is opened
    sinks, sources = _sink_uris(clip), _source_uris(clip)
    assert len(sinks) >= 3 and len(sources) >= 2  # file, jsonl, events; file:// and a bare path
    for src, sink in itertools.product(sources, sinks):
        cfg = CameraConfig(
            ModelOptions("m.edgert"),
            sources=[src],
            sinks=[sink],
            sink_options=SinkOptions(headless=True),
        )
        with pytest.raises(OutputError, match="which is the source"):
            check_outputs_apart(cfg)
    link = tmp_path / "link.mp4"
    link.symlink_to(clip)  # the same file by another name
    for sink in _sink_uris(link):
        cfg = CameraConfig(ModelOptions("m.edgert"), sources=[str(clip)], sinks=[sink])
        with pytest.raises(OutputError, match="which is the source"):
            check_outputs_apart(cfg)


def test_every_pair_of_file_sinks_is_kept_apart(tmp_path):
    target = tmp_path / "same.out"
    for a, b in itertools.combinations(_sink_uris(target), 2):
        cfg = CameraConfig(ModelOptions("m.edgert"), sources=["synthetic://"], sinks=[a, b])
        with pytest.raises(OutputError, match="would both write"):
            check_outputs_apart(cfg)


def test_an_unknown_scheme_names_every_form_the_tables_hold():
    cfg = CameraConfig(ModelOptions("m.edgert"), sinks=["rtmp://x/live"])
    with pytest.raises(OutputError) as info:
        check_outputs_apart(cfg)
    for scheme in SINKS.values():
        assert scheme.form in str(info.value)


def test_a_toy_feature_runs_through_the_feature_table_alone(toy, monkeypatch):
    """A camera feature that is neither a source nor a sink (issue 52) is one class and one row
    of ``features.FEATURES``: its steps are called in their order, around a real run, with what
    the run made by then (the sources, the model, the pipeline), and its part of the summary
    is there; close comes in the table's reverse order, so it closes before the others."""
    from edgert.apps.camera import features

    seen = []

    class Tally(features.Feature):
        def check(self, run):
            seen.append(("check", run.sources == [] and run.model is None))  # nothing open yet

        def open(self, run):
            seen.append(("open", len(run.sources), run.model is None))

        def loaded(self, run):
            seen.append(("loaded", run.model.task, run.slot is not None))

        def attach(self, run):
            seen.append(("attach", run.pipeline is not None))

        def close(self, run):
            seen.append(("close", run.slot.stopped.is_set()))

        def report(self, run, summary):
            summary["tally"] = {"frames": summary["frames_processed"]}

    monkeypatch.setattr(features, "FEATURES", (*features.FEATURES, Tally))
    cfg = CameraConfig(
        ModelOptions(str(toy)),
        sources=["ramp://3"],
        sink_options=SinkOptions(headless=True),
        run=RunOptions(max_frames=3),
    )
    summary = run_camera(cfg)
    assert seen[0] == ("check", True)
    assert [s[0] for s in seen] == ["check", "open", "loaded", "attach", "close"]
    assert seen[1][1:] == (1, True)  # the sources open, the model not yet loaded
    assert seen[2][1:] == ("classify", True)  # after the swap's slot, the last row before it
    assert seen[4] == ("close", False)  # before the swap's close (the row above it) stops it
    assert summary["tally"] == {"frames": 3} and summary["frames_processed"] == 3


def test_the_library_entry_is_the_same_composition_with_its_own_features(toy, monkeypatch):
    """``run_streams`` goes through the camera's feature table too (issue 52): a feature in
    ``LIBRARY_FEATURES`` has its steps called around a library run with the caller's model, and
    the command line's own features (the metrics port, clocks, power, the model slot) are not
    there: no slot, no power session, the model's own steps."""
    from edgert.apps.camera import features

    seen = []

    class Tally(features.Feature):
        def open(self, run):
            seen.append(("open", len(run.sources), run.model is not None))

        def loaded(self, run):
            seen.append(("loaded", run.slot, run.power, run.probes))

        def close(self, run):
            seen.append(("close", run.pipeline is not None))

        def report(self, run, summary):
            summary["tally"] = [type(f).__name__ for f in run.features]

    monkeypatch.setattr(features, "LIBRARY_FEATURES", (*features.LIBRARY_FEATURES, Tally))
    with load_task_model(toy) as model:
        summary = run_streams(model, ["ramp://4", "ramp://2"])
    assert seen == [("open", 2, True), ("loaded", None, None, None), ("close", True)]
    assert summary["tally"] == ["Tracking", "Gate", "Tally"]
    assert summary["frames_processed"] == 6 and summary["task"] == "classify"
    assert summary["outputs"] == []
