"""The data edgert ships: real sample photos (CC0 / public domain, see images/LICENSES.md) and the
ImageNet class names. One module for everyone (the zoo, calibration, the camera's synthetic
source, the demo); in the runtime because the device side uses it too."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
IMAGES = HERE / "images"
PHOTOS = ("chelsea", "coffee", "rocket", "astronaut")  # the demo photos
ALL_PHOTOS = (*PHOTOS, "china", "flower", "camera")  # calibration / evaluation material


def photo_path(name: str) -> Path:
    return IMAGES / f"{name}.jpg"


def load_photo(name: str) -> np.ndarray:
    """A bundled photo as an OpenCV BGR uint8 array."""
    import cv2

    img = cv2.imread(str(photo_path(name)), cv2.IMREAD_COLOR)
    if img is None:
        raise FileNotFoundError(f"bundled photo {name} is missing from {IMAGES}")
    return img


@lru_cache(maxsize=None)
def imagenet_classes() -> tuple[str, ...]:
    return tuple(json.loads((HERE / "imagenet_classes.json").read_text(encoding="utf-8")))
