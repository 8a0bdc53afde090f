"""Boxes a user labelled on their calibration images (``edgert build --calib-labels``): COCO's JSON
or Ultralytics' YOLO txt files, read into boxes in each image's own pixels and class ids of the
bundle's labels. The gate then also measures FP32's and the quantized model's mAP against them.

- COCO (a ``.json`` file): ``images`` (``file_name``, ``width``, ``height``) matched to the
  folder's images by path inside the folder, else by file name; ``annotations`` (``bbox`` as x,
  y, width, height in pixels, ``category_id``); ``categories`` matched to the bundle's labels by
  name. Crowd regions (``iscrowd``) are left out. An image the file does not list is not used.
- YOLO (a folder of ``.txt``; the calibration folder itself when they sit beside the images): per
  image, the file of the same path inside the folder, else of the same stem; one object per line,
  ``class cx cy w h``, the centre and size as fractions of the image, the class an index into the
  bundle's labels. As Ultralytics reads them, an image without a file is background (no objects).

Anything that does not fit is one sentence naming the file and the line or annotation.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from edgert.runtime.errors import SourceError

Boxes = tuple[np.ndarray, list[int]]  # [K, 4] x1 y1 x2 y2 in the image's pixels, class ids
SLACK = 1.0  # pixels a box may reach past the image's edge (rounding in labelling tools)


def read(
    labels: str | Path, root: Path, files: list[Path], sizes: list[tuple[int, int]], names
) -> list[Boxes | None]:
    """Per image of ``files`` (under ``root``; ``sizes``: each one's height and width), its
    labelled boxes, or None where the labels say nothing about it."""
    path = Path(labels)
    names = list(names or [])
    if not names:
        raise SourceError("--calib-labels needs a bundle with labels (its class names)")
    if not path.exists():
        raise SourceError(f"--calib-labels {path} does not exist")
    if path.is_dir():
        out = _yolo(path, root, files, sizes, names)
    elif path.suffix.lower() == ".json":
        out = _coco(path, root, files, sizes, names)
    else:
        raise SourceError(
            f"--calib-labels {path} is neither a COCO .json file nor a folder of YOLO .txt files"
        )
    if all(o is None for o in out):
        raise SourceError(f"--calib-labels {path} labels none of the {len(files)} images in {root}")
    return out


def _coco(path: Path, root: Path, files, sizes, names) -> list[Boxes | None]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SourceError(f"{path} is not a readable JSON file ({exc})") from None
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k), list) for k in ("images", "annotations", "categories")
    ):
        raise SourceError(
            f"{path} is not a COCO annotation file: it needs lists of images, annotations and "
            "categories"
        )
    lower = {n.strip().lower(): i for i, n in enumerate(names)}
    category: dict = {}
    for c in data["categories"]:
        if isinstance(c, dict) and "id" in c:
            category[c["id"]] = str(c.get("name", ""))
    by_rel = {f.relative_to(root).as_posix(): i for i, f in enumerate(files)}
    by_name: dict[str, list[int]] = {}
    for i, f in enumerate(files):
        by_name.setdefault(f.name, []).append(i)
    image_of: dict = {}
    out: list[Boxes | None] = [None] * len(files)
    for k, im in enumerate(data["images"]):
        if not isinstance(im, dict) or "id" not in im or not isinstance(im.get("file_name"), str):
            raise SourceError(f"{path}: image #{k} has no id or file_name")
        name = im["file_name"].replace("\\", "/")
        i = by_rel.get(name)
        if i is None:
            same = by_name.get(Path(name).name, [])
            i = same[0] if len(same) == 1 else None
        if i is None:
            continue  # labels for an image not among the calibration images
        h, w = sizes[i]
        if (im.get("width"), im.get("height")) not in ((None, None), (w, h)):
            raise SourceError(
                f"{path}: image {name!r} is {w}x{h} but the file says "
                f"{im.get('width')}x{im.get('height')}: labels of another version of it?"
            )
        image_of[im["id"]] = i
        out[i] = (np.zeros((0, 4)), [])
    for k, a in enumerate(data["annotations"]):
        if not isinstance(a, dict):
            raise SourceError(f"{path}: annotation #{k} is not an object")
        i = image_of.get(a.get("image_id"))
        if i is None or a.get("iscrowd"):
            continue
        box = a.get("bbox")
        if not _numbers(box, 4):
            raise SourceError(f"{path}: annotation #{k} has bbox {box!r}, not [x, y, w, h]")
        cat = a.get("category_id")
        if cat not in category:
            raise SourceError(f"{path}: annotation #{k} has category_id {cat!r}, not a category")
        cls = lower.get(category[cat].strip().lower())
        if cls is None:
            raise SourceError(
                f"{path}: category {category[cat]!r} (id {cat}) is not one of the model's labels "
                f"({', '.join(names[:6])}{', ...' if len(names) > 6 else ''})"
            )
        x, y, bw, bh = (float(v) for v in box)
        _append(out, i, [x, y, x + bw, y + bh], cls, sizes[i], f"{path}: annotation #{k}")
    return out


def _yolo(folder: Path, root: Path, files, sizes, names) -> list[Boxes | None]:
    out: list[Boxes | None] = []
    found = 0
    for f, hw in zip(files, sizes, strict=True):
        rel = f.relative_to(root)
        txt = next(
            (
                p
                for p in (folder / rel.with_suffix(".txt"), folder / f"{f.stem}.txt")
                if p.is_file()
            ),
            None,
        )
        out.append((np.zeros((0, 4)), []))
        if txt is None:
            continue  # background, as Ultralytics reads it
        found += 1
        try:
            lines = txt.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceError(f"{txt} cannot be read as text ({exc})") from None
        for n, line in enumerate(lines, 1):
            parts = line.split()
            if not parts:
                continue
            where = f"line {n} of {txt}"
            if len(parts) != 5 or not _numbers(parts, 5):
                raise SourceError(f"{where}: expected 'class cx cy w h' (5 numbers), got {line!r}")
            cls, cx, cy, bw, bh = (float(p) for p in parts)
            if cls != int(cls) or not 0 <= cls < len(names):
                raise SourceError(
                    f"{where}: class {parts[0]} is not one of the model's {len(names)} labels "
                    f"(0..{len(names) - 1})"
                )
            if not all(0.0 <= v <= 1.0 for v in (cx, cy, bw, bh)):
                raise SourceError(
                    f"{where}: centre and size must be fractions of the image (0..1), got {line!r}"
                )
            h, w = hw
            box = [(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h]
            _append(out, len(out) - 1, box, int(cls), hw, where)
    if not found:
        raise SourceError(
            f"--calib-labels {folder} holds no .txt file named as any of the {len(files)} images"
        )
    return out


def _numbers(values, n: int) -> bool:
    if not isinstance(values, list | tuple) or len(values) != n:
        return False
    try:
        return all(math.isfinite(float(v)) for v in values)
    except (TypeError, ValueError):
        return False


def _append(out, i: int, box: list[float], cls: int, hw: tuple[int, int], where: str) -> None:
    h, w = hw
    x1, y1, x2, y2 = box
    if x2 <= x1 or y2 <= y1:
        raise SourceError(f"{where}: the box {_fmt(box)} has no area")
    if x1 < -SLACK or y1 < -SLACK or x2 > w + SLACK or y2 > h + SLACK:
        raise SourceError(f"{where}: the box {_fmt(box)} lies outside the {w}x{h} image")
    boxes, classes = out[i]
    out[i] = (np.vstack([boxes, [x1, y1, x2, y2]]), [*classes, cls])


def _fmt(box) -> str:
    return "(" + ", ".join(f"{v:.1f}" for v in box) + ")"


def to_input(boxes: Boxes | None, transform) -> tuple | None:
    """Boxes in an image's pixels -> (boxes, class ids, the image's region) in the model input's
    pixels (``transform``: the preprocessing's :class:`~edgert.runtime.resize.Transform` of that
    image). Detections are clipped to that region before they are compared with the boxes, as
    the app clips them to the image (and Ultralytics' validator does)."""
    if boxes is None:
        return None
    b, cls = boxes
    t = transform
    scale, offset = np.array([t.sx, t.sy, t.sx, t.sy]), np.array([t.ox, t.oy, t.ox, t.oy])
    h, w = t.source_hw
    region = np.array([0.0, 0.0, w, h]) * scale + offset
    return np.asarray(b, np.float64).reshape(-1, 4) * scale + offset, list(cls), region
