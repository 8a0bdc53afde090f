"""Calibration and hold-out data, always through the bundle's own preprocessing.

Sources: a folder of images, a video file, an ``.npz`` (preprocessed tensors or raw uint8 images),
or ``zoo`` — the zoo entry's own data (each entry supplies them: :mod:`edgert.export.zoo`).
Subsets are seeded; calibration and hold-out never share a sample.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgert.runtime.bundle import Manifest
from edgert.runtime.errors import SourceError, first_line
from edgert.runtime.images import IMAGE_SUFFIXES, check_pixels, read_image
from edgert.runtime.regular import kind

from . import progress

VIDEO_SUFFIXES = {".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v"}
MIN_SAMPLES = 8


@dataclass
class Dataset:
    """Preprocessed model inputs (N, ...) with optional integer labels (a classifier's) or
    labelled boxes (a detector's: per sample, boxes in the model input's pixels and class ids,
    or None where the sample has no labels)."""

    inputs: np.ndarray
    labels: np.ndarray | None
    description: str
    objects: list | None = None

    def __len__(self) -> int:
        return len(self.inputs)

    @property
    def truth(self):
        """What the gate measures against: the labels or the labelled boxes (None: neither)."""
        return self.labels if self.labels is not None else self.objects

    def subset(self, idx) -> Dataset:
        return Dataset(
            self.inputs[idx],
            None if self.labels is None else self.labels[idx],
            self.description,
            None if self.objects is None else [self.objects[i] for i in np.asarray(idx)],
        )


@dataclass
class CalibrationData:
    calibration: Dataset
    holdout: Dataset
    source: str
    seed: int


def load(
    source: str | None,
    manifest: Manifest,
    calib_size: int = 500,
    holdout_size: int = 200,
    seed: int = 0,
    labels: str | None = None,
) -> CalibrationData:
    """Calibration + hold-out sets for ``manifest``'s model from ``source`` (None or 'zoo': the zoo
    model's own data). ``labels``: boxes labelled on a folder's images (:mod:`.box_labels`)."""
    if calib_size < MIN_SAMPLES:
        raise SourceError(f"--calib-size {calib_size} is too small; use at least {MIN_SAMPLES}")
    if labels and (source in (None, "zoo") or not Path(source).is_dir()):
        raise SourceError(
            "--calib-labels needs --calib to be a folder of images (the labels name its files)"
        )
    if source in (None, "zoo"):
        hint = "this model is not from the zoo: give calibration data with --calib (a folder of images, a video or an .npz)"
        return _zoo(_zoo_samples(manifest, calib_size, holdout_size, seed, hint), manifest, seed)
    path, pool, kind = _pool(source, calib_size + holdout_size)
    if pool is None:
        return _npz(path, manifest, calib_size, holdout_size, seed)
    truth = None
    if labels:
        from . import box_labels

        sizes = [im.shape[:2] for im in pool]
        truth = box_labels.read(labels, path, _image_files(path), sizes, manifest.labels)
    return _split_images(pool, manifest, calib_size, holdout_size, seed, kind, truth)


def _pool(source: str, wanted: int) -> tuple[Path, list[np.ndarray] | None, str]:
    """(path, the images of a folder or ``wanted`` frames of a video — None for an .npz —, what
    they are)."""
    path = Path(source)
    if not path.exists():
        raise SourceError(f"calibration source {path} does not exist")
    if path.is_dir():
        pool = _images_from_folder(path)
        return path, pool, f"{len(pool)} images in {path}"
    mode = path.stat().st_mode
    if path.suffix.lower() in (".npz", *VIDEO_SUFFIXES) and not stat.S_ISREG(mode):
        # np.load or the video decoder would wait on a FIFO for ever, read a device for ever
        raise SourceError(f"calibration source {path} is not a regular file ({kind(mode)})")
    if path.suffix.lower() == ".npz":
        return path, None, str(path)
    if path.suffix.lower() in VIDEO_SUFFIXES:
        pool = _frames_from_video(path, wanted)
        return path, pool, f"{len(pool)} frames of {path}"
    raise SourceError(
        f"{path} is not a folder of images, a video ({', '.join(sorted(VIDEO_SUFFIXES))}) or an .npz"
    )


def load_images(
    source: str | None, manifest: Manifest, calib_size: int, holdout_size: int, seed: int
) -> tuple[list[np.ndarray], list[np.ndarray], str]:
    """(calibration images, hold-out images, where from): raw BGR images for a model that takes
    whole images of any size (the face detector runs its own pyramid and crops). Sources: a
    folder, a video, an .npz of uint8 images (N, H, W, C), or the zoo entry's own images."""
    if calib_size < MIN_SAMPLES:
        raise SourceError(f"--calib-size {calib_size} is too small; use at least {MIN_SAMPLES}")
    if source in (None, "zoo"):
        hint = "give calibration images with --calib (a folder of images, a video or an .npz of uint8 images)"
        got = _zoo_samples(manifest, calib_size, holdout_size, seed, hint)
        if got.preprocessed:
            raise SourceError(
                f"zoo:{manifest.source.zoo}'s own data are model inputs, and this model takes "
                "whole images: give --calib"
            )
        return list(got.calibration), list(got.holdout), got.source
    path, pool, kind = _pool(source, calib_size + holdout_size)
    if pool is None:
        arr, _ = _read_npz(path, manifest)
        if not _raw_images(arr):
            raise SourceError(
                f"{path} must hold uint8 images (N, H, W, 3) for this model: it takes whole images"
            )
        pool, kind = list(arr), f"{len(arr)} images in {path}"
    cal_idx, hold_idx = _split(len(pool), calib_size, holdout_size, seed, kind)
    return [pool[i] for i in cal_idx], [pool[i] for i in hold_idx], kind


def _preprocess(manifest: Manifest, images: list[np.ndarray], what: str) -> np.ndarray:
    pre = manifest.preprocessing
    if pre is None:
        raise SourceError(
            "the bundle records no preprocessing, so images cannot be turned into inputs; give an .npz of input tensors"
        )
    tensors = []
    for i, img in enumerate(progress.each(images, f"preprocessing {what}s", len(images), "images")):
        if img.ndim == 3 and img.shape[2] not in (1, 3, 4):
            raise SourceError(f"{what} #{i} has {img.shape[2]} channels; images need 1, 3 or 4")
        tensors.append(pre.apply(img)[0])
    shapes = sorted({t.shape for t in tensors})
    if len(shapes) > 1:  # a model that takes any size (size -1) gets each image as it is
        raise SourceError(
            f"the {what}s come in {len(shapes)} sizes ({', '.join('x'.join(map(str, s)) for s in shapes[:3])}"
            f"{', ...' if len(shapes) > 3 else ''}) and the model takes images as they are: give images of one size"
        )
    return np.stack(tensors).astype(manifest.inputs[0].dtype)


def _split(
    n: int, calib_size: int, holdout_size: int, seed: int, what: str
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded, disjoint (calibration, hold-out) index arrays over ``n`` samples."""
    if n < MIN_SAMPLES + 2:
        raise SourceError(
            f"only {n} usable samples in {what}; calibration needs at least {MIN_SAMPLES + 2}"
        )
    order = np.random.default_rng(seed).permutation(n)
    n_hold = min(holdout_size, max(2, n // 5))
    n_cal = min(calib_size, n - n_hold)
    return order[n_hold : n_hold + n_cal], order[:n_hold]


def _split_images(
    pool, manifest, calib_size, holdout_size, seed, kind, truth=None
) -> CalibrationData:
    """``truth``: per image of ``pool``, its labelled boxes in its own pixels (or None); the
    hold-out's are carried into the model input's pixels."""
    cal_idx, hold_idx = _split(len(pool), calib_size, holdout_size, seed, kind)
    cal = [pool[i] for i in cal_idx]
    hold = [pool[i] for i in hold_idx]
    n_cal, n_hold = len(cal), len(hold)
    cal_in = _preprocess(manifest, cal, "calibration image")
    hold_in = _preprocess(manifest, hold, "hold-out image")
    objects = cal_objects = None
    if truth is not None:
        from .box_labels import to_input

        geometry = manifest.preprocessing.geometry
        objects = [to_input(truth[i], geometry(pool[i].shape[:2])) for i in hold_idx]
        # the calibration images' too: its validation split chooses by them as well
        cal_objects = [to_input(truth[i], geometry(pool[i].shape[:2])) for i in cal_idx]
        if all(o is None for o in objects):
            raise SourceError(
                f"none of the {n_hold} hold-out images has labels (--calib-labels): label more "
                "of the folder's images"
            )
    labelled = f", {sum(o is not None for o in objects)} labelled" if objects else ""
    return CalibrationData(
        Dataset(cal_in, None, f"{n_cal} of {kind}", cal_objects),
        Dataset(hold_in, None, f"{n_hold} other samples of {kind}{labelled}", objects),
        kind,
        seed,
    )


def _image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)


def _images_from_folder(folder: Path) -> list[np.ndarray]:
    files = _image_files(folder)
    if not files:
        raise SourceError(f"{folder} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
    images, bad = [], []
    for f in progress.each(files, f"reading {folder}", len(files), "images", name=_file_name):
        try:
            images.append(read_image(f))
        except SourceError:
            bad.append(f.name)
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise SourceError(
            f"{len(bad)} file(s) in {folder} fail to decode as images: {', '.join(bad[:3])}{more}"
        )
    return images


def _file_name(path: Path) -> str:
    return path.name


def _frames_from_video(path: Path, wanted: int) -> list[np.ndarray]:
    import cv2

    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise SourceError(f"{path} cannot be opened as a video")
    try:
        check_pixels(
            cap.get(cv2.CAP_PROP_FRAME_WIDTH), cap.get(cv2.CAP_PROP_FRAME_HEIGHT), str(path)
        )
    except SourceError:
        cap.release()
        raise
    total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) or 0
    step = max(1, total // wanted) if total else 1
    frames, i = [], 0
    with progress.step(f"reading {path.name}", wanted, "frames") as done:
        while len(frames) < wanted:
            ok, frame = cap.read()
            if not ok:
                break
            if i % step == 0:
                frames.append(frame)
                done.advance()
            i += 1
    cap.release()
    if not frames:
        raise SourceError(f"{path} yields no frames")
    return frames


def _raw_images(arr: np.ndarray) -> bool:
    """Whether an .npz array is raw uint8 images (N x H x W x C) rather than model inputs."""
    return arr.dtype == np.uint8 and arr.ndim == 4 and arr.shape[-1] in (1, 3)


def _read_npz(path: Path, manifest: Manifest) -> tuple[np.ndarray, np.ndarray | None]:
    """(the samples: the array named like the model's input, else the first that is not
    ``labels``; the labels or None), checked to be numeric, finite and as many as the labels."""
    try:
        with np.load(path, allow_pickle=False) as data:
            keys = [k for k in data if k != "labels"]
            if not keys:
                raise SourceError(f"{path} holds no arrays (expected the model input, N x ...)")
            name = manifest.inputs[0].name
            arr = data[name] if name in keys else data[keys[0]]
            labels = data.get("labels", None)
    except SourceError:
        raise
    except Exception as exc:  # noqa: BLE001 - zipfile, pickle refusal, truncated arrays
        raise SourceError(f"{path} is not a readable .npz: {first_line(exc, 120)}") from exc
    if arr.dtype.kind not in "fiub" or arr.ndim < 1 or len(arr) == 0:
        raise SourceError(
            f"{path} holds no numeric samples (array of shape {list(arr.shape)}, dtype {arr.dtype})"
        )
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise SourceError(f"{path} holds NaN or infinite values; calibration needs real inputs")
    if labels is not None and len(labels) != len(arr):
        raise SourceError(f"{path} has {len(labels)} labels for {len(arr)} samples")
    return arr, labels


def _npz(
    path: Path, manifest: Manifest, calib_size: int, holdout_size: int, seed: int
) -> CalibrationData:
    arr, labels = _read_npz(path, manifest)
    spec = manifest.inputs[0]
    if _raw_images(arr):
        return _split_images(
            list(arr), manifest, calib_size, holdout_size, seed, f"{len(arr)} images in {path}"
        )
    want = tuple(spec.shape[1:])
    if arr.ndim != len(spec.shape) or any(
        w >= 0 and w != g for w, g in zip(want, arr.shape[1:], strict=True)
    ):
        raise SourceError(
            f"{path} holds arrays of shape {list(arr.shape)}; the model input {spec.name} is {list(spec.shape)} "
            "(or give raw uint8 images N x H x W x C)"
        )
    arr = arr.astype(spec.dtype)
    cal_idx, hold_idx = _split(len(arr), calib_size, holdout_size, seed, str(path))
    full = Dataset(arr, labels, str(path))
    return CalibrationData(full.subset(cal_idx), full.subset(hold_idx), str(path), seed)


def _zoo_samples(manifest: Manifest, calib_size: int, holdout_size: int, seed: int, hint: str):
    """The zoo entry's own samples (:mod:`edgert.export.zoo`), or SourceError: ``hint`` for a
    model not from the zoo."""
    from edgert.export.zoo import ZOO

    name = manifest.source.zoo
    if name is None:
        raise SourceError(hint)
    got = ZOO[name].calibration_samples(calib_size, holdout_size, seed) if name in ZOO else None
    if got is None:
        raise SourceError(f"zoo model {name} has no calibration data of its own; give --calib")
    return got


def _zoo(got, manifest: Manifest, seed: int) -> CalibrationData:
    """A zoo entry's samples as calibration data, preprocessed for the bundle unless the entry
    gives model inputs."""
    cal, hold = got.calibration, got.holdout
    if not got.preprocessed:
        cal, hold = _preprocess(manifest, cal, "crop"), _preprocess(manifest, hold, "crop")
    return CalibrationData(
        Dataset(cal, None, got.calibration_text),
        Dataset(hold, got.labels, got.holdout_text),
        got.source,
        seed,
    )
