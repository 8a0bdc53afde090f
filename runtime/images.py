"""Reading image files into OpenCV BGR arrays, with one-sentence errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import SourceError


def read_image(path: str | Path) -> np.ndarray:
    import cv2

    path = Path(path)
    if not path.is_file():
        raise SourceError(f"image {path} does not exist")
    data = np.fromfile(path, dtype=np.uint8)
    img = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
    if img is None:
        raise SourceError(f"{path} is not an image OpenCV can decode")
    return img
