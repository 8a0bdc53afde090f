"""The overlay's captions (issue 73): inside the frame, clear of one another in a crowd, and a
counting line's caption by its end, not over the walkers at its middle. Judged on the pixels
of the drawn frame: each caption is found by its background (the track's colour, a box's 2-pixel
outline removed by an opening), its size against the text's."""

from __future__ import annotations

import cv2
import numpy as np

from edgert.apps.camera.overlay import draw
from edgert.runtime.results import Detection, Result
from edgert.runtime.tasks.detect import track_color
from edgert.runtime.tracking.counting import LineCounter, ZoneCounter

W, H = 320, 240
# nine people crowded at the top corners, the middle and the bottom right (boxes touching the
# frame's top and sides, overlapping one another)
BOXES = [
    (0, 0, 60, 120),
    (20, 5, 90, 110),
    (40, 0, 110, 100),
    (250, 0, 320, 90),
    (270, 30, 320, 140),
    (100, 100, 160, 200),
    (110, 110, 170, 210),
    (120, 120, 180, 230),
    (280, 200, 320, 240),
]
NUMBERS = ["30.0 fps  e2e p50 20.0 ms  dropped 0"]


def crowd() -> Result:
    return Result.of_objects(
        [
            Detection(tuple(map(float, b)), 0.9 - 0.05 * i, 0, "person", track_id=i + 1)
            for i, b in enumerate(BOXES)
        ],
        "detect",
    )


def text_extent(text: str) -> tuple[int, int]:
    (tw, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
    return tw, th


def filled(out: np.ndarray, color) -> tuple[int, int, int, int] | None:
    """The bounding rectangle (x1, y1, x2, y2, exclusive) of the largest area filled with
    ``color`` (the text's strokes in it filled, thin lines of it, a box's outline, removed), or
    None."""
    mask = np.all(out == np.array(color, np.uint8), axis=2).astype(np.uint8)
    kernel = np.ones((7, 7), np.uint8)  # outside the frame is not the colour (border 0)
    for op in (cv2.MORPH_CLOSE, cv2.MORPH_OPEN):  # the text's strokes filled; outlines gone
        mask = cv2.morphologyEx(mask, op, kernel, borderType=cv2.BORDER_CONSTANT, borderValue=0)
    n, _, stats, _ = cv2.connectedComponentsWithStats(mask)
    if n < 2:
        return None
    x, y, w, h, _ = stats[1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))]
    return (int(x), int(y), int(x + w), int(y + h))


def _shrunk(r: tuple, by: int) -> tuple:
    return (r[0] + by, r[1] + by, r[2] - by, r[3] - by)


def test_captions_in_a_crowd_are_whole_inside_the_frame_and_apart():
    """Nine tracked people, four of them touching the frame's top or sides: each caption is
    seen whole (as wide and tall as its text: not cut at the edge, not covered by another) and
    no two overlap. Before, captions were bare text at the box's corner, drawn over each other
    and over the numbers, and cut off at the right edge."""
    frame = np.full((H, W, 3), 90, np.uint8)
    out = draw(frame, crowd(), NUMBERS)
    rects = []
    for i, o in enumerate(crowd().objects):
        rect = filled(out, track_color(o.track_id))
        assert rect is not None, f"no caption background for #{o.track_id}"
        tw, th = text_extent(f"#{o.track_id} person {o.score:.2f}")
        x1, y1, x2, y2 = rect
        assert x1 >= 0 and x2 <= W and y1 >= 0 and y2 <= H, (i, rect)
        assert x2 - x1 >= tw and y2 - y1 >= th, (o.track_id, rect, tw, th)  # whole
        rects.append(rect)
    for a in range(len(rects)):
        for b in range(a + 1, len(rects)):
            # found to a pixel or two (an outline touching a caption): compared 2 px in
            ra, rb = (_shrunk(r, 2) for r in (rects[a], rects[b]))
            apart = ra[2] <= rb[0] or rb[2] <= ra[0] or ra[3] <= rb[1] or rb[3] <= ra[1]
            assert apart, (a + 1, ra, b + 1, rb)
    numbers_w, numbers_h = text_extent(NUMBERS[0])
    numbers = (4, 0, 12 + numbers_w, 18 + 6)
    for r in rects:  # clear of the numbers in the top left too
        assert r[1] >= numbers[3] or r[0] >= numbers[2], r


def test_a_lines_caption_is_by_its_end_clear_of_the_walkers_at_its_middle():
    """A line across the frame's middle, top to bottom, and a person crossing it: the caption
    ("door: in 0 out 0") sits at the line's end by the frame's edge, on its dark background,
    whole; the person's box is not covered. Before, it sat at the line's middle, over them."""
    frame = np.full((H, W, 3), 90, np.uint8)
    walker = Result.of_objects([Detection((140.0, 90.0, 180.0, 170.0), 0.9, 0, "person")], "detect")
    scene = ([LineCounter("door", [(160, 0), (160, 240)])], {})
    out = draw(frame, walker, [], scene)
    rect = filled(out, (0, 0, 0))
    assert rect is not None
    x1, y1, x2, y2 = rect
    tw, th = text_extent("door: in 0 out 0")
    assert x2 - x1 >= tw and y2 - y1 >= th and x1 >= 0 and x2 <= W, rect
    assert y2 <= 40 or y1 >= H - 40, rect  # at an end, by the frame's edge
    assert y2 <= 90 or y1 >= 170, rect  # not over the walker's box (rows 90 to 170)
    # inside the walker's box, either side of the line: the frame, nothing drawn over it
    for inside in (out[95:165, 145:156], out[95:165, 165:176]):
        assert (inside == 90).all(), np.argwhere((inside != 90).any(axis=2))[:3]


def test_a_zones_caption_and_a_snapshots_single_box_stay_inside():
    """A zone's caption at its highest corner, inside the frame even at the bottom right; a box
    drawn alone (a snapshot's, outside the overlay) gets its caption inside the frame too."""
    from edgert.runtime.tasks import detect

    frame = np.full((H, W, 3), 90, np.uint8)
    scene = ([ZoneCounter("pen", [(250, 200), (320, 200), (320, 240), (250, 240)])], {})
    out = draw(frame, None, [], scene)
    x1, y1, x2, y2 = filled(out, (0, 0, 0))
    assert x2 <= W and y2 <= H and x2 - x1 >= text_extent("pen: 0 now, 0 in")[0]
    alone = np.full((H, W, 3), 90, np.uint8)
    detect.draw(
        alone, Result.of_objects([Detection((290, 0, 320, 40), 0.5, 0, "person")], "detect")
    )
    x1, y1, x2, y2 = filled(alone, track_color(None))
    assert x1 >= 0 and x2 <= W and y1 >= 0 and x2 - x1 >= text_extent("person 0.50")[0]
