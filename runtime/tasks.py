"""One interface for every task: load a bundle, hand it frames, get plain results.

    with load_task_model("mobilenet_v2.edgert") as model:       # classify, detect, segment, faces
        results = model(bgr_image)                               # list of dicts (or a dict)

Pipelines split a call into its three steps, and may batch the middle one:

    tensor, transform = model.preprocess(image)
    batch = model.collate([tensor, ...])                         # up to model.max_batch
    outputs = model.infer(batch)                                 # what a power cap paces
    results = model.postprocess(outputs, [transform, ...])       # one entry per image

The camera app, ``edgert run`` and the server treat every task alike through this; the MTCNN
face detector (three networks with their own pyramid and crops) is one more implementation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .bundle import TASKS, Bundle
from .errors import ModelError


class TaskModel:
    """Base of the task models. ``infer`` takes and returns what ``preprocess`` / ``postprocess``
    speak: a batch of model inputs and its outputs."""

    task = "generic"
    backend = "?"
    backend_reason = ""
    batched = True  # infer takes a numpy batch of preprocessed tensors (faces: a list of frames)
    max_batch: int | None = None  # the most images one infer call takes (None: no limit known)

    def preprocess(self, image: np.ndarray):
        raise NotImplementedError

    def collate(self, tensors: list):
        """One ``infer`` argument for several preprocessed images."""
        return np.stack(tensors)

    def infer(self, batch):
        raise NotImplementedError

    def postprocess(self, outputs, transforms: list) -> list:
        raise NotImplementedError

    def __call__(self, image: np.ndarray):
        tensor, transform = self.preprocess(image)
        return self.postprocess(self.infer(self.collate([tensor])), [transform])[0]

    def close(self) -> None:
        pass

    def __enter__(self) -> TaskModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_task_outputs(task: str, outputs) -> None:
    """ModelError when a model's outputs cannot be what ``task`` reads (a classifier called a
    segmenter): said when the model is exported or loaded, not as an error on the first frame."""
    if not outputs:
        return
    first = outputs[0]
    if task == "segment" and len(first.shape) != 4:
        raise ModelError(
            f"the task segment reads per-pixel class scores [N, C, H, W] from the first output, "
            f"and {first.describe()} is not that (is it a classifier? export it with its own --task)"
        )
    if task == "classify" and len(first.shape) < 2:
        raise ModelError(
            f"the task classify reads class scores [N, C] from the first output, and "
            f"{first.describe()} has no class axis"
        )


class EngineTask(TaskModel):
    """Classification, detection, segmentation (or raw outputs) on one :class:`Engine`."""

    def __init__(self, engine, task: str, top_k: int = 5, conf: float = 0.25, iou: float = 0.45):
        check_task_outputs(task, engine.outputs)
        if engine.preprocessing is None:
            raise ModelError(
                "the model records no preprocessing; export it with edgert export (--resize, --size, ...)"
            )
        self.engine = engine
        self.task = task
        self.top_k, self.conf, self.iou = top_k, conf, iou
        self.backend = engine.backend
        self.backend_reason = engine.backend_reason
        self.labels = engine.labels
        first = engine.inputs[0].shape if engine.inputs else ()
        # a fixed batch B takes exactly B images (collate pads); a dynamic one what the export says
        self.fixed_batch = first[0] if first and first[0] > 0 else None
        self.max_batch = self.fixed_batch or engine.max_batch

    def preprocess(self, image: np.ndarray):
        return self.engine.preprocessing.apply(image)

    def collate(self, tensors: list):
        if self.fixed_batch is not None and len(tensors) > self.fixed_batch:
            raise ModelError(
                f"{len(tensors)} images in one batch; this model takes exactly {self.fixed_batch} "
                "(export it with --dynamic-batch for more)"
            )
        batch = np.stack(tensors)
        if self.fixed_batch is not None and len(tensors) < self.fixed_batch:
            pad = np.zeros((self.fixed_batch - len(tensors), *batch.shape[1:]), batch.dtype)
            batch = np.concatenate([batch, pad])  # the padding's outputs are cut in postprocess
        return batch

    def infer(self, batch):
        return self.engine.infer(batch)

    def postprocess(self, outputs: dict, transforms: list) -> list:
        n = len(transforms)
        outputs = {k: v[:n] if v.ndim else v for k, v in outputs.items()}  # no fixed-batch padding
        values = list(outputs.values())
        if self.task == "classify":
            from .postprocess import classify

            return [
                [{"label": c.label, "index": c.index, "score": round(c.score, 6)} for c in row]
                for row in classify(values[0], self.labels, self.top_k)
            ]
        if self.task == "detect":
            from .detection import decode_detections

            dets = decode_detections(values, self.conf, self.iou, transforms=transforms,
                                     labels=self.labels, input_size=self.engine.preprocessing.size)  # fmt: skip
            return [[d.to_dict() for d in per_image] for per_image in dets]
        if self.task == "segment":
            from .postprocess import segment

            out = []
            for mask in segment(values[0]):
                classes, counts = np.unique(mask, return_counts=True)
                out.append({"mask_shape": list(mask.shape),
                            "classes": {int(c): int(n) for c, n in zip(classes, counts)}})  # fmt: skip
            return out
        n = len(values[0]) if values else 0
        return [
            {
                name: {"shape": list(v[i].shape), "dtype": v.dtype.name}
                for name, v in outputs.items()
            }
            for i in range(n)
        ]

    def close(self) -> None:
        self.engine.close()


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

    def preprocess(self, image: np.ndarray):
        return image, None

    def collate(self, tensors: list):
        return list(tensors)

    def infer(self, frames):
        return {"faces": self.detector.detect_batch(list(frames))}

    def postprocess(self, outputs: dict, transforms: list) -> list:
        return [[d.to_dict() for d in found] for found in outputs["faces"]]

    def close(self) -> None:
        self.detector.close()


def load_task_model(
    path: str | Path,
    task: str | None = None,
    backend: str = "auto",
    precision: str = "auto",
    top_k: int = 5,
    conf: float = 0.25,
    iou: float = 0.45,
    **options,
) -> TaskModel:
    """The task model for a bundle (or .onnx / .engine): the manifest says which task; ``task``
    must agree with it when given (a ``generic`` model takes any). ``options`` go to
    :meth:`Engine.load` (e.g. ``spin=False`` under a power cap)."""
    if task is not None and task not in TASKS:
        raise ModelError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if Path(path).is_dir() and Bundle(path).manifest.task == "faces":
        if task not in (None, "faces"):
            raise ModelError(f"{path} is a face-detection bundle, not a {task} model")
        from .faces import MtcnnDetector

        return FaceTask(MtcnnDetector(path, backend=backend, precision=precision, **options))
    if task == "faces":
        raise ModelError(
            f"--task faces needs a face-detection bundle (edgert export zoo:mtcnn), not {path}"
        )
    from .engine import Engine

    engine = Engine.load(path, backend=backend, precision=precision, **options)
    try:
        model_task = engine.manifest.task if engine.manifest else "generic"
        chosen = task or model_task
        if model_task not in (chosen, "generic"):
            raise ModelError(
                f"the model's task is {model_task}, not {chosen} (export it with --task {chosen}, "
                f"or pick --task {model_task})"
            )
        return EngineTask(engine, chosen, top_k, conf, iou)
    except BaseException:
        engine.close()
        raise
