"""Drawing results and live numbers onto frames."""

from __future__ import annotations

import numpy as np

from edgert.runtime.images.captions import Captions, placing, text_size
from edgert.runtime.tasks import spec_of
from edgert.runtime.tasks.detect import pixels, track_color


def draw_scene(out: np.ndarray, scene, captions: Captions | None = None) -> None:
    """Lines and zones with their counts, and each track's trail. A line's caption goes by its
    end nearest the frame's edge, a zone's by its highest corner: clear of where the objects
    walk (at the line's middle it covered them), inside the frame, on a dark background."""
    import cv2

    captions = captions or Captions(out.shape)
    counters, trails = scene
    for c in counters:
        pts = np.array(c.points, dtype=np.float64)
        drawn = pixels(pts, out)
        if drawn is None:
            continue
        r = c.report()
        if r["type"] == "line":
            cv2.line(out, tuple(drawn[0]), tuple(drawn[1]), (0, 200, 255), 2, cv2.LINE_AA)
            text = f"{c.name}: in {r['in']} out {r['out']}"
            end = min(drawn[:2].tolist(), key=lambda p: _to_edge(p, out.shape))
        else:
            cv2.polylines(out, [drawn.reshape(-1, 1, 2)], True, (255, 160, 0), 2, cv2.LINE_AA)
            text = f"{c.name}: {r['occupancy']} now, {r['entries']} in"
            end = min(drawn.tolist(), key=lambda p: p[1])
        captions.draw(out, text, _beside(end, text_size(text)), (0, 0, 0))
    for track_id, trail in trails.items():
        pts = pixels(trail, out) if len(trail) > 1 else None  # None: a point is not finite
        if pts is not None:
            cv2.polylines(
                out, [pts.reshape(-1, 1, 2)], False, track_color(track_id), 2, cv2.LINE_AA
            )


def _to_edge(p, shape) -> float:
    """How far point ``p`` is from the frame's nearest edge (negative: outside)."""
    h, w = shape[:2]
    return min(p[0], p[1], w - 1 - p[0], h - 1 - p[1])


def _beside(p, size: tuple[int, int]) -> list:
    """Top-left corners of a caption of ``size`` touching point ``p`` diagonally: below-right,
    below-left, above-right, above-left (moved inside the frame by the placement)."""
    (x, y), (cw, ch) = p, size
    gap = 4
    return [
        (x + gap, y + gap),
        (x - cw - gap, y + gap),
        (x + gap, y - ch - gap),
        (x - cw - gap, y - ch - gap),
    ]


def draw(image: np.ndarray, results, lines: list[str], scene=None) -> np.ndarray:
    """Boxes (with their track IDs), the lines and zones of ``scene`` (counters, trails) and the
    numbers ``lines`` onto a copy of ``image``; every caption inside the frame and clear of the
    others (:mod:`edgert.runtime.images.captions`), the numbers' corner kept free for them."""
    import cv2

    out = image.copy()
    taken = [_line_rect(text, i) for i, text in enumerate(lines)]
    captions = Captions(out.shape, taken, deferred=True)  # painted over the boxes and lines
    if scene is not None:
        draw_scene(out, scene, captions)
    spec = spec_of(results)
    if spec is not None and spec.draw is not None:
        with placing(captions):
            lines = [*lines, *spec.draw(out, results)]  # the task's own: boxes, a top 3
    captions.paint(out)
    for i, text in enumerate(lines):
        # white on a dark box (an outline's wider glyph advance would smear the text)
        x1, y1, x2, y2 = _line_rect(text, i)
        cv2.rectangle(out, (x1, y1), (x2, y2), (0, 0, 0), cv2.FILLED)
        cv2.putText(
            out,
            text,
            (8, 18 + 18 * i),
            cv2.FONT_HERSHEY_SIMPLEX,
            0.5,
            (255, 255, 255),
            1,
            cv2.LINE_AA,
        )
    return out


def _line_rect(text: str, i: int) -> tuple[int, int, int, int]:
    """The dark box of the ``i``-th line of numbers in the top left."""
    import cv2

    (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
    y = 18 + 18 * i
    return (4, y - th - 4, 12 + tw, y + base)


def stat_lines(s: dict, stream: int, sources: list, many: bool) -> list[str]:
    """The numbers drawn on a frame: its stream's (named when there are several), then power."""
    lines = []
    if many:
        st = s["streams"][stream] if s.get("streams") else {}
        e2e = st.get("latency_ms", {}).get("end_to_end", {}).get("p50", 0.0)
        lines.append(f"[{stream}] {sources[stream].description}"[:60])
        lines.append(
            f"{st.get('fps', 0):.1f} fps  e2e p50 {e2e:.1f} ms  dropped {st.get('frames_dropped', 0)}"
        )
        batch = s.get("batch", {})
        lines.append(
            f"all: {s.get('fps', 0):.1f} fps, batch {batch.get('mean', 0):.1f}/{batch.get('max', 1)}"
        )
    else:
        e2e = s.get("latency_ms", {}).get("end_to_end", {}).get("p50", 0.0)
        lines.append(
            f"{s.get('fps', 0):.1f} fps  e2e p50 {e2e:.1f} ms  dropped {s.get('frames_dropped', 0)}"
        )
    if s.get("power_w"):
        lines.append(f"{s['power_w']:.2f} W  {s.get('mj_per_frame') or 0:.1f} mJ/frame")
    return lines
