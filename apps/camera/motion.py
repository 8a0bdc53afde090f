"""``--gate motion``'s motion detector: change on a small grey copy of the frame against a slowly
adapting background, as Frigate finds it (a light change, sensor noise and compression are not
motion; ``--motion-mask`` polygons are ignored). Device side: OpenCV's own operations."""

from __future__ import annotations

import collections

import numpy as np

WIDTH = 320  # the motion detector's grey copy, pixels wide
LIGHT_CHANGE = 0.4  # a share of changed pixels this large at once is the light, not an object
ADAPT = 0.05  # the background takes this share of each frame
LOOKBACK_S = 0.3  # motion: changed against the background and against the picture this long ago


class MotionDetector:
    """Motion on a small grey copy against a slowly adapting background (OpenCV: resize, blur,
    accumulateWeighted, absdiff, threshold, dilate, contours). A change over ``LIGHT_CHANGE`` of
    the picture at once is a light change: the background is re-based to it, no motion."""

    def __init__(self, sensitivity: float = 0.5, masks: list | None = None) -> None:
        self.threshold = int(round(45 - 35 * sensitivity))  # grey levels: 45 .. 10
        self.min_area = 0.002 * (1.0 - 0.9 * sensitivity)  # share of the picture: 0.2 % .. 0.02 %
        self.masks = list(masks or [])  # point arrays, pixels or fractions of the frame
        self.background = None
        self.mask = None
        self.size = None
        self.light_changes = 0
        self._recent: collections.deque = collections.deque()  # (t, grey copy) of late frames
        self.count = 0  # frames seen

    def _prepare(self, frame: np.ndarray, source_hw=None):
        """The grey working picture; ``source_hw``: the camera's (height, width) when the decoder
        scaled ``frame`` down (its size, masks in pixels and regions are the camera's)."""
        import cv2

        h, w = source_hw or frame.shape[:2]
        # at most WIDTH x WIDTH whatever the frame's shape (a 2x4000 picture scaled to 320 wide
        # was a 320x640000 background: gigabytes)
        scale = min(WIDTH / w, WIDTH / h)
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        grey = frame if frame.ndim == 2 else cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
        small = cv2.GaussianBlur(cv2.resize(grey, size, interpolation=cv2.INTER_AREA), (5, 5), 0)
        if size != self.size:
            self.size, self.background = size, None
            self._recent.clear()
            self.mask = None
            if self.masks:
                self.mask = np.zeros((size[1], size[0]), np.uint8)
                for pts in self.masks:
                    fit = (size[0], size[1]) if pts.max() <= 1.0 else (size[0] / w, size[1] / h)
                    poly = np.round(pts * np.array(fit))
                    poly = np.clip(poly, -1, max(size) + 1).astype(np.int32)  # a run's frame
                    cv2.fillPoly(self.mask, [poly], 255)
        return small

    def __call__(self, frame: np.ndarray) -> bool:
        """Whether ``frame`` holds motion."""
        return bool(self.regions(frame))

    def regions(self, frame: np.ndarray, t: float | None = None, source_hw=None) -> list:
        """The boxes (x1, y1, x2, y2 in the camera's pixels) where ``frame`` (taken at ``t``
        seconds) holds motion: changed against the background *and* against the picture of
        ``LOOKBACK_S`` ago, so that what an object leaves behind in the background (its trail, the
        place where it stood) is not motion, and an object that stopped is not either.
        ``source_hw``: the camera's (height, width) when the decoder scaled ``frame`` down to the
        model's size (the working picture is the same size either way)."""
        import cv2

        small = self._prepare(frame, source_hw)
        t = float(self.count) / 10.0 if t is None else t  # frames 0.1 s apart when no time is given
        self.count += 1
        if self.background is None:
            self._rebase(small, t)
            return []
        before = self._recent[0][1]
        while len(self._recent) > 1 and self._recent[1][0] <= t - LOOKBACK_S:
            self._recent.popleft()
            before = self._recent[0][1]
        self._recent.append((t, small))
        diff = cv2.absdiff(small, cv2.convertScaleAbs(self.background))
        _, changed = cv2.threshold(diff, self.threshold, 255, cv2.THRESH_BINARY)
        if self.mask is not None:
            changed[self.mask > 0] = 0
        share = cv2.countNonZero(changed) / changed.size
        if share > LIGHT_CHANGE:
            self._rebase(small, t)  # the light changed
            self.light_changes += 1
            return []
        cv2.accumulateWeighted(small, self.background, ADAPT)
        if share < self.min_area:
            return []
        _, moved = cv2.threshold(cv2.absdiff(small, before), self.threshold, 255, cv2.THRESH_BINARY)
        changed = cv2.dilate(cv2.bitwise_and(changed, moved), None, iterations=3)
        contours, _ = cv2.findContours(changed, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        area = changed.size * self.min_area
        h, w = source_hw or frame.shape[:2]
        sx, sy = w / self.size[0], h / self.size[1]
        out = []
        for c in contours:
            if cv2.contourArea(c) >= area:
                x, y, w, h = cv2.boundingRect(c)
                out.append((x * sx, y * sy, (x + w) * sx, (y + h) * sy))
        return out

    def _rebase(self, small: np.ndarray, t: float) -> None:
        """The background and the look-back both start again from this picture."""
        self.background = small.astype(np.float32)
        self._recent.clear()
        self._recent.append((t, small))
