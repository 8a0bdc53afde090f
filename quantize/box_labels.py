"""Boxes a user labelled on their calibration images (``edgert build --calib-labels``): COCO's JSON
or Ultralytics' YOLO txt files, read into boxes in each image's own pixels and class ids of the
bundle's labels. The gate then also measures FP32's and the quantized model's mAP against them.

- COCO (a ``.json`` file): ``images`` (``file_name``, ``width``, ``height``) matched to the
  folder's images by path inside the folder, else by file name; ``annotations`` (``bbox`` as x,
  y, width, height in pixels, ``category_id``); ``categories`` matched to the bundle's labels by
  name. Crowd regions (``iscrowd`` 1) are left out. An image the file does not list is not used.
  Ids are numbers or strings; ``width``, ``height`` whole numbers; ``iscrowd`` 0 or 1.
- YOLO (a folder of ``.txt``; the calibration folder itself when they sit beside the images): per
  image, the file of the same path inside the folder, else of the same stem; one object per line,
  ``class cx cy w h``, the centre and size as fractions of the image, the class an index into the
  bundle's labels. As Ultralytics reads them, an image without a file is background (no objects).

Anything that does not fit is one sentence naming the file and the line or annotation, and so
are labels that hold no box at all (a measure against them would judge nothing). Only regular
files of bounded size are read (a FIFO or ``/dev/zero`` is refused before a byte is read).
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import numpy as np

from edgert.runtime.errors import SourceError
from edgert.runtime.regular import NotRegular, kind, read_regular

Boxes = tuple[np.ndarray, list[int]]  # [K, 4] x1 y1 x2 y2 in the image's pixels, class ids
SLACK = 1.0  # pixels a box may reach past the image's edge (rounding in labelling tools)
# COCO's train2017 instances file is 448 MiB; a COCO file of one's calibration images is far less
MAX_JSON_BYTES = 1 << 30
MAX_TXT_BYTES = 64 << 20  # one image's YOLO labels (50,000 boxes are about 2 MB)


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
    labelled = [o for o in out if o is not None]
    if not labelled:
        raise SourceError(f"--calib-labels {path} labels none of the {len(files)} images in {root}")
    if not any(len(o[1]) for o in labelled):
        raise SourceError(
            f"--calib-labels {path} holds no box on the {len(labelled)} images it labels: there "
            "is nothing to measure the detector against (COCO's iscrowd 1 regions are left out)"
        )
    return out


def _coco(path: Path, root: Path, files, sizes, names) -> list[Boxes | None]:
    data = _load_json(path)
    lower = {n.strip().lower(): i for i, n in enumerate(names)}
    category: dict = {}
    for k, c in enumerate(data["categories"]):
        if isinstance(c, dict) and "id" in c:
            category[_id(c["id"], f"{path}: category #{k} has id")] = str(c.get("name", ""))
    out: list[Boxes | None] = [None] * len(files)
    image_of = _images(path, data["images"], root, files, sizes, out)
    for k, a in enumerate(data["annotations"]):
        if not isinstance(a, dict):
            raise SourceError(f"{path}: annotation #{k} is not an object")
        where = f"{path}: annotation #{k}"
        i = image_of.get(_id(a.get("image_id"), f"{where} has image_id"))
        if _crowd(a.get("iscrowd"), where) or i is None:
            continue
        box = a.get("bbox")
        if not _numbers(box, 4):
            raise SourceError(f"{where} has bbox {_short(box)}, not [x, y, w, h]")
        cat = _id(a.get("category_id"), f"{where} has category_id")
        if cat not in category:
            raise SourceError(f"{where} has category_id {_short(cat)}, not a category")
        cls = lower.get(category[cat].strip().lower())
        if cls is None:
            raise SourceError(
                f"{path}: category {_short(category[cat])} (id {_short(cat)}) is not one of the "
                f"model's labels ({', '.join(names[:6])}{', ...' if len(names) > 6 else ''})"
            )
        x, y, bw, bh = (float(v) for v in box)
        _append(out, i, [x, y, x + bw, y + bh], cls, sizes[i], where)
    return out


def _load_json(path: Path) -> dict:
    """A COCO file's JSON: read only from a regular file within :data:`MAX_JSON_BYTES`."""
    try:
        data = json.loads(read_regular(path, MAX_JSON_BYTES).decode("utf-8-sig"))
    except NotRegular as exc:
        raise SourceError(f"--calib-labels {path} {exc}: not a COCO annotation file") from None
    except RecursionError:
        raise SourceError(
            f"{path} is nested too deeply to be a COCO annotation file (lists or objects within "
            "each other thousands of times)"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SourceError(f"{path} is not a readable JSON file ({_short(exc)})") from None
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k), list) for k in ("images", "annotations", "categories")
    ):
        raise SourceError(
            f"{path} is not a COCO annotation file: it needs lists of images, annotations and "
            "categories"
        )
    return data


def _images(path: Path, images: list, root: Path, files, sizes, out: list) -> dict:
    """COCO image id -> the index of the calibration image it names (matched by path inside the
    folder, else by file name); each such image's entry of ``out`` becomes "no boxes yet"."""
    by_rel = {f.relative_to(root).as_posix(): i for i, f in enumerate(files)}
    by_name: dict[str, list[int]] = {}
    for i, f in enumerate(files):
        by_name.setdefault(f.name, []).append(i)
    image_of: dict = {}
    for k, im in enumerate(images):
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
        said = [im.get("width"), im.get("height")]
        for side, value in zip(("width", "height"), said, strict=True):
            if value is not None and (type(value) is not int or value <= 0):
                raise SourceError(
                    f"{path}: image {_short(name)} has {side} {_short(value)}, not a whole "
                    "number of pixels"
                )
        if said not in ([None, None], [w, h]):
            raise SourceError(
                f"{path}: image {_short(name)} is {w}x{h} but the file says "
                f"{_short(said[0], 12)}x{_short(said[1], 12)}: labels of another version of it?"
            )
        image_of[_id(im["id"], f"{path}: image #{k} has id")] = i
        out[i] = (np.zeros((0, 4)), [])
    return image_of


def _id(value, where: str):
    """An id of COCO's (a number or a string, what a dict can key), else one sentence."""
    if value is None or (isinstance(value, (int, float, str)) and not isinstance(value, bool)):
        return value
    raise SourceError(f"{where} {_short(value)}, not a number or a string")


def _crowd(value, where: str) -> bool:
    """COCO's ``iscrowd``: 0 or 1 (a bool, or "0" / "1" as some converters write it); anything
    else is refused, not read as true (a string "0" is truthy: every box would be dropped)."""
    if value is None:
        return False
    if isinstance(value, str) and value.strip() in ("0", "1"):
        value = int(value)
    if isinstance(value, (bool, int)) and value in (0, 1):
        return bool(value)
    raise SourceError(f"{where} has iscrowd {_short(value)}; COCO's iscrowd is 0 or 1")


def _yolo(folder: Path, root: Path, files, sizes, names) -> list[Boxes | None]:
    out: list[Boxes | None] = []
    found = 0
    for f, hw in zip(files, sizes, strict=True):
        rel = f.relative_to(root)
        txt = next(
            (p for p in (folder / rel.with_suffix(".txt"), folder / f"{f.stem}.txt") if _has(p)),
            None,
        )
        out.append((np.zeros((0, 4)), []))
        if txt is None:
            continue  # background, as Ultralytics reads it
        found += 1
        try:
            lines = read_regular(txt, MAX_TXT_BYTES).decode("utf-8-sig").splitlines()
        except NotRegular as exc:
            raise SourceError(f"{txt} {exc}: not a YOLO label file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceError(f"{txt} cannot be read as text ({_short(exc)})") from None
        for n, line in enumerate(lines, 1):
            parts = line.split()
            if not parts:
                continue
            where = f"line {n} of {txt}"
            if len(parts) != 5 or not _numbers(parts, 5):
                raise SourceError(
                    f"{where}: expected 'class cx cy w h' (5 numbers), got {_short(line)}"
                )
            cls, cx, cy, bw, bh = (float(p) for p in parts)
            if cls != int(cls) or not 0 <= cls < len(names):
                raise SourceError(
                    f"{where}: class {_cut(parts[0])} is not one of the model's "
                    f"{len(names)} labels (0..{len(names) - 1})"
                )
            if not all(0.0 <= v <= 1.0 for v in (cx, cy, bw, bh)):
                raise SourceError(
                    f"{where}: centre and size must be fractions of the image (0..1), got "
                    f"{_short(line)}"
                )
            h, w = hw
            box = [(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h]
            _append(out, len(out) - 1, box, int(cls), hw, where)
    if not found:
        raise SourceError(
            f"--calib-labels {folder} holds no .txt file named as any of the {len(files)} images"
        )
    return out


def _has(path: Path) -> bool:
    """Whether a label file has this name: a regular file (where a link leads) is one; anything
    else there (a FIFO, a link to a device, a folder, a broken link) is one sentence, never
    silently "no labels" (background)."""
    if not os.path.lexists(path):
        return False
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise SourceError(f"{path} cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        raise SourceError(f"{path} is not a regular file ({kind(mode)}): not a YOLO label file")
    return True


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
    return "(" + ", ".join(f"{v:.1f}" if abs(v) < 1e9 else f"{v:.3g}" for v in box) + ")"


def _cut(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(value, limit: int = 60) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters (a 5 MB line, a 400-digit
    number or a deep list stays one short sentence)."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # nested deeper than repr goes; an int past its limit
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def to_input(boxes: Boxes | None, transform) -> tuple | None:
    """Boxes in an image's pixels -> (boxes, class ids, the image's region) in the model input's
    pixels (``transform``: the preprocessing's
    :class:`~edgert.runtime.images.resize.Transform` of that image). Detections are clipped to that region before they are compared with the boxes, as
    the app clips them to the image (and Ultralytics' validator does)."""
    if boxes is None:
        return None
    b, cls = boxes
    t = transform
    scale, offset = np.array([t.sx, t.sy, t.sx, t.sy]), np.array([t.ox, t.oy, t.ox, t.oy])
    h, w = t.source_hw
    region = np.array([0.0, 0.0, w, h]) * scale + offset
    return np.asarray(b, np.float64).reshape(-1, 4) * scale + offset, list(cls), region
