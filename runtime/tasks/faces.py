"""MTCNN face detection on three engines (P-Net over an image pyramid, then R-Net and O-Net on
batches of candidate crops), with NMS and bounding-box regression; boxes in source pixels."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..bundle import Bundle, verify_hash
from ..errors import BundleError, ModelError
from ..results import Result
from .detection import Detection, keep_sound, nms
from .task_model import TaskModel

NETWORKS = ("pnet", "rnet", "onet")  # the cascade, in the order it runs


def int8_file(file: str) -> str:
    """The INT8 file of one of the bundle's networks: rnet.onnx -> rnet.int8.onnx."""
    return file[: -len(".onnx")] + ".int8.onnx" if file.endswith(".onnx") else file + ".int8"


def _normalise(img_rgb: np.ndarray) -> np.ndarray:
    return ((img_rgb - 127.5) * 0.0078125).transpose(2, 0, 1)


def _generate(reg: np.ndarray, prob: np.ndarray, scale: float, threshold: float) -> np.ndarray:
    """P-Net output cells above threshold -> [x1, y1, x2, y2, score, r0..r3] in source pixels
    (12x12 cells at stride 2 of the scaled image)."""
    ys, xs = np.nonzero(prob >= threshold)
    if ys.size == 0:
        return np.zeros((0, 9), np.float32)
    pts = np.stack([xs, ys], axis=1).astype(np.float32)
    q1 = np.floor((2 * pts + 1) / scale)
    q2 = np.floor((2 * pts + 12) / scale)
    rows = np.concatenate([q1, q2, prob[ys, xs][:, None], reg[:, ys, xs].T], axis=1)
    rows = rows.astype(np.float32)
    return rows[keep_sound(rows)]  # a NaN or infinite offset or score: no candidate


def _square(boxes: np.ndarray) -> np.ndarray:
    b = boxes.copy()
    w, h = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    side = np.maximum(w, h)
    b[:, 0] += w * 0.5 - side * 0.5
    b[:, 1] += h * 0.5 - side * 0.5
    b[:, 2] = b[:, 0] + side
    b[:, 3] = b[:, 1] + side
    return b


def _regress(boxes: np.ndarray, reg: np.ndarray) -> np.ndarray:
    b = boxes.copy()
    w = b[:, 2] - b[:, 0] + 1
    h = b[:, 3] - b[:, 1] + 1
    b[:, 0] += reg[:, 0] * w
    b[:, 1] += reg[:, 1] * h
    b[:, 2] += reg[:, 2] * w
    b[:, 3] += reg[:, 3] * h
    return b


class MtcnnDetector:
    """Loads the three networks of an MTCNN bundle (see ``edgert export zoo:mtcnn``)."""

    def __init__(
        self,
        bundle_path: str | Path,
        backend: str = "auto",
        min_face: int | None = None,
        precision: str = "auto",
        **options,
    ) -> None:
        """``precision``: ``auto`` or ``fp32`` runs the FP32 networks, ``int8`` the INT8 ones
        ``edgert build --precision int8`` made (model.int8.onnx, rnet.int8.onnx, onet.int8.onnx)."""
        from ..engine import Engine

        b = Bundle(bundle_path)
        models = b.manifest.models
        if b.manifest.task != "faces" or not models:
            raise BundleError(
                f"{b.path} is not a face-detection bundle (export one with: edgert export zoo:mtcnn)"
            )
        missing = [n for n in NETWORKS if n not in models]
        if missing:
            raise BundleError(
                f"{b.path}: the manifest names no {' or '.join(missing)} network; a face-detection "
                f"bundle holds {', '.join(NETWORKS)} (export one with: edgert export zoo:mtcnn)"
            )
        if precision not in ("auto", "fp32", "int8"):
            raise ModelError(
                f"the face detector runs in FP32 or INT8 (edgert build --precision int8), not {precision}"
            )
        hashes = b.manifest.hashes
        files = {}
        for name, spec in models.items():  # file names were validated with the manifest
            file = spec.file if precision in ("auto", "fp32") else int8_file(spec.file)
            if file not in hashes:
                if file != spec.file:
                    raise ModelError(
                        f"{b.path} has no INT8 face detector ({file}); make one with: "
                        f"edgert build {b.path} --precision int8"
                    )
                raise BundleError(f"{b.path / file} is not recorded in the manifest")
            verify_hash(b.path / file, hashes[file])
            files[name] = b.path / file
        self.engines = {
            name: Engine.load(file, backend=backend, **options) for name, file in files.items()
        }
        cfg = b.manifest.detector
        self.min_face = min_face or cfg.get("min_face", 20)
        self.thresholds = cfg.get("thresholds", [0.6, 0.7, 0.7])
        self.factor = cfg.get("factor", 0.709)
        self.backend_reason = self.engines["pnet"].backend_reason

    def close(self) -> None:
        for e in self.engines.values():
            e.close()

    def _crops(self, img: np.ndarray, boxes: np.ndarray, size: int) -> np.ndarray:
        import cv2

        h, w = img.shape[:2]
        out = np.empty((len(boxes), 3, size, size), np.float32)
        # a box far past the image (a broken offset) is cropped as one at most 3x its size
        limits = np.array([-w, -h, -w, -h]), np.array([2 * w, 2 * h, 2 * w, 2 * h])
        for k, (x1, y1, x2, y2) in enumerate(np.clip(boxes[:, :4], *limits).astype(np.int64)):
            cx1, cy1, cx2, cy2 = max(x1, 0), max(y1, 0), min(x2, w), min(y2, h)
            patch = np.zeros((max(1, y2 - y1), max(1, x2 - x1), 3), np.float32)
            if cx2 > cx1 and cy2 > cy1:
                patch[cy1 - y1 : cy2 - y1, cx1 - x1 : cx2 - x1] = img[cy1:cy2, cx1:cx2]
            out[k] = _normalise(cv2.resize(patch, (size, size), interpolation=cv2.INTER_AREA))
        return out

    def _run(self, name: str, batch: np.ndarray, chunk: int = 128) -> list[np.ndarray]:
        engine = self.engines[name]
        parts = [engine.infer(batch[i : i + chunk]) for i in range(0, len(batch), chunk)]
        names = [o.name for o in engine.outputs]
        return [np.concatenate([p[n] for p in parts]) for n in names]

    def detect(self, image_bgr: np.ndarray) -> list[Detection]:
        return self.detect_batch([image_bgr])[0]

    def detect_batch(self, images: list[np.ndarray]) -> list[list[Detection]]:
        """Faces in several frames (a camera's streams): P-Net runs the frames of one size
        together per pyramid level; R-Net and O-Net run the crops of all frames in shared
        batches. The same boxes as :meth:`detect` frame by frame."""
        imgs = [im[:, :, ::-1].astype(np.float32) for im in images]
        boxes = self._pnet(imgs)
        for name, size, threshold, final in (
            ("rnet", 24, self.thresholds[1], False),
            ("onet", 48, self.thresholds[2], True),
        ):
            live = [k for k, b in enumerate(boxes) if len(b)]
            if not live:
                break
            crops = np.concatenate([self._crops(imgs[k], boxes[k], size) for k in live])
            prob, reg = self._run(name, crops)[:2]
            at = 0
            for k in live:
                n = len(boxes[k])
                boxes[k] = self._refine(
                    boxes[k], prob[at : at + n, 1], reg[at : at + n], threshold, final
                )
                at += n
        found = []
        for img, b in zip(imgs, boxes):
            h, w = img.shape[:2]
            b[:, [0, 2]] = b[:, [0, 2]].clip(0, w)
            b[:, [1, 3]] = b[:, [1, 3]].clip(0, h)
            found.append(
                [Detection(tuple(float(v) for v in r[:4]), float(r[4]), 0, "face") for r in b]
            )
        return found

    def _pnet(self, imgs: list[np.ndarray]) -> list[np.ndarray]:
        """Stage 1 for every frame: squared candidate boxes [x1, y1, x2, y2, score] each."""
        import cv2

        boxes = [np.zeros((0, 5), np.float32) for _ in imgs]
        by_shape: dict = {}
        for k, img in enumerate(imgs):
            by_shape.setdefault(img.shape[:2], []).append(k)
        for (h, w), members in by_shape.items():
            found: dict = {k: [] for k in members}
            scale = 12.0 / self.min_face
            side = min(h, w) * scale
            while side >= 12:  # the pyramid, one P-Net call per level for all frames of this size
                hs, ws = int(h * scale + 1), int(w * scale + 1)
                x = np.stack(
                    [
                        _normalise(cv2.resize(imgs[k], (ws, hs), interpolation=cv2.INTER_AREA))
                        for k in members
                    ]
                )
                out = self.engines["pnet"].infer(x)
                for j, k in enumerate(members):
                    b = _generate(out["reg"][j], out["prob"][j, 1], scale, self.thresholds[0])
                    if len(b):
                        found[k].append(b[nms(b[:, :4], b[:, 4], 0.5)])
                scale *= self.factor
                side *= self.factor
            for k in members:
                if not found[k]:
                    continue
                b = np.concatenate(found[k])
                b = b[nms(b[:, :4], b[:, 4], 0.7)]
                w_, h_ = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
                reg = b[:, 5:9]
                b = np.stack(
                    [
                        b[:, 0] + reg[:, 0] * w_,
                        b[:, 1] + reg[:, 1] * h_,
                        b[:, 2] + reg[:, 2] * w_,
                        b[:, 3] + reg[:, 3] * h_,
                        b[:, 4],
                    ],
                    axis=1,
                )
                boxes[k] = _square(b)
                boxes[k] = boxes[k][keep_sound(boxes[k][:, :5])]
        return boxes

    @staticmethod
    def _refine(
        boxes: np.ndarray, score: np.ndarray, reg: np.ndarray, threshold: float, final: bool
    ) -> np.ndarray:
        """R-Net or O-Net scores and offsets applied to one frame's boxes; a box whose score,
        offsets or moved box is NaN, infinite or out of range is dropped (counted)."""
        with np.errstate(invalid="ignore", over="ignore"):  # dropped by keep_sound
            keep = score > threshold
            boxes, reg = boxes[keep], reg[keep]
            boxes[:, 4] = score[keep]
            moved = _regress(boxes, reg)
        ok = keep_sound(np.column_stack([moved[:, :5], reg]))
        boxes, reg, moved = boxes[ok], reg[ok], moved[ok]
        if not len(boxes):
            return boxes
        if final:
            return moved[nms(moved[:, :4], moved[:, 4], 0.7, overlap="min")]
        order = nms(boxes[:, :4], boxes[:, 4], 0.7)
        return _square(_regress(boxes[order], reg[order]))


class FaceTask(TaskModel):
    """The MTCNN detector: its pyramid and crops are part of ``infer``, which takes a list of
    frames (of any sizes): P-Net runs frames of one size together, R-Net and O-Net the crops of
    all frames in shared batches."""

    task = "faces"
    batched = False

    def __init__(self, detector):
        self.detector = detector
        self.backend = f"mtcnn ({detector.engines['pnet'].backend})"
        self.backend_reason = detector.backend_reason

    def preprocess(self, image: np.ndarray, source_hw: tuple[int, int] | None = None):
        return image, None  # its pyramid scales each frame itself (its bundle says resize none)

    def collate(self, tensors: list):
        return list(tensors)

    def infer(self, frames):
        return {"faces": self.detector.detect_batch(list(frames))}

    def postprocess(self, outputs: dict, transforms: list) -> list:
        return [Result.of_objects(found, self.task) for found in outputs["faces"]]

    def close(self) -> None:
        self.detector.close()


def load_task(path, backend: str = "auto", precision: str = "auto", **options) -> FaceTask:
    """The face task's model for a face-detection bundle (the task registry's loader)."""
    return FaceTask(MtcnnDetector(path, backend=backend, precision=precision, **options))
