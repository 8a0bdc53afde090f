"""Captions on a picture (the overlay's object labels, a line's or zone's counts) that stay inside
it and do not cover one another: each goes to the first of its preferred places (above its box,
below it, inside its top) that lies inside the frame and clear of the captions placed before
it, else to the nearest clear place anywhere in the frame; only when there is none does it
overlap (a greedy placement: the first placed keep their spots). Each caption is drawn on a
filled background, its text black or white, whichever reads on it.

One :class:`Captions` serves one picture: the overlay makes it with the corner numbers' area
taken and places the lines' and zones' captions, then lets the task's drawing place the objects'
(:func:`placing` makes it the one :func:`current` returns there; a drawing outside any, a
snapshot's, gets a fresh one). Captions are painted after every box, line and trail (no outline
crosses one); a task's skeleton or mask goes over them."""

from __future__ import annotations

import contextlib
import contextvars

FONT_SCALE = 0.5
PAD = 3  # pixels of background around the text

_current: contextvars.ContextVar = contextvars.ContextVar("captions", default=None)


def text_size(text: str) -> tuple[int, int]:
    """(width, height) of ``text``'s caption, its background included."""
    import cv2

    (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, FONT_SCALE, 1)
    return tw + 2 * PAD, th + base + 2 * PAD


GAP = 2  # pixels kept between two captions


def _overlaps(a: tuple, b: tuple) -> bool:
    """Whether rectangles ``a`` and ``b`` come closer than GAP."""
    return a[0] < b[2] + GAP and b[0] < a[2] + GAP and a[1] < b[3] + GAP and b[1] < a[3] + GAP


class Captions:
    """The captions placed on one picture of ``shape``; ``taken``: rectangles (x1, y1, x2, y2)
    already covered (the numbers in the top left)."""

    def __init__(self, shape, taken=(), deferred: bool = False) -> None:
        self.h, self.w = int(shape[0]), int(shape[1])
        self.placed: list[tuple[int, int, int, int]] = [tuple(r) for r in taken]
        self.deferred = deferred  # painted by paint(), after everything else
        self.queued: list = []

    def _inside(self, x: float, y: float, cw: int, ch: int) -> tuple[int, int, int, int]:
        x = int(min(max(0, x), max(0, self.w - cw)))
        y = int(min(max(0, y), max(0, self.h - ch)))
        return (x, y, x + cw, y + ch)

    def _clear(self, rect: tuple) -> bool:
        return not any(_overlaps(rect, r) for r in self.placed)

    def place(self, size: tuple[int, int], spots: list) -> tuple[int, int, int, int]:
        """The rectangle for a caption of ``size`` at the first clear one of ``spots`` (top-left
        corners, in order of preference) that lies inside the frame as it is, else the first
        clear one once moved inside; taken from now on."""
        cw, ch = size
        rects = [self._inside(x, y, cw, ch) for x, y in spots]
        as_given = [r for r, (x, y) in zip(rects, spots) if (r[0], r[1]) == (int(x), int(y))]
        chosen = next((r for r in as_given + rects if self._clear(r)), None)
        if chosen is None:
            chosen = self._nearest(rects[0]) or rects[0]
        self.placed.append(chosen)
        return chosen

    def _nearest(self, rect: tuple):
        """The clear place nearest ``rect``, on a grid through it (a caption's height and a
        quarter of its width apart) over the whole frame, or None (numpy: a crowd of hundreds of
        captions stays a few milliseconds)."""
        import numpy as np

        x, y = rect[0], rect[1]
        cw, ch = rect[2] - rect[0], rect[3] - rect[1]
        sx, sy = max(1, cw // 4), ch + GAP
        xs = np.arange(x % sx, max(1, self.w - cw + 1), sx)
        ys = np.arange(y % sy, max(1, self.h - ch + 1), sy)
        gx, gy = (v.ravel() for v in np.meshgrid(xs, ys))
        taken = np.asarray(self.placed, np.int64).reshape(-1, 4)
        hit = (
            (gx[:, None] < taken[None, :, 2] + GAP)
            & (taken[None, :, 0] < gx[:, None] + cw + GAP)
            & (gy[:, None] < taken[None, :, 3] + GAP)
            & (taken[None, :, 1] < gy[:, None] + ch + GAP)
        ).any(axis=1)
        if hit.all():
            return None
        far = np.where(hit, np.inf, np.abs(gx - x) + np.abs(gy - y))
        i = int(np.argmin(far))
        return (int(gx[i]), int(gy[i]), int(gx[i]) + cw, int(gy[i]) + ch)

    def draw(self, out, text: str, spots: list, background: tuple, now: bool = False) -> tuple:
        """``text`` on ``background`` at the first clear place of ``spots``; its rectangle.
        Painted by :meth:`paint` when the captions are ``deferred``, unless ``now``."""
        rect = self.place(text_size(text), spots)
        self.queued.append((text, rect, background))
        if now or not self.deferred:
            self.paint(out)
        return rect

    def paint(self, out) -> None:
        """The captions placed and not yet drawn, onto ``out``."""
        import cv2

        for text, (x1, y1, x2, y2), background in self.queued:
            cv2.rectangle(out, (x1, y1), (x2 - 1, y2 - 1), background, cv2.FILLED)
            (_, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, FONT_SCALE, 1)
            b, g, r = background[:3]
            ink = (0, 0, 0) if 0.114 * b + 0.587 * g + 0.299 * r > 140 else (255, 255, 255)
            cv2.putText(
                out,
                text,
                (x1 + PAD, y1 + PAD + th),
                cv2.FONT_HERSHEY_SIMPLEX,
                FONT_SCALE,
                ink,
                1,
                cv2.LINE_AA,
            )
        self.queued.clear()

    def label_box(self, out, text: str, box, color: tuple) -> tuple[int, int, int, int]:
        """An object's caption, painted now (a task draws its skeleton or mask over it): above
        its box, else below it, else inside its top."""
        cw, ch = text_size(text)
        x1, y1, x2, y2 = box
        return self.draw(out, text, [(x1, y1 - ch), (x1, y2), (x1, y1)], color, now=True)


@contextlib.contextmanager
def placing(captions: Captions):
    """Within it, :func:`current` is ``captions`` (on this thread)."""
    token = _current.set(captions)
    try:
        yield captions
    finally:
        _current.reset(token)


def current(out) -> Captions:
    """The captions of the picture being drawn (:func:`placing`), or a fresh one for ``out``."""
    c = _current.get()
    if c is not None and (c.h, c.w) == tuple(out.shape[:2]):
        return c
    return Captions(out.shape)
