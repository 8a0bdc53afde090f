"""Drawing results and live numbers onto frames."""

from __future__ import annotations

import numpy as np


def draw(image: np.ndarray, results, lines: list[str]) -> np.ndarray:
    import cv2

    out = image.copy()
    if isinstance(results, list):
        for i, r in enumerate(results):
            if "box" in r:
                x1, y1, x2, y2 = (int(round(v)) for v in r["box"])
                cv2.rectangle(out, (x1, y1), (x2, y2), (0, 220, 0), 2)
                cv2.putText(
                    out,
                    f"{r['label']} {r['score']:.2f}",
                    (x1, max(12, y1 - 4)),
                    cv2.FONT_HERSHEY_SIMPLEX,
                    0.5,
                    (0, 220, 0),
                    1,
                    cv2.LINE_AA,
                )
            else:
                lines = [*lines, f"{r['label']} {r['score']:.2f}"] if i < 3 else lines
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
