"""Second-stage models on tracked objects (issue 50): a real detector (tests/tiny.blob_detector)
finds coloured squares moving through a rendered video, a real classifier (the crop's mean colour)
runs on crops of their tracks. The scripted colour is what each track's consensus must say; the
budget of attempts holds; a fast object that crosses the frame in a second gets its attempt;
crops at the frame's edge are cut there and score half; four streams give one secondary call per
primary batch; a bundle that does not load is one sentence and the camera runs on; the fields
are in JSONL, events and the summary."""

from __future__ import annotations

import json
import time

import cv2
import numpy as np
import pytest

from edgert.apps.camera.features.secondary_models import SecondarySpec, crop_box, quality
from edgert.runtime.errors import OutputError
from tests.apps.test_telemetry import Mosquitto, Subscriber, needs
from tests.conftest import assert_user_error, run_cli
from tests.tiny import COLOURS, blob_detector_bundle, colour_classifier_bundle

W, H, FPS, FRAMES = 320, 240, 10, 60
BGR = {"red": (215, 215, 255), "green": (215, 255, 215), "blue": (255, 215, 215)}


def _square(img, cx, cy, colour, side=60):
    x, y = int(cx - side / 2), int(cy - side / 2)
    img[max(0, y) : max(0, y + side), max(0, x) : max(0, x + side)] = BGR[colour]


def scripted(t: int) -> list:
    """(colour, cx, cy) of the objects in frame ``t``: red goes right along y=50, green left
    along y=190, blue crosses fast along y=120 (frames 20-31, 25 px a frame: about a second)."""
    out = [("red", 40 + 3 * t, 50), ("green", 280 - 3 * t, 190)]
    if 20 <= t < 32:
        out.append(("blue", -30 + 25 * (t - 20), 120))
    return out


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    root = tmp_path_factory.mktemp("secondary")
    video = root / "scene.mp4"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"mp4v"), FPS, (W, H))
    for t in range(FRAMES):
        img = np.zeros((H, W, 3), np.uint8)
        for colour, cx, cy in scripted(t):
            _square(img, cx, cy, colour)
        writer.write(img)
    writer.release()
    return blob_detector_bundle(root / "det"), colour_classifier_bundle(root / "col"), video


def _scripted_colour(box, t: int) -> str | None:
    """The scripted object whose centre is nearest the box's on frame ``t``."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    colour, x, y = min(scripted(t), key=lambda o: (o[1] - cx) ** 2 + (o[2] - cy) ** 2)
    return colour if abs(x - cx) < 30 and abs(y - cy) < 30 else None


def _camera(tmp_path, scene, *secondary, sources=1, extra=()):
    det, col, video = scene
    args = [a for _ in range(sources) for a in ("--source", video)]
    proc = run_cli(
        "camera",
        det,
        *args,
        "--headless",
        "--conf",
        "0.75",
        "--json",
        *[a for s in secondary for a in ("--secondary", s.format(col=col))],
        "--events",
        tmp_path / "events.jsonl",
        "--jsonl",
        tmp_path / "frames.jsonl",
        *extra,
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    frames = [json.loads(x) for x in (tmp_path / "frames.jsonl").read_text().splitlines()]
    return json.loads(proc.stdout), events, [f for f in frames if "results" in f]


def _running(det, video, *args):
    """``edgert camera DET --source VIDEO --headless --conf 0.75 ARGS`` in its own process (a
    test stops it)."""
    import subprocess

    from tests.conftest import ROOT
    from tests.procs import edgert

    return subprocess.Popen(
        edgert("camera", det, "--source", video, "--headless", "--conf", "0.75", *args),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.subprocess
def test_each_track_is_labelled_with_its_scripted_colour_within_its_budget(scene, tmp_path):
    summary, events, frames = _camera(tmp_path, scene, "{col}")
    (report,) = summary["secondary"]
    assert report["name"] == "colours" and report["task"] == "classify"
    # every track's consensus is the colour of the object it follows (scripted)
    seen: dict = {}
    for f in frames:
        for o in f["results"]:
            if o.get("track_id") is None:
                continue
            truth = _scripted_colour(o["box"], f["frame"])
            seen.setdefault(o["track_id"], set()).add(truth)
            if "colours" in o:
                assert o["colours"]["label"] == truth, (f["frame"], o)
                assert 0 < o["colours"]["confidence"] <= 1 and o["colours"]["attempts"] >= 1
    assert {c for s in seen.values() for c in s} == set(COLOURS)
    labels = {e["track_id"]: e for e in events if e["event"] == "track_label"}
    assert {e["label"] for e in labels.values()} == set(COLOURS)
    for tid, e in labels.items():
        assert seen[tid] == {e["label"]}, (tid, seen[tid], e)
        assert e["secondary"] == "colours" and e["primary"] == "blob"
    # the fast object (about a second in the frame) got its attempt, and its label
    assert "blue" in {e["label"] for e in labels.values()}
    # track_end events say the label too; the budget (3 attempts) is never exceeded
    ends = [e for e in events if e["event"] == "track_end" and e["track_id"] in labels]
    assert ends and all(
        e["secondary"]["colours"]["label"] == labels[e["track_id"]]["label"] for e in ends
    )
    assert report["most_attempts"] <= 3 and report["attempts_per_track"] <= 3
    assert report["calls"] >= 1 and report["crops"] >= len(labels)
    assert report["dropped"] == 0 and report["refused_size"] == 0


@pytest.mark.subprocess
def test_attempts_per_track_follow_the_options(scene, tmp_path):
    """attempts=1: one crop per track however long it lives; every=0.2 with attempts=4: the
    long tracks use all four (a re-check every 0.2 s), none more."""
    one, _, _ = _camera(tmp_path, scene, "{col}:attempts=1,name=once")
    (r,) = one["secondary"]
    assert r["name"] == "once" and r["most_attempts"] == 1 and r["attempts_per_track"] == 1.0
    many, _, _ = _camera(tmp_path, scene, "{col}:attempts=4,every=0.2,window=0")
    (r,) = many["secondary"]
    assert r["most_attempts"] == 4 and r["crops"] <= 4 * r["tracks_attempted"]


@pytest.mark.subprocess
def test_a_track_that_ends_before_its_window_closes_gets_its_attempt_as_it_goes(scene, tmp_path):
    """With a 30 s window no view is good enough to be tried at once: the fast object is tried
    with its best crop when its track ends, the others when the run ends; each is labelled."""
    summary, events, _ = _camera(tmp_path, scene, "{col}:window=30")
    (r,) = summary["secondary"]
    assert r["most_attempts"] == 1
    labels = [e for e in events if e["event"] == "track_label"]
    assert sorted(e["label"] for e in labels) == sorted(COLOURS)
    blue = next(e for e in labels if e["label"] == "blue")
    end = next(
        i
        for i, e in enumerate(events)
        if e["event"] == "track_end" and e["track_id"] == blue["track_id"]
    )
    assert events[end]["frame"] is not None  # it left during the run (not at its end)
    assert events.index(blue) > end  # tried as it went: the answer came after it ended


@pytest.mark.subprocess
def test_boxes_under_the_minimum_are_refused_and_counted(scene, tmp_path):
    summary, events, frames = _camera(tmp_path, scene, "{col}:min=100")
    (r,) = summary["secondary"]
    assert r["refused_size"] > 0 and r["calls"] == 0 and r["crops"] == 0
    assert not [e for e in events if e["event"] == "track_label"]
    assert not any("colours" in o for f in frames for o in f["results"])


@pytest.mark.subprocess
def test_four_streams_give_one_secondary_call_per_primary_batch(scene, tmp_path):
    summary, events, _ = _camera(tmp_path, scene, "{col}", sources=4, extra=("--batch", "4"))
    (r,) = summary["secondary"]
    assert r["calls"] == r["batches"] >= 1  # one call per primary batch that gave crops
    assert r["crops"] > r["calls"]  # crops of several streams in one call
    streams = {e["stream"] for e in events if e["event"] == "track_label"}
    assert streams == {0, 1, 2, 3}


@pytest.mark.subprocess
def test_a_second_stage_runs_only_on_the_streams_it_names(scene, tmp_path):
    """Three cameras on the same footage, the stage on streams 0 and 2 (a site file's
    ``cameras: [a, c]``): labels on those, none on stream 1; a stream the run lacks is refused."""
    summary, events, frames = _camera(tmp_path, scene, "{col}:streams=0+2", sources=3)
    streams = {e["stream"] for e in events if e["event"] == "track_label"}
    assert streams == {0, 2}
    assert not any("colours" in o for f in frames if f["stream"] == 1 for o in f["results"])
    assert any("colours" in o for f in frames if f["stream"] == 2 for o in f["results"])
    det, col, video = scene
    assert_user_error(
        run_cli("camera", det, "--source", video, "--secondary", f"{col}:streams=1"),
        "streams=1: there is no stream 1",
    )


@pytest.mark.subprocess
def test_a_secondary_that_does_not_load_is_one_sentence_and_the_camera_runs_on(scene, tmp_path):
    det, _, video = scene
    broken = tmp_path / "broken.edgert"
    broken.mkdir()
    (broken / "manifest.json").write_text("{ not json")
    proc = run_cli(
        "camera",
        det,
        "--source",
        video,
        "--headless",
        "--conf",
        "0.75",
        "--json",
        "--secondary",
        broken,
    )
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "--secondary" in line]
    assert len(said) == 1 and "runs without it" in said[0] and "Traceback" not in proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["frames_processed"] == FRAMES and "secondary" not in summary


@pytest.mark.parametrize(
    "spec, words",
    [
        ("b.edgert:colour=red", "unknown option 'colour=red'"),
        ("b.edgert:attempts=two", "attempts=two is not a number"),
        ("b.edgert:attempts=0", "attempts must be at least 1"),
        ("b.edgert:margin=3", "margin is a share"),
        (":on=person", "give a bundle"),
        # names and numbers that would break a run
        ("b.edgert:window=nan", "window=nan is not a finite number"),
        ("b.edgert:name=box", "name=box: a name is a letter"),
        ("b.edgert:name=a b", "name=a b: a name is a letter"),
    ],
)
def test_bad_secondary_options_are_one_sentence(spec, words):
    with pytest.raises(OutputError, match=words):
        SecondarySpec.parse(spec)


def test_options_are_read():
    s = SecondarySpec.parse("/m/attr.edgert:on=person+car,attempts=2,margin=0.2,every=3,min=24")
    assert s.bundle == "/m/attr.edgert" and s.on == ("person", "car") and s.attempts == 2
    assert (s.margin, s.every_s, s.min_size) == (0.2, 3.0, 24)
    assert SecondarySpec.parse("/m/with:colon.edgert").bundle == "/m/with:colon.edgert"
    assert SecondarySpec.parse("/m/attr_v=2.edgert").bundle == "/m/attr_v=2.edgert"


@pytest.mark.subprocess
def test_a_bad_secondary_option_through_the_cli(scene):
    det, col, video = scene
    proc = run_cli("camera", det, "--source", video, "--headless", "--secondary", f"{col}:k=1")
    assert_user_error(proc, "unknown option 'k=1'")


def test_crops_at_the_frame_edge_are_cut_there_and_score_half():
    """The margin is added, then the crop is clipped to the frame (no padding); a box touching
    the edge (part of the object is outside) scores half of the same box inside; a blurred
    view and a fast one score lower; a small one lower still."""
    rng = np.random.default_rng(0)
    picture = np.zeros((240, 320, 3), np.uint8)
    picture[100:160, 0:60] = rng.integers(0, 255, (60, 60, 3))
    picture[100:160, 130:190] = picture[100:160, 0:60]
    assert crop_box((0, 100, 60, 160), 0.1, (240, 320)) == (0, 94, 66, 166)
    assert crop_box((290, 200, 320, 240), 0.5, (240, 320)) == (275, 180, 320, 240)
    inside = quality(picture, (130, 100, 190, 160), 0.9, (0, 0), 64)
    edge = quality(picture, (0, 100, 60, 160), 0.9, (0, 0), 64)
    assert edge == pytest.approx(inside / 2, rel=1e-6)
    blurred = picture.copy()
    blurred[100:160, 130:190] = cv2.GaussianBlur(picture[100:160, 130:190], (15, 15), 5)
    assert quality(blurred, (130, 100, 190, 160), 0.9, (0, 0), 64) < inside
    assert quality(picture, (130, 100, 190, 160), 0.9, (300, 0), 64) < inside / 4
    assert quality(picture, (130, 100, 190, 160), 0.9, (0, 0), 224) < inside / 3


@pytest.mark.subprocess
@pytest.mark.browser
def test_the_page_lists_the_labels_of_the_tracks(scene, tmp_path):
    """The web viewer's event list in headless Chromium: a track_label event says the model and
    the label, and a track's later events say its label beside it."""
    import re
    import subprocess

    from tests.apps.test_page_chromium import CHROMIUM, FLAGS, free_port

    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    det, col, video = scene
    port = free_port()
    app = _running(
        det,
        video,
        "--loop",
        "--secondary",
        col,
        "--output",
        f"http://127.0.0.1:{port}",
        "--duration",
        "60",
    )
    try:
        want = (
            r"track_label\s+colours: (red|green|blue) #\d+",
            r"track_end\s+blob #\d+ \(colours: (red|green|blue)\)",
        )
        dom = ""
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            dom = subprocess.run(
                [
                    CHROMIUM,
                    *FLAGS,
                    f"--user-data-dir={tmp_path / 'p'}",
                    "--virtual-time-budget=2500",
                    "--dump-dom",
                    f"http://127.0.0.1:{port}/",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
            if all(re.search(w, dom) for w in want):
                break
            time.sleep(1.0)
        for w in want:
            assert re.search(w, dom), (w, re.findall(r'<div class="ev">.*?</div>', dom)[:5])
    finally:
        app.terminate()
        app.wait(10)


@pytest.mark.subprocess
@needs["mosquitto"]
def test_mqtt_carries_the_labels_as_the_events_file_does(scene, tmp_path):
    """A real Mosquitto on a free loopback port: the events MQTT delivers are the events file's,
    track_label events and the labels on later track events included."""
    broker = Mosquitto(tmp_path / "broker")
    sub = Subscriber(broker.port, ["cam/#"])
    try:
        _, events, _ = _camera(tmp_path, scene, "{col}", extra=("--mqtt", broker.url("cam")))
        sub.wait_for("cam/status", b"offline")
        time.sleep(0.3)
    finally:
        sub.close()
        broker.stop()
    got = [json.loads(p) for p in sub.on("cam/events")]
    for g in got:
        g.pop("seq")
    assert got == events[1:]  # after run_start, the very events of --events
    labels = [g for g in got if g["event"] == "track_label"]
    assert {g["label"] for g in labels} == set(COLOURS)
    assert any("colours" in g.get("secondary", {}) for g in got if g["event"] == "track_end")


@pytest.mark.subprocess
def test_prometheus_counts_the_second_stage(scene, tmp_path):
    """/metrics over real HTTP while the camera runs: calls, crops, tracks and calls per track
    of the secondary, under its name; the crops refused for size under reason="size"."""
    import re
    import urllib.request

    from tests.ports import free_ports

    det, col, video = scene
    port = free_ports(1)[0]
    app = _running(
        det,
        video,
        "--loop",
        "--secondary",
        col,
        "--secondary",
        f"{col}:min=100,name=big",
        "--metrics",
        f"127.0.0.1:{port}",
        "--duration",
        "60",
    )
    try:
        text, deadline = "", time.monotonic() + 45
        want = r'edgert_secondary_calls_total\{model="colours"\} ([0-9.]+)'
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                pass
            m = re.search(want, text)
            if m and float(m.group(1)) >= 3:
                break
            time.sleep(0.5)
        value = lambda name: float(re.search(name + r" ([0-9.e+]+)", text).group(1))  # noqa: E731
        calls = value(r'edgert_secondary_calls_total\{model="colours"\}')
        assert calls >= 3 and value(r'edgert_secondary_crops_total\{model="colours"\}') >= calls
        assert value(r'edgert_secondary_tracks_total\{model="colours"\}') >= 3
        assert 1 <= value(r'edgert_secondary_calls_per_track\{model="colours"\}') <= 3
        assert value(r'edgert_secondary_refused_total\{model="big",reason="size"\}') > 0
        assert value(r'edgert_secondary_calls_total\{model="big"\}') == 0
    finally:
        app.terminate()
        app.wait(10)


def test_a_frame_the_gate_skipped_gives_no_crop(tmp_path):
    """The stage itself with a real tracker and the real colour classifier: a track on a frame
    the gate skipped (inferred False) gives no crop; the same track on an inferred frame does,
    and its answer is the track's label."""
    from edgert.apps.camera.delivery import FrameHandler
    from edgert.apps.camera.features.secondary_models import Secondary
    from edgert.apps.camera.features.secondary_stage import SecondaryStage
    from edgert.apps.camera.frame import Frame
    from edgert.runtime.results import Detection
    from edgert.runtime.tasks import load_task_model
    from edgert.runtime.tracking import make_tracker

    bundle = colour_classifier_bundle(tmp_path / "col")
    picture = np.zeros((H, W, 3), np.uint8)
    _square(picture, 100, 100, "red")
    box = (70.0, 70.0, 130.0, 130.0)
    tracker = make_tracker("bytetrack", lost_seconds=1.0)
    for i in range(4):  # confirmed
        tracks = tracker.update([Detection(box, 0.9, 0, "blob")], i * 0.1)
    assert tracks and tracks[0].confirmed
    handler = FrameHandler([None])
    stage = SecondaryStage(
        [Secondary(SecondarySpec(str(bundle), window_s=0.0), load_task_model(bundle), "colours")]
    )
    try:
        (s,) = stage.secondaries
        skipped = Frame(4, 0.4, picture, inferred=False, tracks=tracks, batch=1)
        stage.on_frame(skipped, handler)
        assert not s.tracks and s.counters()["tracks_attempted"] == 0
        inferred = Frame(5, 0.5, picture, tracks=tracks, batch=2)
        stage.on_frame(inferred, handler)
        (state,) = s.tracks.values()
        assert state.attempts == 1
        (said,) = stage.finish()
        assert said["label"] == "red" and said["track_id"] == tracks[0].track_id
    finally:
        stage.close()


def test_a_full_queue_drops_the_lowest_quality_crop_and_gives_the_attempt_back(
    tmp_path, monkeypatch
):
    """The worker held (its lock taken): three crops into a queue of two; the worst goes,
    counted, and its track may try again (its attempt given back)."""
    from edgert.apps.camera.features import secondary_stage
    from edgert.apps.camera.features.secondary_models import Crop, Secondary, TrackState
    from edgert.apps.camera.features.secondary_stage import SecondaryStage
    from edgert.runtime.tasks import load_task_model

    monkeypatch.setattr(secondary_stage, "QUEUE_CROPS", 2)
    bundle = colour_classifier_bundle(tmp_path / "col")
    s = Secondary(SecondarySpec(str(bundle)), load_task_model(bundle), "colours")
    stage = SecondaryStage([s])
    image = np.zeros((40, 40, 3), np.uint8)
    crops = [Crop((0, i), image, (0, 0), q, 0.0, 0, 1600.0) for i, q in enumerate((0.5, 0.1, 0.9))]
    try:
        with stage.cond:  # the worker cannot take anything meanwhile
            for c in crops:
                s.tracks[c.key] = TrackState("blob", attempts=1, pending=1)
            stage._admit(s, list(crops))
            assert [c.quality for _, cs in stage.queue for c in cs] == [0.5, 0.9]
            assert s.counters()["dropped"] == 1
            assert s.tracks[(0, 1)].attempts == 0 and s.tracks[(0, 0)].attempts == 1
            # crops of one track, of other sizes, waiting together (a track re-checked while
            # the worker is behind): the worst goes by identity, not by comparing images
            same = [
                Crop((0, 0), np.zeros((20 + i, 30, 3), np.uint8), (0, 0), q, 0.0, 0, 600.0)
                for i, q in enumerate((0.7, 0.2))
            ]
            s.tracks[(0, 0)].attempts, s.tracks[(0, 0)].pending = 3, 3
            stage._admit(s, same)
            assert sorted(c.quality for _, cs in stage.queue for c in cs) == [0.7, 0.9]
            assert s.counters()["dropped"] == 3 and s.tracks[(0, 0)].attempts == 1
    finally:
        stage.close()


def _inverse_colour_bundle(folder):
    """The colour classifier with its labels turned around (blue, green, red): a model that
    disagrees, so a swap shows in the labels."""
    from edgert.export import export_model

    bundle = colour_classifier_bundle(folder)
    (folder / "labels2.txt").write_text("blue\ngreen\nred\n")
    return export_model(
        str(folder / "colours.onnx"),
        folder / "swapped.edgert",
        task="classify",
        labels=folder / "labels2.txt",
        preprocess={"resize": "stretch", "size": "16x16", "scale": 1 / 255},
    ).bundle, bundle


@pytest.mark.subprocess
def test_a_secondary_is_swapped_through_the_model_endpoint(scene, tmp_path):
    """POST /model naming the secondary: 202, the model replaced between two calls, the live
    tracks labelled again by the new one (its labels turned around: red becomes blue); a path
    outside --allow-models is 403, an unknown name 404, a detector for a classifier refused
    with an event; GET /model lists the secondaries; the primary is untouched."""

    from tests.apps.test_hot_swap import _http, answered
    from tests.ports import free_ports

    det, _, _ = scene
    models = tmp_path / "models"
    swapped, col = _inverse_colour_bundle(models / "col")
    # two squares going to and fro, whole periods in the clip: looped (a file runs as fast as it
    # is read: 1,200 frames took 1.4 s, and the camera ended before the swap was asked for), the
    # motion goes on across the loop and their tracks live through the swap
    video = tmp_path / "long.mp4"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"mp4v"), FPS, (W, H))
    for t in range(1200):
        img = np.zeros((H, W, 3), np.uint8)
        _square(img, 160 + 100 * np.sin(2 * np.pi * 10 * t / 1200), 50, "red")
        _square(img, 160 - 100 * np.sin(2 * np.pi * 8 * t / 1200), 190, "blue")
        writer.write(img)
    writer.release()
    port = free_ports(1)[0]
    url = f"http://127.0.0.1:{port}/model"
    app = _running(
        det,
        video,
        "--loop",
        "--secondary",
        col,
        "--metrics",
        f"127.0.0.1:{port}",
        "--model-endpoint",
        "--allow-models",
        models,
        "--allow-models",
        det.parent,
        "--json",
        "--events",
        tmp_path / "events.jsonl",
        "--duration",
        "60",
    )
    try:
        answered(url, app, ready=lambda got: got.get("secondary"))
        code, got = _http("GET", url)
        assert code == 200 and got["secondary"][0]["name"] == "colours", got
        assert _http("POST", url, {"secondary": "nope", "bundle": str(swapped)})[0] == 404
        code, said = _http("POST", url, {"secondary": "colours", "bundle": str(tmp_path)})
        assert code == 403 and "--allow-models" in said["error"], said
        code, said = _http("POST", url, {"secondary": "colours", "bundle": str(det)})
        assert code == 202, said  # allowed, but a detector for a classifier: refused later
        time.sleep(1.0)
        code, said = _http("POST", url, {"secondary": "colours", "bundle": str(swapped)})
        assert code == 202 and said["secondary"] == "colours", said
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _http("GET", url)[1]["secondary"][0]["swaps"] < 1:
            time.sleep(0.2)
        time.sleep(3.0)  # the live tracks labelled again by the new model
    finally:
        app.terminate()
        out, err = app.communicate(timeout=30)
    summary = json.loads(out)
    (r,) = summary["secondary"]
    assert r["swaps"] == 1 and r["bundle"] == str(swapped), r
    assert summary["model"]["swaps"] == 0  # the primary was not swapped
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    refused = [e for e in events if e["event"] == "model_swap_refused"]
    assert len(refused) == 1 and refused[0]["secondary"] == "colours", refused
    assert "cannot replace a classify one" in refused[0]["reason"]
    swap = next(i for i, e in enumerate(events) if e["event"] == "model_swap")
    assert events[swap]["secondary"] == "colours" and events[swap]["bundle"] == str(swapped)
    labels = [(i, e) for i, e in enumerate(events) if e["event"] == "track_label"]
    assert {e["label"] for i, e in labels if i < swap} == {"red", "blue"}
    first = {}
    for i, e in labels:
        first.setdefault(e["track_id"], (i, e["label"]))
    inverse = {"red": "blue", "green": "green", "blue": "red"}
    relabelled = [
        (first[e["track_id"]][1], e["label"])
        for i, e in labels
        if i > swap and first[e["track_id"]][0] < swap
    ]
    shown = [
        (e["event"], e.get("track_id"), e.get("label"), e.get("frame"))
        for e in events[swap - 10 : swap + 14]
    ]
    assert relabelled, shown  # labelled again by the new one
    assert all(after == inverse[before] for before, after in relabelled), relabelled


@pytest.mark.subprocess
def test_two_secondaries_named_alike_are_refused_and_another_task_is_left_out(scene, tmp_path):
    """Two secondaries given one name: one sentence before the run. A model that is neither a
    classifier nor finds boxes (a generic one): one sentence, and the camera runs without it."""
    from edgert.export import export_model

    det, col, video = scene
    proc = run_cli(
        "camera",
        det,
        "--source",
        video,
        "--headless",
        "--conf",
        "0.75",
        "--secondary",
        f"{col}:name=kind",
        "--secondary",
        f"{col}:name=kind",
    )
    assert_user_error(proc, "name=kind is taken")
    generic = export_model(
        str(col.parent / "colours.onnx"),
        tmp_path / "generic.edgert",
        task="generic",
        preprocess={"resize": "stretch", "size": "16x16", "scale": 1 / 255},
    ).bundle
    proc = run_cli(
        "camera",
        det,
        "--source",
        video,
        "--headless",
        "--conf",
        "0.75",
        "--json",
        "--secondary",
        generic,
        "--secondary",
        col,
    )
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "--secondary" in line]
    assert len(said) == 1 and "a secondary is a classifier, finds boxes or embeds" in said[0], said
    (r,) = json.loads(proc.stdout)["secondary"]
    assert r["name"] == "colours" and r["calls"] >= 1


def test_the_overlay_captions_say_the_second_stage_labels():
    """The boxes drawn on the overlay (the web viewer, the video file, snapshots drawn) carry
    what each track's secondaries said after its own label and score; the words are drawn (the
    picture differs from the one without them)."""
    from edgert.runtime.results import Detection, Result
    from edgert.runtime.tasks import detect

    plain = Detection((20.0, 40.0, 120.0, 140.0), 0.9, 0, "person", track_id=4)
    said = plain.with_extras(colours={"label": "red", "confidence": 0.8, "attempts": 2}, age_s=1.5)
    assert detect.caption(plain) == "#4 person 0.90"
    assert detect.caption(said) == "#4 person 0.90 red"
    a, b = np.zeros((160, 320, 3), np.uint8), np.zeros((160, 320, 3), np.uint8)
    detect.draw(a, Result.of_objects([plain], "detect"))
    detect.draw(b, Result.of_objects([said], "detect"))
    assert (a != b).any()
