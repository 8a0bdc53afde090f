"""The tracker and the counters on scripted scenes: boxes generated frame by frame with known
paths, crossings, occlusions, dropped frames and dwell times (issue 23)."""

from __future__ import annotations

import numpy as np
import pytest

from edgert.runtime.tasks.detection import Detection
from edgert.runtime.tracking import Tracker
from edgert.runtime.tracking.counting import Counters, LineCounter, ZoneCounter

FPS = 30.0


def box(cx: float, cy: float, w: float = 40, h: float = 80) -> tuple:
    return (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)


def det(cx, cy, score=0.9, label="person", class_id=0, w=40, h=80) -> Detection:
    return Detection(box(cx, cy, w, h), score, class_id, label)


def run(tracker, frames, times=None):
    """frames: a list of detection lists; returns per frame {track_id: box} (tracks are live
    objects that later updates change: their boxes are copied here)."""
    out = []
    for i, dets in enumerate(frames):
        t = times[i] if times is not None else i / FPS
        out.append({tr.track_id: tr.box for tr in tracker.update(dets, t)})
    return out


def test_two_crossing_paths_keep_their_ids():
    # A moves right, B moves left, at the same height: their boxes overlap mid-way
    frames = [[det(100 + 6 * i, 300), det(500 - 6 * i, 300)] for i in range(70)]
    seen = run(Tracker(), frames)
    first = {tid: b[0] for tid, b in seen[3].items()}
    assert len(first) == 2
    a = min(first, key=first.get)  # the left one starts on the left
    last = seen[-1]
    assert set(last) == set(first)  # no new IDs
    assert last[a][0] > last[next(i for i in last if i != a)][0]  # A ended on the right


@pytest.mark.parametrize("hidden_s, same", [(0.5, True), (1.6, False)])
def test_an_object_hidden_gets_its_id_back_within_the_buffer(hidden_s, same):
    tracker = Tracker(lost_seconds=1.0)
    t, ids = 0.0, []
    x = 100.0
    for _ in range(20):  # visible, moving right at 120 px/s
        ids += [tr.track_id for tr in tracker.update([det(x, 300)], t)]
        t += 1 / FPS
        x += 120 / FPS
    while hidden_s > 0:  # hidden: no detections, time and the object go on
        assert tracker.update([], t) == []  # predicted-only tracks are not returned
        t += 1 / FPS
        x += 120 / FPS
        hidden_s -= 1 / FPS
    after = []
    for _ in range(5):
        after += [tr.track_id for tr in tracker.update([det(x, 300)], t)]
        t += 1 / FPS
        x += 120 / FPS
    assert (set(after) == {ids[0]}) is same
    assert len(set(ids)) == 1


def test_every_other_frame_dropped_keeps_ids():
    """Three objects at 300 px/s; only odd frames are given (with their real timestamps)."""
    frames, times = [], []
    for i in range(0, 90, 2):
        frames.append([det(50 + 10 * i, 100 + 150 * k) for k in range(3)])
        times.append(i / FPS)
    seen = run(Tracker(), frames, times)
    ids = [set(s) for s in seen[2:]]
    assert all(s == ids[0] for s in ids) and len(ids[0]) == 3


def test_an_object_that_stops_between_sparse_updates_keeps_its_id():
    """Event-gated inference updates a tracker every third frame and coasts between: an object
    (face-sized, 128 px/s at 10 fps) that stops just after an update is three frames of motion
    short of its prediction at the next, too far for IoU 0.2; its last observed box still finds
    it (OC-SORT's recovery), where a new ID would be a second track start and zone entry."""
    tracker, ids, started = Tracker(), set(), []
    x, t = 100.0, 0.0
    for _ in range(10):  # every frame while it walks
        ids |= {tr.track_id for tr in tracker.update([det(x, 200, w=36, h=45)], t)}
        started += tracker.started
        x, t = x + 12.8, t + 0.1
    for k in range(1, 13):  # it stands at x from here; the gate infers every third frame
        t += 0.1
        if k % 3:
            assert [tr.track_id for tr in tracker.coast(t)] == [1]
            continue
        ids |= {tr.track_id for tr in tracker.update([det(x, 200, w=36, h=45)], t)}
        started += tracker.started
    assert ids == {1} and [tr.track_id for tr in started] == [1]
    assert tracker.missing() == 0
    tracker.update([], t + 0.3)  # a frame that misses it: the gate is told to look again
    assert tracker.missing() == 1


def test_ids_are_never_reused_and_state_stays_bounded():
    tracker = Tracker(lost_seconds=0.2)
    t = 0.0
    all_ids = set()
    for _ in range(300):  # objects pass one after another for 10 frames each
        for k in range(10):
            for tr in tracker.update([det(100 + 5 * k, 200)], t):
                all_ids.add(tr.track_id)
            t += 1 / FPS
        for _ in range(10):
            tracker.update([], t)
            t += 1 / FPS
        assert len(tracker.tracks) <= 1
    assert len(all_ids) == 300


def test_low_confidence_detections_extend_tracks_but_never_start_them():
    tracker = Tracker()
    frames = [[det(100 + 4 * i, 200, score=0.9)] for i in range(5)]
    frames += [[det(120 + 4 * i, 200, score=0.2)] for i in range(5)]  # occluded: low score
    seen = run(tracker, frames)
    assert all(len(s) == 1 for s in seen[1:]) and len({i for s in seen for i in s}) == 1
    assert run(Tracker(), [[det(100, 200, score=0.2)]] * 5) == [{}] * 5


def test_label_is_the_most_frequent_recent_one():
    tracker = Tracker()
    labels = ["car", "car", "truck", "car", "truck", "car"]
    for i, lab in enumerate(labels):
        out = tracker.update([det(100 + i, 100, label=lab, class_id=int(lab == "truck"))], i / FPS)
    assert out[0].label == "car" and out[0].class_id == 0
    # per-class association: a detection of another class does not join the track
    tracker = Tracker(per_class=True)
    first = tracker.update([det(100, 100, label="car")], 0.0)[0].track_id
    tracker.update([det(101, 100, label="car")], 1 / FPS)
    other = tracker.update([det(102, 100, label="truck", class_id=1)], 2 / FPS)
    assert all(tr.track_id != first for tr in other)


def test_line_counts_both_directions_once_per_crossing_with_jitter():
    """A vertical line at x=300. Object A crosses left->right twice and right->left once; object B
    comes from the left, stands on the line for 65 frames with its box jittering by +-3 px, then
    leaves to the right: one crossing."""
    line = LineCounter("door", [(300, 0), (300, 600)], anchor="center")
    counters = Counters(lines=[line])
    tracker = Tracker()
    path_a = list(np.linspace(200, 400, 40)) + list(np.linspace(400, 200, 40))
    path_a += list(np.linspace(200, 400, 40))
    rng = np.random.default_rng(0)
    events = []
    for i, xa in enumerate(path_a):
        xb = 200 + 4 * i if i < 25 else 300 + rng.uniform(-3, 3) if i < 90 else 304 + 4 * (i - 90)
        tracks = tracker.update([det(xa, 150), det(xb, 450)], i / FPS)
        events += counters.update(tracks, i / FPS)
    # looking from (300,0) down to (300,600): left->right on screen is right->left of the line: in
    assert line.counts == {"in": 3, "out": 1}
    assert sorted(e["direction"] for e in events) == ["in", "in", "in", "out"]


def test_line_counts_only_crossings_of_the_segment():
    line = LineCounter("gate", [(300, 0), (300, 100)], anchor="center")
    tracker = Tracker()
    for i in range(60):  # crosses x=300 at y=400: below the segment's end
        line.update(tracker.update([det(200 + 4 * i, 400)], i / FPS), i / FPS)
    assert line.counts == {"in": 0, "out": 0}


def test_zone_dwell_equals_the_scripted_time():
    """At 100 px/s through a zone 200 px wide: 2.0 s inside (within a frame), one entry, one exit."""
    zone = ZoneCounter("shelf", [(200, 200), (400, 200), (400, 400), (200, 400)], anchor="center")
    tracker = Tracker()
    events = []
    for i in range(int(5 * FPS)):
        t = i / FPS
        tracks = tracker.update([det(100 + 100 * t, 300, w=30, h=30)], t)
        events += zone.update(tracks, t)
    enter = [e for e in events if e["event"] == "zone_enter"]
    leave = [e for e in events if e["event"] == "zone_exit"]
    assert len(enter) == 1 and len(leave) == 1 and enter[0]["track_id"] == leave[0]["track_id"]
    assert leave[0]["dwell_s"] == pytest.approx(2.0, abs=1 / FPS)
    assert zone.report()["entries"] == 1 and zone.occupancy == 0


def test_fractions_resolve_to_pixels_and_bad_shapes_get_sentences():
    line = LineCounter("mid", [(0.5, 0), (0.5, 1)]).resolve(640, 480)
    assert line.points == [(320.0, 0.0), (320.0, 480.0)]
    cases = [
        (lambda: LineCounter("a", [(1, 2)]), "at least 2 points"),
        (lambda: LineCounter("a", [(1, 2), (1, 2)]), "both points"),
        (lambda: ZoneCounter("z", [(0, 0), (10, 0)]), "at least 3 points"),
        (lambda: ZoneCounter("z", [(0, 0), (10, 10), (10, 0), (0, 10)]), "crosses itself"),
        (lambda: ZoneCounter("z", [(0, 0), (5, 5), (10, 10)]), "no area"),
        (lambda: LineCounter("a", [(0, 0), (900, 10)]).resolve(640, 480), "outside the 640x480"),
        (lambda: LineCounter("a b", [(0, 0), (9, 9)]), "name"),
    ]
    for make, fragment in cases:
        with pytest.raises(ValueError, match=fragment):
            make()


def test_a_coasted_track_carries_its_last_keypoints_outline_and_oriented_box_moved_with_it():
    """A frame the gate skipped shows each track as the filter predicts it: its last detection's
    points (keypoints, mask outline, oriented corners and centre) go where the box went, scaled
    with its sides; visibility and other values are kept (issue 48)."""
    tracker = Tracker(min_hits=1)
    for i in range(10):  # moving right at 6 px per frame, keypoints at fixed spots in the box
        cx = 100 + 6 * i
        d = det(cx, 300).with_extras(
            keypoints=[[cx - 10, 280, 0.9], [cx + 10, 320, 0.2]],
            polygon=[[cx - 20, 260], [cx + 20, 260], [cx, 340]],
            rbox=[cx, 300, 40, 80, 0.3],
            corners=[[cx - 20, 260], [cx + 20, 340]],
            mask_area=1234.0,
        )
        (track,) = tracker.update([d], i / FPS)
    (coasted,) = tracker.coast(10 / FPS)
    obj = coasted.as_object()
    x1, y1, x2, y2 = obj.box
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    assert cx == pytest.approx(100 + 6 * 10, abs=1.5) and cy == pytest.approx(300, abs=0.5)
    kp = obj.extras["keypoints"]
    assert kp[0][0] == pytest.approx(cx - 10, abs=0.6) and kp[0][1] == pytest.approx(280, abs=0.6)
    assert kp[1][0] == pytest.approx(cx + 10, abs=0.6) and [kp[0][2], kp[1][2]] == [0.9, 0.2]
    assert obj.extras["polygon"][2] == [pytest.approx(cx, abs=0.6), pytest.approx(340, abs=0.6)]
    assert obj.extras["corners"][1][0] == pytest.approx(cx + 20, abs=0.6)
    rbox = obj.extras["rbox"]
    assert rbox[:2] == [pytest.approx(cx, abs=0.6), pytest.approx(300, abs=0.6)]
    assert rbox[4] == 0.3 and obj.extras["mask_area"] == 1234.0
    assert obj.track_id == track.track_id and obj.extras["age_s"] == pytest.approx(
        9 / FPS, abs=1e-3
    )
