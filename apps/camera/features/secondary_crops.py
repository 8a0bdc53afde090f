"""A secondary's crops: where one is cut (:func:`crop_box`), how good it is (:func:`quality`),
what is kept of it (:class:`Crop`), and each track's attempts and votes (:class:`TrackState`).
See :mod:`.secondary_models`."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import numpy as np

SHARP_K = 100.0  # Laplacian variance at which sharpness scores 0.5
SAMPLE = 128  # the most pixels a side quality reads of a box (then 64 x 64 by area)
KEEP = 2  # a crop is kept at twice what the secondary's resize needs at most (a margin)


def quality(picture: np.ndarray, box, score: float, velocity, input_side: int) -> float:
    """The crop quality of ``box`` on ``picture`` (see the module's text); 0 for a box, score or
    speed that is not finite. Sharpness is measured on a copy of at most ``SAMPLE`` pixels a
    side taken from the box (never the whole patch: a box of a 4K frame cost 30 ms)."""
    import cv2

    h, w = picture.shape[:2]
    x1, y1, x2, y2 = (float(v) for v in box)
    if not np.isfinite((x1, y1, x2, y2, score)).all():
        return 0.0
    bw, bh = x2 - x1, y2 - y1
    size = min(1.0, min(bw, bh) / max(1, input_side))
    patch = picture[max(0, int(y1)) : max(0, int(y2)), max(0, int(x1)) : max(0, int(x2))]
    sharp = 0.0
    if patch.size:
        ph, pw = patch.shape[:2]
        if ph > SAMPLE or pw > SAMPLE:  # every k-th pixel: a view, then its copy is small
            patch = cv2.resize(
                patch, (min(pw, SAMPLE), min(ph, SAMPLE)), interpolation=cv2.INTER_NEAREST
            )
        grey = patch if patch.ndim == 2 else cv2.cvtColor(patch, cv2.COLOR_BGR2GRAY)
        grey = cv2.resize(grey, (64, 64), interpolation=cv2.INTER_AREA)
        v = float(cv2.Laplacian(grey, cv2.CV_32F).var())
        sharp = v / (v + SHARP_K)
    whole = 0.5 if (x1 <= 1 or y1 <= 1 or x2 >= w - 1 or y2 >= h - 1) else 1.0
    still = 1.0 / (1.0 + float(np.hypot(*velocity)) / max(bh, 1.0))
    q = float(size * sharp * max(0.0, min(1.0, score)) * whole * still)
    return q if np.isfinite(q) else 0.0


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
    scale: tuple = (1.0, 1.0)  # (x, y): the image's pixels per frame pixel (it was scaled down)


def needs(model) -> tuple | None:
    """(h, w) the secondary's preprocessing resizes a crop to (its input, or the shorter side
    of a resize-and-crop), or None when it takes the crop as it is (``resize: none``)."""
    pre = preprocessing(model)
    if pre is None or pre.resize == "none" or not pre.size:
        return None
    if pre.resize == "resize_crop" and pre.resize_short:
        return (int(pre.resize_short), int(pre.resize_short))
    return (int(pre.size[0]), int(pre.size[1]))


def cut(picture: np.ndarray, crop: tuple, need: tuple | None) -> tuple[np.ndarray, tuple]:
    """(the image of ``crop`` (x1, y1, x2, y2) on ``picture``, its scale): a copy at most
    ``KEEP`` times what the secondary's resize needs (``need``: :func:`needs`) on each side, so
    that a large box of a 4K frame holds kilobytes, not megabytes; every k-th pixel is read,
    then averaged down (INTER_AREA), so the cost does not grow with the box either."""
    import cv2

    x1, y1, x2, y2 = crop
    view = picture[y1:y2, x1:x2]
    h, w = view.shape[:2]
    scale = 1.0 if need is None or not h or not w else max(KEEP * need[0] / h, KEEP * need[1] / w)
    if scale >= 0.75:  # little to gain: the crop as it is
        return view.copy(), (1.0, 1.0)
    k = max(1, int(1.0 / (KEEP * scale)))  # the stride keeps KEEP x the size it is averaged to
    out_w, out_h = max(1, round(w * scale)), max(1, round(h * scale))
    image = cv2.resize(view[::k, ::k], (out_w, out_h), interpolation=cv2.INTER_AREA)
    return image, (out_w / w, out_h / h)


def preprocessing(model):
    """The task model's preprocessing (a task model keeps it on its engine), or None."""
    pre = getattr(model, "preprocessing", None)
    return (
        pre if pre is not None else getattr(getattr(model, "engine", None), "preprocessing", None)
    )


def input_side(model) -> int:
    """The shorter side of the secondary's input (what a crop is scaled to)."""
    size = getattr(preprocessing(model), "size", None)
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
    vectors: list = field(default_factory=list)  # an embedder's: (quality, unit vector) each

    def consensus(self) -> tuple[str, float] | None:
        if not self.votes or self.weight <= 0:
            return None
        label, w = self.votes.most_common(1)[0]
        return label, w / self.weight
