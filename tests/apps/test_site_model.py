"""The site model as a library (issue 68): what `load_site_text` gives the camera and the live
reload (the run's CameraConfig, the cameras' names in order, a version, a redacted view), the
model made from the flags' table (a flag added to a component is a key of the file), and errors
that carry each problem's path and line."""

from __future__ import annotations

import argparse

import pytest

from edgert.apps.camera.options import CameraConfig
from edgert.apps.config import ConfigError, json_schema, load_site, load_site_text, site_model
from edgert.apps.config import flags as flag_table
from tests.tiny import classifier_bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return classifier_bundle(tmp_path_factory.mktemp("m") / "cls")


def text(bundle, extra: str = "") -> str:
    return f"""model:
  path: {bundle}
  backend: onnxruntime
defaults:
  zones:
    - name: all
      points: [[0, 0], [1, 0], [1, 1], [0, 1]]
cameras:
  yard:
    source: rtsp://${{EDGERT_T_USER}}:${{EDGERT_T_PASS}}@10.0.0.6/live
  door:
    source: synthetic://
    lines:
      - name: in
        points: [[0.5, 0], [0.5, 1]]
{extra}"""


def test_a_site_is_the_runs_camera_config_its_names_and_a_version(bundle, monkeypatch):
    monkeypatch.setenv("EDGERT_T_USER", "admin")
    monkeypatch.setenv("EDGERT_T_PASS", "s3cret")
    site = load_site_text(text(bundle), name="site.yaml")
    assert isinstance(site.config, CameraConfig)
    assert site.names == ["yard", "door"]  # the file's order is the streams' order
    assert site.config.sources == ["rtsp://admin:s3cret@10.0.0.6/live", "synthetic://"]
    assert site.config.model.backend == "onnxruntime"
    # both have the defaults' zone (one flag, no stream), door its own line
    assert site.config.tracking.zones == ("all=0,0,1,0,1,1,0,1",)
    assert site.config.tracking.lines == ("1:in=0.5,0,0.5,1",)
    shown = site.redacted()
    assert "s3cret" not in repr(shown) and "admin" not in repr(shown)
    assert shown["cameras"]["yard"]["source"].startswith("rtsp://${EDGERT_T_USER}:***@")
    again = load_site_text(text(bundle), name="other.yaml")
    assert again.version == site.version and len(site.version) == 12
    changed = load_site_text(text(bundle, "run:\n  max_frames: 5\n"))
    assert changed.version != site.version and changed.config.run.max_frames == 5


def test_a_line_in_every_camera_stays_one_flag_without_a_stream(bundle):
    site = load_site_text(
        f"model: {{path: {bundle}}}\ndefaults:\n  lines: [{{name: a, points: [[0, 0.5], [1, 0.5]]}}]\n"
        "cameras:\n  one: {source: synthetic://}\n  two: {source: synthetic://}\n"
    )
    assert site.config.tracking.lines == ("a=0,0.5,1,0.5",)
    site = load_site_text(  # a camera's own list, even empty, replaces the defaults' for it
        f"model: {{path: {bundle}}}\ndefaults:\n  lines: [{{name: a, points: [[0, 0.5], [1, 0.5]]}}]\n"
        "cameras:\n  one: {source: synthetic://, lines: []}\n  two: {source: synthetic://}\n"
    )
    assert site.config.tracking.lines == ("1:a=0,0.5,1,0.5",)


def test_errors_carry_path_line_and_message_and_one_line_each(bundle, tmp_path):
    with pytest.raises(ConfigError) as got:
        load_site_text(text(bundle, "gate:\n  mode: sometimes\n  keyframe: -2\n"), name="s.yaml")
    problems = got.value.problems
    assert (("gate", "keyframe"), 18, "input should be greater than 0") in problems
    assert any(p[:2] == (("cameras", "yard", "source"), 10) for p in problems)  # EDGERT_T_* unset
    lines = str(got.value).splitlines()
    assert len(lines) == len(problems)
    assert "gate.keyframe: input should be greater than 0 (s.yaml:18)" in lines
    assert got.value.exit_code == 2
    with pytest.raises(ConfigError, match=r"^\(file\): cannot read it: No such file"):
        load_site(tmp_path / "none.yaml")


def test_a_components_own_check_is_said_at_its_key(bundle, monkeypatch):
    monkeypatch.setenv("EDGERT_T_USER", "a")
    monkeypatch.setenv("EDGERT_T_PASS", "b")
    with pytest.raises(ConfigError) as got:
        load_site_text(text(bundle, "gate:\n  mode: sometimes\n"), name="s.yaml")
    assert str(got.value).startswith("gate.mode: 'sometimes': give motion")
    assert got.value.problems[0][1] == 17
    with pytest.raises(ConfigError) as got:  # a feature's own check at start, said by the file's
        load_site_text(text(bundle, "clocks:\n  mode: auto\n"), name="s.yaml")
    assert str(got.value) == (
        "clocks.mode: auto chooses clocks for a rate: give gate.target_fps N as well (s.yaml:17)"
    )


def test_every_flag_of_the_table_is_a_key_of_the_file_and_of_the_schema():
    schema = json_schema()
    model = site_model()
    for section, found in flag_table.sections().items():
        if section == "cameras":
            continue
        keys = set(model.model_fields[section].annotation.model_fields)
        assert keys == {f.key for f in found}, section
        ref = schema["properties"][section]
        name = (ref.get("$ref") or ref["allOf"][0]["$ref"]).rsplit("/", 1)[-1]
        assert set(schema["$defs"][name]["properties"]) == keys
        assert schema["$defs"][name]["additionalProperties"] is False


def test_a_new_flag_of_a_feature_becomes_a_key_without_another_list(monkeypatch):
    """The file's sections are read from the components' own add_arguments: a flag added to the
    gate feature is a key of gate: (typed by its argparse type), with no other change."""
    from edgert.apps.argtypes import positive_int
    from edgert.apps.camera.features.gate import Gate

    original = Gate.add_arguments

    def more(parser):
        original(parser)
        parser.add_argument("--gate-warmup", type=positive_int, default=3)

    monkeypatch.setattr(Gate, "add_arguments", staticmethod(more))
    site_model.cache_clear()
    try:
        fields = site_model().model_fields["gate"].annotation.model_fields
        assert fields["gate_warmup"].default == 3 and fields["gate_warmup"].annotation is int
        ns = flag_table.defaults()
        assert isinstance(ns, argparse.Namespace) and ns.gate_warmup == 3
    finally:
        monkeypatch.undo()
        site_model.cache_clear()
    assert "gate_warmup" not in site_model().model_fields["gate"].annotation.model_fields


def test_a_second_stage_written_out_is_the_flags_form(bundle):
    stages = (
        f"secondaries:\n  bundles:\n    - bundle: {bundle}\n      labels: [car, truck]\n      attempts: 2\n"
        f"      margin: 0.2\n    - {bundle}:on=person\n"
    )
    site = load_site_text(f"model: {{path: {bundle}}}\ncameras: {{a: {{source: x.mp4}}}}\n{stages}")
    first, second = site.config.secondaries
    assert (first.bundle, first.on, first.attempts, first.margin) == (
        str(bundle),
        ("car", "truck"),
        2,
        0.2,
    )
    assert second.on == ("person",)
    site = load_site_text(  # the cameras a stage runs on, by name: the flag's streams=
        f"model: {{path: {bundle}}}\ncameras: {{a: {{source: x.mp4}}, b: {{source: y.mp4}}}}\n"
        f"secondaries:\n  bundles:\n    - {{bundle: {bundle}, cameras: [b], embed: best}}\n"
    )
    (stage,) = site.config.secondaries
    assert stage.streams == (1,) and stage.embed == "best"
    with pytest.raises(ConfigError) as got:
        load_site_text(
            f"model: {{path: {bundle}}}\ncameras: {{a: {{source: x.mp4}}}}\n"
            f"secondaries:\n  bundles:\n    - {{bundle: {bundle}, cameras: [a, gate]}}\n",
            name="s.yaml",
        )
    assert str(got.value) == (
        "secondaries.bundles[0].cameras[1]: no camera is named gate (cameras: a) (s.yaml:5)"
    )
    with pytest.raises(ConfigError) as got:
        load_site_text(
            f"model: {{path: {bundle}}}\ncameras: {{a: {{source: x.mp4}}}}\n"
            f"secondaries:\n  bundles:\n    - {{bundle: {bundle}, labels: ['a,b'], tries: 2}}\n"
        )
    said = str(got.value)
    assert "secondaries.bundles[0].tries: unknown key (the keys here: bundle, name, labels," in said
    assert "secondaries.bundles[0].labels[0]: 'a,b': a label here is text without" in said, said


def _sample(f):
    """A value other than the default that the flag's own type takes (None: none here)."""
    from edgert.apps.argtypes import fraction

    a = f.action
    if f.switch:
        return True
    if f.many:
        return ["x", "y"]
    if a.choices:
        return next((c for c in a.choices if c != a.default), None)  # --tracker: one choice
    if a.type is fraction:
        return 0.5
    if a.type is not None:
        return a.type("7")
    return "x"


def test_every_flag_survives_the_file_both_ways():
    """Each flag of the table, given alone on a command line, is written to the file's data and
    read back into the same value (the flags are only another way of writing the file)."""
    from edgert.apps.config import convert

    checked = 0
    for section, found in flag_table.sections().items():
        if section == "cameras":
            continue
        for f in found:
            ns = flag_table.defaults()
            ns.model = "m.edgert"
            value = _sample(f)
            if value is None:
                continue
            setattr(ns, f.action.dest, value)
            data = convert.from_namespace(ns)
            assert data[section][f.key] is not None, f.option
            valid = site_model().model_validate(data).model_dump(mode="json", exclude_unset=True)
            back = convert.to_namespace(valid)
            assert getattr(back, f.action.dest) == value, f.option
            checked += 1
    assert checked >= 60


def test_a_flag_of_its_own_type_is_its_word_in_the_file(bundle):
    site = load_site_text(
        f"model: {{path: {bundle}}}\ncameras: {{a: {{source: x.mp4}}}}\n"
        "capture: {reconnect: forever}\n"
    )
    assert site.config.source_options.reconnect_tries is None  # for ever
    site = load_site_text(
        f"model: {{path: {bundle}}}\ncameras: {{a: {{source: x.mp4}}}}\ncapture: {{reconnect: 3}}\n"
    )
    assert site.config.source_options.reconnect_tries == 3
    with pytest.raises(ConfigError, match=r"capture\.reconnect: .*never"):
        load_site_text(
            f"model: {{path: {bundle}}}\ncameras: {{a: {{source: x.mp4}}}}\n"
            "capture: {reconnect: never}\n"
        )


def test_a_camera_s_own_gate_and_rate_are_its_stream_s_and_survive_the_flags(bundle):
    from edgert.apps.camera.gate import gates_for
    from edgert.apps.config import convert

    site = load_site_text(
        f"model: {{path: {bundle}}}\ngate: {{mode: off, target_fps: 10}}\ncameras:\n"
        "  quiet: {source: synthetic://, gate: motion, target_fps: 4}\n"
        "  busy: {source: synthetic://}\n"
        "  dock: {source: synthetic://, gate: 'interval:5'}\n"
    )
    g = site.config.gate
    own = [g.for_stream(i) for i in range(3)]
    assert [(o.mode, o.interval, o.target_fps) for o in own] == [
        ("motion", 1, 4.0),
        ("off", 1, 10.0),
        ("interval", 5, 10.0),
    ]
    gates = gates_for(g, 3)
    assert [x.options for x in gates] == own and gates[0].motion is not None
    assert gates[1].motion is None  # only the camera that asked looks for motion
    assert g.motion_anywhere  # its frames are scaled for it (decoder_fit)
    # the command line's form and back: --stream-gate / --stream-target-fps
    ns = flag_table.defaults()
    ns.model, ns.source = str(bundle), ["synthetic://", "synthetic://"]
    ns.stream_gate, ns.stream_target_fps = ["1:interval:3"], ["0:2.5"]
    data = convert.from_namespace(ns)
    assert data["cameras"] == {
        "cam0": {"source": "synthetic://", "target_fps": 2.5},
        "cam1": {"source": "synthetic://", "gate": "interval:3"},
    }
    valid = site_model().model_validate(data).model_dump(mode="json", exclude_unset=True)
    back = convert.to_namespace(valid)
    assert back.stream_gate == ["1:interval:3"] and back.stream_target_fps == ["0:2.5"]


def test_a_camera_without_clips_or_snapshots_is_left_out_of_their_sinks(bundle, tmp_path):
    site = load_site_text(
        f"model: {{path: {bundle}}}\noutputs: {{clips: {tmp_path / 'c'}, snapshots: {tmp_path}}}\n"
        "cameras:\n  a: {source: synthetic://, snapshots: false}\n  b: {source: synthetic://}\n"
        "  c: {source: synthetic://, clips: false, snapshots: true}\n"
    )
    clips = next(u for u in site.config.sinks if u.startswith("clips://"))
    shots = next(u for u in site.config.sinks if u.startswith("snapshots://"))
    assert clips.endswith("?streams=0%2B1") and shots.endswith("?streams=1%2B2"), (clips, shots)
    data = site.redacted()
    assert data["cameras"]["a"]["snapshots"] is False and data["cameras"]["c"]["clips"] is False
    site = load_site_text(  # a clips:// output is the run's clips too
        f"model: {{path: {bundle}}}\noutputs: {{uris: ['clips://{tmp_path / 'c'}?pre=2']}}\n"
        "cameras:\n  a: {source: synthetic://}\n  b: {source: synthetic://, clips: false}\n"
    )
    assert [u for u in site.config.sinks if u.startswith("clips://")][0].endswith("streams=0")
    with pytest.raises(ConfigError) as got:  # no clips kept at all: a camera's clips says nothing
        load_site_text(
            f"model: {{path: {bundle}}}\ncameras:\n  a: {{source: synthetic://, clips: false}}\n",
            name="s.yaml",
        )
    assert (
        str(got.value) == "cameras.a.clips: applies to outputs.clips, and none is given (s.yaml:3)"
    )


def test_a_camera_s_own_gate_that_is_not_a_mode_is_said_at_its_line(bundle):
    with pytest.raises(ConfigError) as got:
        load_site_text(
            f"model: {{path: {bundle}}}\ncameras:\n  a: {{source: synthetic://}}\n"
            "  b:\n    source: synthetic://\n    gate: sometimes\n    target_fps: 0\n",
            name="s.yaml",
        )
    said = str(got.value).splitlines()
    assert "cameras.b.gate: give motion, interval:N or off (s.yaml:6)" in said, said
    assert "cameras.b.target_fps: input should be greater than 0 (s.yaml:7)" in said, said
