"""Drawing results and live numbers onto frames."""

from __future__ import annotations

import numpy as np

from edgert.runtime.tasks import spec_of
from edgert.runtime.tasks.detect import pixels, track_color


def draw_scene(out: np.ndarray, scene) -> None:
    """Lines and zones with their counts, and each track's trail."""
    import cv2

    counters, trails = scene
    for c in counters:
        pts = np.array(c.points, dtype=np.int32)
        r = c.report()
        if r["type"] == "line":
            cv2.line(out, tuple(pts[0]), tuple(pts[1]), (0, 200, 255), 2, cv2.LINE_AA)
            text = f"{c.name}: in {r['in']} out {r['out']}"
        else:
            cv2.polylines(out, [pts.reshape(-1, 1, 2)], True, (255, 160, 0), 2, cv2.LINE_AA)
            text = f"{c.name}: {r['occupancy']} now, {r['entries']} in"
        # at the line's middle, or the zone's centre: clear of the numbers in the top left
        x, y = (int(v) for v in pts.mean(axis=0))
        h, w = out.shape[:2]
        (tw, _), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
        _label(out, text, (min(max(4, x - tw // 2), max(4, w - tw - 4)), min(max(60, y), h - 6)))
    for track_id, trail in trails.items():
        pts = pixels(trail, out) if len(trail) > 1 else None  # None: a point is not finite
        if pts is not None:
            cv2.polylines(
                out, [pts.reshape(-1, 1, 2)], False, track_color(track_id), 2, cv2.LINE_AA
            )


def _label(out: np.ndarray, text: str, org: tuple[int, int]) -> None:
    import cv2

    (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
    x, y = org
    cv2.rectangle(out, (x - 2, y - th - 3), (x + tw + 2, y + base), (0, 0, 0), cv2.FILLED)
    cv2.putText(out, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1, cv2.LINE_AA)


def draw(image: np.ndarray, results, lines: list[str], scene=None) -> np.ndarray:
    """Boxes (with their track IDs), the lines and zones of ``scene`` (counters, trails) and the
    numbers ``lines`` onto a copy of ``image``."""
    import cv2

    out = image.copy()
    if scene is not None:
        draw_scene(out, scene)
    spec = spec_of(results)
    if spec is not None and spec.draw is not None:
        lines = [*lines, *spec.draw(out, results)]  # the task's own: boxes, a classifier's top 3
    y = 18
    for (
        text
    ) in lines:  # white on a dark box (an outline's wider glyph advance would smear the text)
        (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
        cv2.rectangle(out, (4, y - th - 4), (12 + tw, y + base), (0, 0, 0), cv2.FILLED)
        cv2.putText(
            out, text, (8, y), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1, cv2.LINE_AA
        )
        y += 18
    return out


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
