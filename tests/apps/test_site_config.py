"""The site file (issue 68): `edgert camera --config site.yaml` runs what the same command line
runs (two rendered camera scenes through a real detector bundle on ONNX Runtime, the same summary
and events), --print-config writes a command line as a file that runs the same, and
`edgert config check` finds every problem of a file in one pass, each with its path and line."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import yaml

from tests.apps.test_tracking_camera import FPS, FRAMES, H, W, scene_video, square_at
from tests.conftest import run_cli
from tests.tiny import blob_detector_bundle

pytestmark = pytest.mark.subprocess


def mirrored_video(path):
    """The other camera: one square going down the middle (x=160), frames 0-45."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), FPS, (W, H))
    for i in range(FRAMES // 2):
        img = np.zeros((H, W, 3), np.uint8)
        square_at(img, 260, 10 + 5 * min(i, 40))
        writer.write(img)
    writer.release()
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site")
    bundle = blob_detector_bundle(folder / "det")
    return bundle, scene_video(folder / "a.mp4"), mirrored_video(folder / "b.mp4")


def site_text(bundle, a, b, events) -> str:
    return f"""# yaml-language-server: $schema=edgert-site.schema.json
model:
  path: {bundle}
  conf: 0.75
outputs:
  headless: true
tracking:
  events: {events}
defaults:
  lines:
    - name: half
      points: [[0, 0.9], [1, 0.9]]
cameras:
  entrance:
    source: {a}
    lines:
      - name: half
        points: [[0, 0.9], [1, 0.9]]
      - name: door
        points: [[160, 0], [160, 240]]
  yard:
    source: {b}
    zones:
      - name: pen
        points: [[200, 0], [320, 0], [320, 120], [200, 120]]
"""


def command_line(bundle, a, b, events) -> list:
    return [
        *("camera", bundle, "--source", a, "--source", b, "--headless", "--conf", "0.75"),
        *("--line", "half=0,0.9,1,0.9", "--line", "0:door=160,0,160,240"),
        *("--zone", "1:pen=200,0,320,0,320,120,200,120", "--events", events),
    ]


def comparable(summary: dict) -> dict:
    """What two runs of the same configuration share: frames, counts, labels, events."""
    streams = [
        {k: s.get(k) for k in ("frames", "counts", "labels", "tracks", "uri")}
        for s in summary["streams"]
    ]
    return {"streams": streams, "events": summary.get("events")}


def events_of(path) -> list:
    """The events, without their times (two runs make them at other moments) and their
    configuration's version (the two runs write other files: one version each, on every event)."""
    out, versions = [], set()
    for line in path.read_text().splitlines():
        e = json.loads(line)
        if e["event"] != "run_start":  # the file's first line, written as it opens
            versions.add(e.get("config"))
        out.append(
            {k: v for k, v in e.items() if k not in ("time", "t_monotonic", "run_id", "config")}
        )
    assert len(versions) == 1 and None not in versions, versions
    return out


def per_stream(events: list) -> list:
    """The events stream by stream, each stream's in the order it made them (a run's own events,
    of no stream, first)."""
    return sorted(events, key=lambda e: e.get("stream", -1))


def test_a_site_file_and_the_same_command_line_give_the_same_summary_and_events(site, tmp_path):
    bundle, a, b = site
    by_flags, by_file = tmp_path / "flags.jsonl", tmp_path / "file.jsonl"
    proc = run_cli(*command_line(bundle, a, b, by_flags), "--json")
    assert proc.returncode == 0, proc.stderr
    flags_summary = json.loads(proc.stdout)
    config = tmp_path / "site.yaml"
    config.write_text(site_text(bundle, a, b, by_file))
    proc = run_cli("camera", "--config", config, "--json")
    assert proc.returncode == 0, proc.stderr
    file_summary = json.loads(proc.stdout)
    assert comparable(file_summary) == comparable(flags_summary)
    door = file_summary["streams"][0]["counts"]["door"]
    assert (door["in"], door["out"]) == (1, 1)  # the scene's two squares, one each way
    yard = file_summary["streams"][1]["counts"]
    assert set(yard) == {"half", "pen"}  # the defaults' line and its own zone, not the door
    assert yard["pen"]["entries"] == 1 and yard["half"]["in"] + yard["half"]["out"] == 1
    # each stream's events in its order (two files' streams interleave by timing: a batch that
    # waited its 20 ms for the other stream under load goes with one stream's frame alone)
    assert per_stream(events_of(by_file)[1:]) == per_stream(events_of(by_flags)[1:])
    kinds = [e["event"] for e in events_of(by_file)]
    assert kinds.count("line_cross") == 3 and kinds.count("zone_enter") == 1


def test_print_config_fed_back_to_config_is_the_same_run(site, tmp_path):
    bundle, a, b = site
    events = tmp_path / "events.jsonl"
    proc = run_cli(*command_line(bundle, a, b, events), "--print-config")
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    written = yaml.safe_load(proc.stdout)
    assert list(written["cameras"]) == ["cam0", "cam1"]
    assert written["cameras"]["cam0"]["lines"][1] == {
        "name": "door",
        "points": [[160, 0], [160, 240]],
    }
    config = tmp_path / "printed.yaml"
    config.write_text(proc.stdout)
    again = run_cli("camera", "--config", config, "--print-config")
    assert again.returncode == 0, again.stderr
    assert again.stdout == proc.stdout  # the file of the file is the file
    by_flags = run_cli(*command_line(bundle, a, b, tmp_path / "x.jsonl"), "--json")
    by_file = run_cli("camera", "--config", config, "--json")
    assert by_flags.returncode == 0 and by_file.returncode == 0, by_file.stderr
    assert comparable(json.loads(by_file.stdout)) == comparable(json.loads(by_flags.stdout))


def test_config_flags_beside_a_file_are_refused_in_a_sentence(site, tmp_path):
    bundle, a, b = site
    config = tmp_path / "site.yaml"
    config.write_text(site_text(bundle, a, b, tmp_path / "e.jsonl"))
    proc = run_cli("camera", "--config", config, "--gate", "motion", "--max-frames", "3")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "with --config: the file is the whole configuration" in proc.stderr
    assert "--gate" in proc.stderr and "--max-frames" in proc.stderr
    proc = run_cli("camera")
    assert proc.returncode == 2 and "give a MODEL" in proc.stderr, proc.stderr


BROKEN = """model:
  path: missing.edgert
  conf: 2
capture:
  width: 320
  height: 240
cameras:
  door:
    source: rtsp://admin:hunter2@10.0.0.5/live
    lines:
      - name: in
        points: [[10, 10], [100, 100]]
      - name: out
        points: [[10, 10], [900, 100]]
    zones:
      - name: pen
        points: [[0, 0], [10, 10], [10, 0], [0, 10]]
    colour: red
  yard:
    source: rtsp://${EDGERT_TEST_UNSET_USER}:${EDGERT_TEST_UNSET_PASS}@10.0.0.6/live
    lines:
      - name: gate
        points: [[1, 2, 3]]
gate:
  target_fps: fast
"""


def test_config_check_says_every_problem_with_its_path_and_line(tmp_path):
    bad = tmp_path / "site.yaml"
    bad.write_text(BROKEN)
    proc = run_cli("config", "check", bad)
    assert proc.returncode == 2 and not proc.stdout
    assert "Traceback" not in proc.stderr
    said = proc.stderr.splitlines()
    expected = [
        ("model.path: missing.edgert: no such file or bundle", 2),
        ("model.conf: input should be less than or equal to 1", 3),
        ("cameras.door.source: a password or token is written in the URI", 9),
        ("cameras.door.lines[1]: line out: point (900, 100) is outside the 320x240 frame", 13),
        ("cameras.door.zones[0]: zone pen crosses itself (edges 1 and 3)", 16),
        ("cameras.door.colour: unknown key (the keys here: source, lines, zones", 18),
        ("cameras.yard.source: the environment variable EDGERT_TEST_UNSET_USER is not set", 20),
        ("cameras.yard.source: the environment variable EDGERT_TEST_UNSET_PASS is not set", 20),
        ("cameras.yard.lines[0].points[0]", 23),
        ("gate.target_fps: input should be a valid number", 25),
    ]
    for fragment, line in expected:
        hit = [s for s in said if fragment in s]
        assert hit, (fragment, proc.stderr)
        assert hit[0].startswith("edgert config: error: ") and hit[0].endswith(f"({bad}:{line})")
    assert len(said) == len(expected), proc.stderr
    assert "hunter2" not in proc.stderr


@pytest.mark.parametrize(
    "text, fragment, line",
    [
        ("model: {path: a\ncameras: [", "(file): not valid YAML: while parsing a flow mapping", 2),
        ("model:\n  path: a\nmodel:\n  conf: 0.5\n", "model: given twice (first on line 1)", 3),
        ("- a\n- b\n", "(file): the file must be a mapping of sections", 1),
        ("model:\n  path: a\n", "cameras: missing: it must be given", 1),
        (
            "model:\n  path: a\ncameras:\n  door:\n    source: x\n  2 3: {}\n",
            "cameras.2 3: '2 3': a name is ASCII letters",
            6,
        ),
    ],
)
def test_config_check_yaml_and_shape_errors(tmp_path, text, fragment, line):
    bad = tmp_path / "s.yaml"
    bad.write_text(text)
    proc = run_cli("config", "check", bad)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert fragment in proc.stderr and f"({bad}:{line})" in proc.stderr, proc.stderr


def test_config_check_accepts_a_good_file_in_one_line(site, tmp_path):
    bundle, a, b = site
    good = tmp_path / "site.yaml"
    good.write_text(site_text(bundle, a, b, tmp_path / "e.jsonl"))
    proc = run_cli("config", "check", good)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"{good}: ok: 2 cameras (entrance, yard), version {proc.stdout.split()[-1]}"
    ]
    missing = tmp_path / "missing.yaml"
    missing.write_text(site_text(tmp_path / "nothing.edgert", a, b, tmp_path / "e.jsonl"))
    proc = run_cli("camera", "--config", missing)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        f"edgert camera: error: model.path: {tmp_path / 'nothing.edgert'}: no such file or "
        f"bundle ({missing}:3)"
    )


def test_config_schema_written_and_it_validates_the_site(site, tmp_path):
    import jsonschema

    out = tmp_path / "schema.json"
    proc = run_cli("config", "schema", "-o", out)
    assert proc.returncode == 0 and not proc.stdout, proc.stderr
    printed = run_cli("config", "schema")
    assert json.loads(printed.stdout) == json.loads(out.read_text())
    schema = json.loads(out.read_text())
    bundle, a, b = site
    good = yaml.safe_load(site_text(bundle, a, b, "e.jsonl"))
    jsonschema.Draft202012Validator(schema).validate(good)
    good["cameras"]["yard"]["colour"] = "red"  # the editor flags what check refuses
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(good)
    assert {"model", "cameras", "defaults", "gate", "tracking", "telemetry", "power"} <= set(
        schema["properties"]
    )
    assert schema["required"] == ["model", "cameras"]


def test_the_eight_camera_example_site_passes_config_check(site, tmp_path):
    """docs/examples/site.yaml: accepted with its bundles in place and its variables set; with a
    variable unset, each camera that names it is said, on its own line."""
    import shutil

    from tests.conftest import ROOT

    example = ROOT / "docs" / "examples" / "site.yaml"
    bundle = site[0]
    for name in ("people-v3", "plates"):
        shutil.copytree(bundle, tmp_path / "models" / f"{name}.edgert")
    env = {f"EDGERT_{k}": "x" for k in ("CAM_USER", "CAM_PASSWORD", "MQTT_USER", "MQTT_PASSWORD")}
    proc = run_cli("config", "check", example, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{example}: ok: 8 cameras (entrance, exit, till-1, "), (
        proc.stdout
    )
    del env["EDGERT_CAM_PASSWORD"]
    proc = run_cli("config", "check", example, cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr
    said = proc.stderr.splitlines()
    assert len(said) == 8 and all("EDGERT_CAM_PASSWORD is not set" in s for s in said), said
    import jsonschema

    from edgert.apps.config import json_schema

    jsonschema.Draft202012Validator(json_schema()).validate(yaml.safe_load(example.read_text()))
