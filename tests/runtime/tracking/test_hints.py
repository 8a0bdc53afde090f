"""The gate's hint geometry (runtime/tracking/hints.py): when a track's path reaches a line or a
zone's edge, how far its counting point is from the nearest, and the hints a real tracker's live
tracks make against real counters."""

from __future__ import annotations

import math

import pytest

from edgert.runtime.tasks.detection import Detection
from edgert.runtime.tracking import Tracker
from edgert.runtime.tracking.counting import LineCounter, ZoneCounter, anchor_point
from edgert.runtime.tracking.hints import Hint, distance_px, reach_s, track_hints

SHAPE = (480, 640)


def test_a_crossing_is_timed_exactly_even_a_few_pixels_before_the_line():
    """The gate's hints are frames old: a track 2 px before a line at 30 px/s reaches it in
    1/15 s (not "now"), so the frames either side of its crossing are the ones inferred."""
    line = LineCounter("door", [(300, 0), (300, 480)])
    assert reach_s(line, (298.0, 200.0), (30.0, 0.0)) == pytest.approx(2 / 30)
    assert reach_s(line, (302.0, 200.0), (30.0, 0.0)) == math.inf  # past it, moving away
    assert reach_s(line, (250.0, 200.0), (0.0, 30.0)) == math.inf  # along it
    assert reach_s(line, (250.0, 600.0), (30.0, 0.0)) == math.inf  # passes beyond its end


def test_a_zone_is_reached_at_its_nearest_edge_on_the_path():
    zone = ZoneCounter("pen", [(100, 100), (200, 100), (200, 200), (100, 200)])
    assert reach_s(zone, (50.0, 150.0), (10.0, 0.0)) == pytest.approx(5.0)  # its left edge
    assert reach_s(zone, (150.0, 150.0), (0.0, -20.0)) == pytest.approx(2.5)  # inside: the top


def test_the_distance_leaves_out_a_zones_edges_along_the_frames_border():
    """An object leaves the frame at the border (its track ends; the zone counts the exit), so a
    zone's edges along it are not edges a track crosses; a line's segment ends at its ends."""
    right_half = ZoneCounter("right", [(320, 0), (640, 0), (640, 480), (320, 480)])
    assert distance_px(right_half, (600.0, 240.0), SHAPE) == pytest.approx(280.0)
    line = LineCounter("door", [(300, 0), (300, 100)])
    assert distance_px(line, (300.0, 200.0), SHAPE) == pytest.approx(100.0)
    assert distance_px(line, (290.0, 50.0), SHAPE) == pytest.approx(10.0)


def test_a_real_trackers_live_tracks_make_their_hints():
    """One object walking right at 180 px/s towards a line and one standing still: the walker
    moves and reaches the line when its counting point would, the still one does not; without
    lines and zones nothing is reached or near."""
    tracker = Tracker()
    for i in range(12):
        walker = Detection((100 + 6 * i, 200, 140 + 6 * i, 280), 0.9, 0, "person")
        still = Detection((500, 300, 540, 380), 0.9, 0, "person")
        tracker.update([walker, still], i / 30)
    live = tracker.live()
    line = LineCounter("door", [(400, 0), (400, 480)])
    hints = track_hints(live, [line], "bottom_center", SHAPE)
    assert len(hints) == 2 and all(isinstance(h, Hint) for h in hints)
    walking, standing = sorted(hints, key=lambda h: h.box[0])
    x = anchor_point(walking.box, "bottom_center")[0]
    assert walking.moving and walking.velocity[0] == pytest.approx(180.0, rel=0.1)
    assert walking.reach_s == pytest.approx((400 - x) / walking.velocity[0])
    assert walking.near_px == pytest.approx(400 - x)
    assert not standing.moving and standing.reach_s == math.inf
    assert standing.near_px == pytest.approx(520 - 400, abs=1.0)
    alone = track_hints(live, [], "bottom_center", SHAPE)
    assert [(h.reach_s, h.near_px) for h in alone] == [(math.inf, math.inf)] * 2
