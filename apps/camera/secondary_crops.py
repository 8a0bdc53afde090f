"""A secondary's crops: where one is cut (:func:`crop_box`), how good it is (:func:`quality`),
what is kept of it (:class:`Crop`), and each track's attempts and votes (:class:`TrackState`).
See :mod:`.secondary`."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import numpy as np

SHARP_K = 100.0  # Laplacian variance at which sharpness scores 0.5


def quality(picture: np.ndarray, box, score: float, velocity, input_side: int) -> float:
    """The crop quality of ``box`` on ``picture`` (see the module's text)."""
    import cv2

    h, w = picture.shape[:2]
    x1, y1, x2, y2 = (float(v) for v in box)
    bw, bh = x2 - x1, y2 - y1
    size = min(1.0, min(bw, bh) / max(1, input_side))
    patch = picture[max(0, int(y1)) : max(0, int(y2)), max(0, int(x1)) : max(0, int(x2))]
    sharp = 0.0
    if patch.size:
        grey = patch if patch.ndim == 2 else cv2.cvtColor(patch, cv2.COLOR_BGR2GRAY)
        grey = cv2.resize(grey, (64, 64), interpolation=cv2.INTER_AREA)
        v = float(cv2.Laplacian(grey, cv2.CV_32F).var())
        sharp = v / (v + SHARP_K)
    whole = 0.5 if (x1 <= 1 or y1 <= 1 or x2 >= w - 1 or y2 >= h - 1) else 1.0
    still = 1.0 / (1.0 + float(np.hypot(*velocity)) / max(bh, 1.0))
    return float(size * sharp * max(0.0, min(1.0, score)) * whole * still)


def crop_box(box, margin: float, hw) -> tuple[int, int, int, int]:
    """``box`` grown by ``margin`` of each side, clipped to the frame (integers)."""
    h, w = hw
    x1, y1, x2, y2 = (float(v) for v in box)
    mx, my = (x2 - x1) * margin, (y2 - y1) * margin
    return (
        max(0, int(np.floor(x1 - mx))),
        max(0, int(np.floor(y1 - my))),
        min(w, int(np.ceil(x2 + mx))),
        min(h, int(np.ceil(y2 + my))),
    )


@dataclass(eq=False)  # compared by identity: its image is an array
class Crop:
    """One attempt's crop: whose it is, where it was cut, how good it is."""

    key: tuple  # (stream, track_id)
    image: np.ndarray
    origin: tuple  # (x, y) of the crop in the frame's pixels
    quality: float
    t: float
    frame: int
    area: float


def input_side(model) -> int:
    """The shorter side of the secondary's input (what a crop is scaled to)."""
    pre = getattr(model, "preprocessing", None)
    size = getattr(pre, "size", None)
    if size:
        return int(min(size))
    return 64


@dataclass
class TrackState:
    """One track's attempts and consensus for one secondary."""

    label: str = ""  # the primary's label
    attempts: int = 0  # given to the worker (a dropped crop is given back)
    answered: int = 0
    pending: int = 0  # given, not yet answered
    held: Crop | None = None  # the best crop since the window opened
    opened: float | None = None  # when the choosing window opened (None: closed)
    last_t: float = -1e18  # the last attempt's time
    last_area: float = 0.0
    votes: collections.Counter = field(default_factory=collections.Counter)
    weight: float = 0.0
    objects: list = field(default_factory=list)  # a detector secondary's best attempt's
    best: float = -1.0  # that attempt's quality x score
    said: str = ""  # the consensus last announced (an event when it changes)
    ended: bool = False  # the track ended (its state goes once its answers are in and said)
    counted: bool = False  # among the tracks attempted (counted once)

    def consensus(self) -> tuple[str, float] | None:
        if not self.votes or self.weight <= 0:
            return None
        label, w = self.votes.most_common(1)[0]
        return label, w / self.weight
