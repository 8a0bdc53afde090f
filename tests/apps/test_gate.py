"""Event-gated inference (issue 35): the motion detector on rendered frames (a moving object, a
light change, sensor noise, a masked region), the gate's reasons adding up, a pipeline of several
streams where only one moves, and a rendered scene through a real detector bundle (ONNX Runtime)
whose line and zone counts are exact with the gate on, the same as with it off."""

from __future__ import annotations

import json
import re

import cv2
import numpy as np
import pytest

from edgert.apps.camera.frame import Frame, Steps
from edgert.apps.camera.gate import (
    TRACK_CHECK_S,
    GateOptions,
    MotionDetector,
    StreamGate,
    gates_for,
    parse_mask,
)
from edgert.apps.camera.pipeline import Pipeline
from edgert.apps.camera.sources import FrameSource
from edgert.runtime.errors import SourceError
from edgert.runtime.tracking.hints import Hint
from tests.apps.test_tracking_camera import square_at
from tests.conftest import assert_user_error, run_cli
from tests.tiny import blob_detector_bundle

W, H = 640, 480


def background(level=90, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    img = np.full((H, W, 3), level, np.float32)
    img[:, : W // 2] += 30  # some structure
    if noise:
        img += rng.normal(0, noise, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def with_square(img, x, y, side=60, value=250):
    out = img.copy()
    out[y : y + side, x : x + side] = value
    return out


def test_a_moving_object_is_motion_and_a_still_scene_is_not():
    detect = MotionDetector()
    frames = [background() for _ in range(5)]
    assert not any(detect(f) for f in frames)
    assert [detect(with_square(background(), 100 + 20 * i, 200)) for i in range(5)] == [True] * 5


def test_a_light_change_is_not_motion_for_long():
    detect = MotionDetector()
    for _ in range(3):
        detect(background(90))
    brighter = [detect(background(150)) for _ in range(10)]  # the lights went on
    assert not any(brighter) and detect.light_changes == 1
    assert detect(with_square(background(150), 300, 200))  # and motion is still found after


def test_sensor_noise_is_not_motion():
    detect = MotionDetector(sensitivity=0.5)
    hits = [detect(background(noise=6.0, seed=i)) for i in range(30)]
    assert sum(hits) == 0


def test_a_masked_region_is_ignored():
    # a swaying tree in the top-left quarter (fractions of the frame), an object elsewhere
    _, tree = parse_mask("0,0,0.5,0,0.5,0.5,0,0.5", 1)
    detect = MotionDetector(masks=[tree])
    detect(background())
    swaying = [detect(with_square(background(), 40 + 30 * (i % 3), 40)) for i in range(6)]
    assert not any(swaying)
    assert detect(with_square(background(), 450, 350))
    with pytest.raises(SourceError, match="at least three points"):
        parse_mask("1,2,3,4", 1)
    with pytest.raises(SourceError, match="no stream 3"):
        parse_mask("3:0,0,1,0,1,1", 2)


def test_motion_in_frames_the_decoder_scaled_is_found_in_the_cameras_pixels():
    """With the motion gate the decoder still scales frames to the model's size (no full-frame
    conversion and copy per frame): the working picture is the same 320-pixel-wide one, so the
    same frames hold motion; regions come in the camera's pixels, within a few of the full
    frame's; a mask in pixels is the camera's pixels (a square right of a 400-pixel mask is
    motion; read as the scaled frame's pixels the mask would cover it)."""
    _, mask = parse_mask("0,0,400,0,400,720,0,720", 1)  # the camera's left 400 of 1280 pixels
    full, scaled = MotionDetector(masks=[mask]), MotionDetector(masks=[mask])
    cam = np.full((720, 1280, 3), 60, np.uint8)
    cam[:, 640:] = 110
    got_full, got_scaled = [], []
    for i in range(12):
        img = cam.copy()
        if i:
            x = 450 + 30 * i  # right of the mask, moving right
            img[300:380, x : x + 80] = 250
            img[100:180, 40 + 20 * i : 120 + 20 * i] = 250  # inside the mask: never motion
        small = cv2.resize(img, (640, 360), interpolation=cv2.INTER_LINEAR)
        got_full.append(full.regions(img, i * 0.1))
        got_scaled.append(scaled.regions(small, i * 0.1, (720, 1280)))
    assert [bool(r) for r in got_scaled] == [bool(r) for r in got_full]
    assert sum(bool(r) for r in got_full) >= 8
    for a, b in zip(got_full, got_scaled, strict=True):
        assert len(a) == len(b) == (1 if a else 0)
        if a:
            assert np.abs(np.subtract(a[0], b[0])).max() <= 16, (a, b)
            assert a[0][0] >= 400 and a[0][1] >= 250  # the moving square, not the masked one


def _frame(i, t, image, stream=0):
    return Frame(i, t, image, stream)


def test_the_reasons_add_up_and_a_still_arrival_is_found_by_the_keyframe():
    gate = StreamGate(GateOptions.parse("motion", keyframe_s=1.0))
    quiet = background()
    decisions = [gate.decide(_frame(i, i * 0.1, quiet)) for i in range(30)]  # 3 s at 10 fps
    assert decisions[:3] == ["start"] * 3
    keyframes = [i for i, d in enumerate(decisions) if d == "keyframe"]
    assert keyframes == [12, 22]  # 1 s after the last inferred frame (frame 2 at 0.2 s)
    r = gate.report()
    assert r["inferred"] + r["skipped"] == 30 and r["reasons"] == {"start": 3, "keyframe": 2}
    # an object the tracker follows (its box moving right 80 px/s): its motion is explained,
    # re-inferred every TRACK_CHECK_S; motion away from it is a new object, inferred at once
    box = (100.0, 200.0, 160.0, 260.0)
    gate.hints = {"t": 3.0, "tracks": (Hint(box, (80.0, 0.0), True),)}
    on_track = [
        gate.decide(_frame(30 + k, 3.0 + 0.1 * k, with_square(quiet, 100 + 8 * k, 200)))
        for k in range(7)
    ]
    assert on_track == ["tracks", None, None, "tracks", None, None, "tracks"]
    assert gate.decide(_frame(37, 3.7, with_square(quiet, 450, 50))) == "motion"
    gate.hints = {"t": 3.7, "tracks": (Hint(box, (80.0, 0.0), True, 0.25),)}
    assert gate.decide(_frame(38, 3.8, quiet)) is None  # reaches a line in 0.25 s: not yet
    assert gate.decide(_frame(39, 3.9, quiet)) == "geometry"  # a frame before it: inferred
    assert gate.decide(_frame(40, 4.0, quiet)) == "geometry"  # and a frame after it
    assert gate.decide(_frame(41, 4.1, quiet)) is None  # bracketed: the rest is predicted
    gate.hints = {"t": 3.9, "tracks": (Hint(box, (0.0, 0.0), False, 0.0),)}
    assert gate.decide(_frame(42, 4.2, quiet)) is None  # standing at the line: the keyframes
    gate.hints = {"t": 4.2, "tracks": (), "missing": 1}  # the last inferred frame missed a track
    assert gate.decide(_frame(43, 4.3, quiet)) == "tracks"  # TRACK_CHECK_S after 4.0: looked for
    # a gap in the capture times (a reconnect): the stream starts again
    assert gate.decide(_frame(41, 9.0, quiet)) == "start"
    interval = StreamGate(GateOptions.parse("interval:4"))
    got = [interval.decide(_frame(i, i * 0.1, quiet)) for i in range(11)]
    assert got == ["start"] * 3 + [None, "interval", None, None, None, "interval", None, None]


def test_gate_options_say_what_is_wrong():
    for bad, what in (("sometimes", "motion, interval:N"), ("interval:0", "interval:N")):
        with pytest.raises(SourceError, match=what):
            GateOptions.parse(bad)
    assert gates_for(GateOptions(), 2) is None


def test_a_gate_policy_is_a_class_and_a_row_of_the_table(monkeypatch):
    """A new --gate mode through POLICIES alone: parsed, deciding, said at start-up, counted."""
    from edgert.apps.camera import gate as gates
    from edgert.apps.camera.features import gate_says

    class Bright(gates.Policy):  # infer a frame only when it is bright
        form = "bright"

        def decide(self, gate, t, regions):
            return "keyframe" if gate.frame_mean > 100 else None

        def says(self, o):
            return "bright frames"

    monkeypatch.setitem(gates.POLICIES, "bright", Bright())
    o = GateOptions.parse("bright")
    assert (
        o.mode == "bright"
        and o.on
        and "bright" in str(pytest.raises(SourceError, GateOptions.parse, "dim").value)
    )
    g = StreamGate(o)
    got = []
    for i, level in enumerate((0, 0, 0, 200, 50, 250)):
        g.frame_mean = level  # what this toy policy reads
        got.append(g.decide(_frame(i, i * 0.1, np.full((48, 64, 3), level, np.uint8))))
    assert got == ["start"] * 3 + ["keyframe", None, "keyframe"]
    assert g.report()["reasons"] == {"start": 3, "keyframe": 2} and g.report()["skipped"] == 1
    assert gate_says(o, "detect", True).startswith("bright: inference on bright frames")


class Still(FrameSource):
    """A file-like stream (lossless): ``n`` frames at 10 fps, the same picture, or a square
    moving right when ``moving``."""

    live = False

    def __init__(self, n, moving=False):
        self.n, self.i, self.moving = n, 0, moving
        self.description = "moving" if moving else "still"
        self.media_time = None

    def read(self):
        if self.i >= self.n:
            return None
        img = background()
        if self.moving:
            img = with_square(img, 10 + 8 * self.i, 200)
        self.media_time = self.i * 0.1
        self.i += 1
        return img, 1000.0 + self.i * 0.1


def test_quiet_streams_cost_no_inference_and_keep_their_order():
    inferred: list = []

    def infer(frames):
        inferred.append([(f.stream, f.index) for f in frames])
        return None

    steps = Steps(lambda f: None, infer, lambda frames, out: None)
    seen: list = []
    sources = [Still(40, moving=True), Still(40), Still(40)]
    gates = gates_for(GateOptions.parse("motion", keyframe_s=10.0), 3)
    p = Pipeline(
        sources, steps, lambda f: seen.append((f.stream, f.index, f.inferred)), gates=gates
    )
    p.run()
    per_stream = {k: [i for s, i, _ in seen if s == k] for k in range(3)}
    assert all(per_stream[k] == list(range(40)) for k in range(3))  # every frame, in order
    calls = [x for batch in inferred for x in batch]
    assert sorted(i for s, i in calls if s == 1) == [0, 1, 2]  # the quiet ones: their start only
    assert sorted(i for s, i in calls if s == 2) == [0, 1, 2]
    assert len([1 for s, _ in calls if s == 0]) >= 35  # the moving one: (nearly) every frame
    stats = p.stats()
    for st in stats["streams"]:
        g = st["gate"]
        assert g["inferred"] + g["skipped"] == st["frames_processed"] == 40
    assert sum(k * v for k, v in p.batch_sizes.items()) == len(calls)  # skipped never batched


def quiet_scene(path, fps=10):
    """Mostly quiet, 20 s at 10 fps: A crosses the door (x=160) left to right through the pen's
    corner and leaves (frames 0-45), nothing happens for 11 s, then B crosses right to left and
    leaves (frames 160-205)."""
    w, h = 320, 240
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
    for i in range(200):
        img = np.zeros((h, w, 3), np.uint8)
        if i <= 45:
            square_at(img, 10 + 8 * i, 60)
        if i >= 160:
            square_at(img, 330 - 8 * (i - 160), 170)
        writer.write(img)
    writer.release()
    return path


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gate")
    return blob_detector_bundle(folder / "det"), quiet_scene(folder / "scene.mp4")


def _run(bundle, video, out, *gate):
    proc = run_cli(
        "camera",
        bundle,
        "--source",
        video,
        "--headless",
        "--conf",
        "0.75",
        "--json",
        "--line",
        "door=160,0,160,240",
        "--zone",
        "pen=200,0,320,0,320,120,200,120",
        "--events",
        out / "events.jsonl",
        "--jsonl",
        out / "frames.jsonl",
        *gate,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.subprocess
def test_counts_are_exact_with_the_gate_and_skipped_frames_say_they_are_predicted(scene, tmp_path):
    bundle, video = scene
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    off = _run(bundle, video, tmp_path / "off")
    on = _run(bundle, video, tmp_path / "on", "--gate", "motion", "--keyframe", "1")
    counts, always = on["streams"][0]["counts"], off["streams"][0]["counts"]
    # the same counts; a dwell time within one track check (the last frame a lost track was seen
    # may have been skipped)
    dwell = counts["pen"].pop("dwell_s_mean"), always["pen"].pop("dwell_s_mean")
    assert counts == always and abs(dwell[0] - dwell[1]) <= TRACK_CHECK_S + 1e-6
    assert (counts["door"]["in"], counts["door"]["out"]) == (1, 1)
    assert counts["pen"]["entries"] == 1 and counts["pen"]["exits"] == 1
    gate = on["streams"][0]["gate"]
    assert gate["inferred"] + gate["skipped"] == on["frames_processed"] == 200
    assert gate["skipped"] >= 80, gate  # the quiet 11 s: keyframes only
    records = [json.loads(x) for x in (tmp_path / "on" / "frames.jsonl").read_text().splitlines()]
    skipped = [r for r in records[1:] if r.get("inferred") is False]
    assert skipped and all(r["gate"] is None for r in skipped)
    assert all(res.get("predicted") for r in skipped for res in r["results"])
    kinds = lambda d: sorted(  # noqa: E731
        json.loads(x)["event"] for x in (d / "events.jsonl").read_text().splitlines()
    )
    assert kinds(tmp_path / "on") == kinds(tmp_path / "off")


@pytest.mark.subprocess
def test_a_bad_gate_is_one_sentence(scene):
    bundle, video = scene
    assert_user_error(run_cli("camera", bundle, "--source", video, "--gate", "often"), "--gate")
    assert_user_error(
        run_cli("camera", bundle, "--source", video, "--gate", "motion", "--motion-mask", "1,2"),
        "--motion-mask",
    )


@pytest.mark.subprocess
def test_joules_per_camera_hour_with_a_power_sensor(scene, tmp_path):
    """A recreated Orin NX board (INA3221 VDD_IN at 7.5 W: tests/power_plant.py) and two streams
    of the 20 s scene: each covered 20 s of camera time, and the run's energy is given per
    camera-hour (what a quiet camera costs with the gate on)."""
    from tests.power_plant import write_tree

    bundle, video = scene
    write_tree(tmp_path / "sys", 7.5)
    proc = run_cli(
        "camera",
        bundle,
        "--source",
        video,
        "--source",
        video,
        "--headless",
        "--json",
        "--gate",
        "motion",
        "--sysfs-root",
        tmp_path / "sys",
    )
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert [st["camera_s"] for st in s["streams"]] == [pytest.approx(20.0, abs=1e-6)] * 2
    assert s["power_w"] == pytest.approx(7.5, abs=0.01)
    assert s["j_per_camera_hour"] == pytest.approx(s["power_w"] * s["seconds"] / 40.0 * 3600)


@pytest.mark.subprocess
def test_target_fps_infers_evenly_spaced_frames_and_keeps_the_counts(scene, tmp_path):
    """A 10 fps scene held to 5 inferred frames a second: every other frame, evenly; the frames
    between are predicted and the line and zone counts are those of every frame."""
    bundle, video = scene
    (tmp_path / "paced").mkdir()
    (tmp_path / "all").mkdir()
    every = _run(bundle, video, tmp_path / "all")
    paced = _run(bundle, video, tmp_path / "paced", "--target-fps", "5")
    gate = paced["streams"][0]["gate"]
    assert gate["mode"] == "off" and gate["target_fps"] == 5
    assert gate["inferred"] + gate["skipped"] == paced["frames_processed"] == 200
    assert gate["reasons"] == {"rate": 100} and gate["skipped"] == 100, gate
    records = [
        json.loads(x) for x in (tmp_path / "paced" / "frames.jsonl").read_text().splitlines()
    ]
    inferred = [r["frame"] for r in records[1:] if r["inferred"]]
    assert inferred == list(range(0, 200, 2))  # evenly spaced: 0.2 s apart
    counts, always = paced["streams"][0]["counts"], every["streams"][0]["counts"]
    assert (counts["door"]["in"], counts["door"]["out"]) == (
        always["door"]["in"],
        always["door"]["out"],
    )
    assert counts["pen"]["entries"] == always["pen"]["entries"] == 1
    # with a gate as well, its frames are thinned to the rate
    (tmp_path / "both").mkdir()
    both = _run(bundle, video, tmp_path / "both", "--gate", "motion", "--target-fps", "2")
    g = both["streams"][0]["gate"]
    assert g["inferred"] <= 2 * 20 + 1 and g["rate_skipped"] > 0, g
    assert_user_error(
        run_cli("camera", bundle, "--source", video, "--target-fps", "0"), "--target-fps"
    )
    assert_user_error(
        run_cli("camera", bundle, "--source", video, "--clocks", "auto"), "--target-fps"
    )


@pytest.mark.subprocess
def test_a_tall_thin_frame_gets_a_small_grey_copy(tmp_path):
    """The grey copy fits in WIDTH x WIDTH whatever the frame's shape: a 2x4000 picture was a
    320x640000 float background (2.5 GB); 1x12000 ran out of memory in OpenCV. A folder of
    them runs through the real camera with the gate on."""
    from edgert.apps.camera.motion import WIDTH

    for w, h in ((2, 4000), (1, 12000), (4000, 2), (640, 480)):
        detect = MotionDetector()
        frame = np.zeros((h, w, 3), np.uint8)
        detect(frame)
        moved = frame.copy()
        moved[: h // 2, : max(1, w // 2)] = 255
        detect(moved)
        small_h, small_w = detect.background.shape
        assert small_w <= WIDTH and small_h <= WIDTH and detect.background.nbytes <= 4 * WIDTH**2
    assert MotionDetector()._prepare(np.zeros((480, 640, 3), np.uint8)).shape == (240, 320)
    thin = tmp_path / "thin"
    thin.mkdir()
    for i in range(6):
        img = np.zeros((12000, 1, 3), np.uint8)
        img[i * 1000 : i * 1000 + 2000] = 255
        cv2.imwrite(str(thin / f"{i:02d}.png"), img)
    bundle = blob_detector_bundle(tmp_path / "det")
    proc = run_cli("camera", bundle, "--source", thin, "--headless", "--gate", "motion", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["frames_processed"] == 6


@pytest.mark.subprocess
def test_motion_masks_and_gate_options_are_refused_as_lines_and_zones_are(scene):
    bundle, video = scene

    def camera(*args):
        return run_cli(
            "camera", bundle, "--source", video, "--headless", "--max-frames", "3", *args
        )

    cases = [
        (("--gate", "motion", "--motion-mask", "1e400,0,1e400,5,0,5"), "not a finite number"),
        (("--gate", "motion", "--motion-mask", "0,0,100,100,100,0,0,100"), "cross"),
        (("--gate", "motion", "--motion-mask", "5000,5000,6000,5000,6000,6000"), "outside the"),
        (("--gate", "motion", "--motion-mask", "0,0,1,-0.2,1,1"), "as fractions"),
        (("--gate", "off", "--keyframe", "5"), "--keyframe apply to --gate motion"),
        (("--motion-mask", "0,0,10,0,10,10"), "--motion-mask apply to --gate motion"),
        (("--gate", "interval:3", "--motion-sensitivity", "0.9"), "the gate is interval"),
        (("--gate", ""), "give motion, interval:N"),
    ]
    for args, words in cases:
        proc = camera(*args)
        assert_user_error(proc, words)
        assert "Warning" not in proc.stderr
    ok = camera("--gate", "motion", "--motion-mask", "0,0,0.5,0,0.5,0.5", "--keyframe", "1")
    assert ok.returncode == 0, ok.stderr


def _path(t, start, turn, speed, pause=0.0, back=True):
    """x at ``t`` s of a walk from ``start`` to ``turn`` at ``speed`` px/s, a pause there, and
    back to ``start`` (or on out of the frame)."""
    go = abs(turn - start) / speed
    sign = 1 if turn > start else -1
    if t < 0:
        return None
    if t <= go:
        return start + sign * speed * t
    if t <= go + pause:
        return turn
    later = t - go - pause
    if back:
        return turn - sign * speed * later if later <= go else None
    return turn + sign * speed * later


def turning_scene(path, repeats=3, fps=10):
    """Fast walkers (180-260 px/s, 18-26 px a frame: further than their 60 px box between two
    track checks) on three rows, the line at x=160: one
    crosses 30 px and turns back at once (in, out), one stops 15 px short of it, waits and goes
    back (nothing), one crosses straight (in). ``repeats`` times, 8 s apart. The rows sit on
    the blob detector's cell grid (one box per square). Truth: in 2, out 1 per repeat."""
    w, h = 320, 240
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
    for i in range(int(8 * repeats * fps) + 10):
        t = i / fps
        img = np.zeros((h, w, 3), np.uint8)
        k, tt = divmod(t, 8.0)
        if k < repeats:
            for x, y in (
                (_path(tt, -40, 190, 260.0), 40),
                (_path(tt - 0.5, 360, 175, 240.0, pause=0.6), 120),
                (_path(tt - 1.0, -40, 200, 180.0, back=False), 200),
            ):
                if x is not None:  # the part of the 60 px square inside the frame
                    x0, x1 = max(0, round(x) - 30), min(w, round(x) + 30)
                    img[y - 30 : y + 30, x0 : max(x0, x1)] = 255
        writer.write(img)
    writer.release()
    return path


@pytest.mark.subprocess
def test_line_counts_with_the_gate_equal_always_on_when_walkers_turn_or_stop_at_the_line(
    scene, tmp_path
):
    """The review's F17, reproduced with fast walkers that turn just past the line or stop just
    short of it: a turn between inferred frames switched the track's ID (its crossing back was
    never counted) and a stop's predicted boxes crossed the line that the object never did.
    With the gate inferring while a moving track is within reach of a line, the counts equal
    always-on's, in every run and on every stream of a run of four."""
    bundle, _ = scene
    video = turning_scene(tmp_path / "turns.mp4")

    def counts(*gate, streams=1):
        proc = run_cli(
            *("camera", bundle, *[a for _ in range(streams) for a in ("--source", video)]),
            *("--headless", "--conf", "0.75", "--json", "--line", "door=160,0,160,240", *gate),
        )
        assert proc.returncode == 0, proc.stderr
        return [
            (s["counts"]["door"]["in"], s["counts"]["door"]["out"])
            for s in json.loads(proc.stdout)["streams"]
        ]

    always = counts()
    assert always == [(6, 3)], always  # the truth: 2 in and 1 out, three times
    for _ in range(3):
        assert counts("--gate", "motion") == always
    assert counts("--gate", "motion", streams=4) == always * 4


@pytest.mark.subprocess
def test_each_camera_s_own_gate_and_rate_hold_in_one_run(scene, tmp_path):
    """Two cameras on the same footage, in one run: the first's own mode (interval:4), the
    second the run's (off, every frame); then the first's own rate under the run's motion gate.
    Each stream's gate reports its own mode and share, the start line says each."""
    bundle, video = scene
    two = ("--source", video, "--source", video, "--headless")
    proc = run_cli("camera", bundle, *two, "--stream-gate", "0:interval:4")
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout
    assert "gate: off: inference on every frame; stream 0: interval: inference on one frame" in said
    # frames 1, 5, 9, ... of 200 and the stream's first frames (start); the other every frame
    first = re.search(r"\[0\] gate interval: (\d+) of 200 frames inferred .*interval (\d+)", said)
    assert first and 48 <= int(first.group(2)) <= int(first.group(1)) <= 53, said
    assert "[1] gate off: 200 of 200 frames inferred" in said
    two = (*two, "--json")
    proc = run_cli(
        *("camera", bundle, *two, "--gate", "motion", "--stream-target-fps", "1:2"),
    )
    assert proc.returncode == 0, proc.stderr
    streams = json.loads(proc.stdout)["streams"]
    moved, capped = streams[0]["gate"], streams[1]["gate"]
    assert moved["mode"] == capped["mode"] == "motion"
    # 20 s of footage: at most 2 a second on the capped camera, well under the motion gate's own
    assert capped["inferred"] <= 2 * 20 + 3 < moved["inferred"]
    assert capped["reasons"].get("rate", 0) == 0 and capped["rate_skipped"] > 0


@pytest.mark.subprocess
def test_a_camera_s_own_gate_that_names_no_stream_or_mode_is_one_sentence(scene):
    bundle, video = scene
    base = ("camera", bundle, "--source", video, "--headless")
    assert_user_error(run_cli(*base, "--stream-gate", "3:motion"), "there is no stream 3")
    assert_user_error(run_cli(*base, "--stream-gate", "0:sometimes"), "give motion, interval:N")
    assert_user_error(run_cli(*base, "--stream-gate", "motion"), "give STREAM:VALUE")
    assert_user_error(run_cli(*base, "--stream-target-fps", "0:-1"), "N above 0")
