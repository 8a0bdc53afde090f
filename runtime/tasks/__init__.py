"""The task registry, and one interface for every task: load a bundle, hand it frames, get plain
results.

    with load_task_model("mobilenet_v2.edgert") as model:       # classify, detect, segment, faces
        result = model(bgr_image)                                # a results.Result
        result.classes, result.objects, result.to_records()      # typed; the JSON edgert writes

Pipelines split a call into its three steps, and may batch the middle one:

    tensor, transform = model.preprocess(image)
    batch = model.collate([tensor, ...])                         # up to model.max_batch
    outputs = model.infer(batch)                                 # what a power cap paces
    results = model.postprocess(outputs, [transform, ...])       # one entry per image

Each task is one :class:`TaskSpec` in :data:`TASK_SPECS`: what its results are, what export,
the camera, the server and edgert build do with it, its task model (the decoder of one engine's
outputs, or a module of its own for a bundle of several networks: the MTCNN face detector,
:mod:`faces`) and its hooks, in the task's own module here (``classify``, ``detect``,
``segment``): decode, compare and judge (a swap check, the INT8 gate), draw (the overlay),
describe (``edgert run``) and observed (the rollback watch). Code elsewhere asks the spec
(``boxes``, ``images``, its hooks), never which task it is; a new task is its module and one
row. The one part that cannot live here, a several-network task's own build recipes (host
code, above the runtime), is one table in ``quantize/builder.py``: ``TASK_RECIPES``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import json_text
from ..bundle import TASKS, Bundle
from ..errors import ModelError
from ..results import Result
from . import classify, detect, embed, instances, obb, pose, segment
from .task_model import TaskModel

__all__ = [
    "TASK_SPECS",
    "EngineTask",
    "Result",
    "TaskModel",
    "TaskSpec",
    "load_task_model",
    "spec_of",
    "task_spec",
]


@dataclass(frozen=True)
class TaskSpec:
    """One task: what its results are and what every part of edgert does with it."""

    name: str
    kind: str  # what its bundle is called in a sentence ("a face-detection bundle")
    description: str
    images: bool = True  # takes images: export records preprocessing, the camera and server feed it
    boxes: bool = False  # results are boxes: --track, --line and --zone work on them
    class_scores: bool = False  # the first output is class scores the labels name (top-k, Triton)
    # the first output's (least rank, most rank or None, what it holds): checked on export/load
    first_output: tuple[int, int | None, str] | None = None
    letterbox: bool = False  # export's default resize keeps the aspect (and resizes bilinearly)
    export_option: bool = True  # `edgert export --task NAME` makes one (else: made_by)
    camera: bool = True  # `edgert camera --task NAME` is offered
    made_by: str | None = None  # how a bundle of this task is made (None: export with --task)
    # the hooks, each in the task's own module (tasks/classify.py, tasks/detect.py, ...):
    # one engine's outputs -> a Result per image (None: the raw outputs' names, shapes, dtypes)
    decode: Callable[[EngineTask, list, list], list] | None = None
    # (ref, got) Results per image -> measures (None: no measure: a check refuses to judge)
    compare: Callable[[list, list], dict] | None = None
    # (measures, bounds, what) -> why a candidate is refused, or None (--swap-check, serve)
    judge: Callable[[dict, object, str], str | None] | None = None
    draw: Callable[[np.ndarray, Result], list] | None = None  # onto the overlay; corner lines
    describe: Callable[[Result], list] | None = None  # edgert run's lines (None: the JSON)
    observed: Callable[[Result], list] | None = None  # (label, score)s the rollback watch counts
    # a detector-family head's values per candidate after its classes, from (kpt_shape, the
    # outputs' shapes); None where they cannot be told (no prototype output): its own module
    head_extras: Callable[[tuple | None, list], int | None] | None = None
    keypoints: bool = False  # its head carries K x D keypoints (kpt_shape, --keypoints)
    model: str | None = None  # a module whose load_task() loads a bundle of several networks
    plan: str | None = None  # why edgert builds no TensorRT plan for it (None: it does)
    takes_any: bool = False  # a model of this task may run as any task (--task says which)
    vectors: bool = False  # results are vectors: the manifest records their size, --gallery
    # a loaded model -> ModelError in one sentence where its outputs are unfit (an encoder's
    # NaN, constant or collapsed vectors): load_task_model runs it (run, camera, serve, swaps)
    health: Callable[[TaskModel], None] | None = None
    # (FP32's first output, a candidate's) on the hold-out -> the build's gate metrics of a
    # task whose results no decoder pairs (an encoder's neighbours)
    measure: Callable[[np.ndarray, np.ndarray], dict] | None = None

    def how_made(self) -> str:
        return self.made_by or f"edgert export MODEL --task {self.name}"

    @property
    def decodes_boxes(self) -> bool:
        """Its boxes are decoded from one network's outputs (not found by a cascade of several):
        what the build's gate decodes and compares, and where a detector's head is."""
        return self.boxes and self.model is None

    def no_measure(self) -> str | None:
        """Why two models of this task cannot be compared (no ``compare`` hook), or None: such a
        check refuses to judge, never passes by default."""
        if self.compare is None or self.judge is None:
            return f"edgert has no measure to compare two {self.name} models' results by"
        return None

    def lines(self, result: Result) -> list:
        """``edgert run``'s lines for one image's results (the JSON where it has no hook)."""
        if self.describe is not None:
            return self.describe(result)
        return [f"  {json_text.dumps(result.to_records())}"]

    def pairs(self, result: Result) -> list:
        """The (label, score)s of one image the rollback watch counts ([] with no hook)."""
        return self.observed(result) if self.observed is not None else []


HOOKS = (
    "decode",
    "compare",
    "judge",
    "draw",
    "describe",
    "observed",
    "head_extras",
    "health",
    "measure",
)


def _hooks(module, **overrides) -> dict:
    """A task module's hooks by name (what it lacks stays None)."""
    return {**{h: getattr(module, h, None) for h in HOOKS}, **overrides}


_NO_FACE_PLAN = (
    "the face detector runs its three networks on ONNX Runtime (with its TensorRT execution "
    "provider where installed); edgert builds no TensorRT plans for them"
)
TASK_SPECS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            "classify",
            "classification",
            "class scores: the top-k labels per image",
            class_scores=True,
            first_output=(2, None, "class scores [N, C]"),
            **_hooks(classify),
        ),
        TaskSpec(
            "detect",
            "detection",
            "boxes with labels and scores (SSD pair or YOLO head)",
            boxes=True,
            letterbox=True,
            **_hooks(detect),
        ),
        TaskSpec(
            "pose",
            "pose",
            "boxes with K keypoints each (a YOLO pose head; --keypoints KxD)",
            boxes=True,
            letterbox=True,
            first_output=(
                3,
                3,
                "a pose head [N, 4 + classes + K*D, candidates] or [N, K', 6 + K*D]",
            ),
            keypoints=True,
            **_hooks(pose),
        ),
        TaskSpec(
            "segment-instances",
            "instance-segmentation",
            "boxes with a mask each, from a YOLO-seg head's prototypes (not per-pixel classes)",
            boxes=True,
            letterbox=True,
            first_output=(3, 3, "detections with mask coefficients [N, ., .]"),
            **_hooks(instances),
        ),
        TaskSpec(
            "obb",
            "oriented-box",
            "rotated boxes (centre, sides, angle) with labels and scores (a YOLO OBB head)",
            boxes=True,
            letterbox=True,
            first_output=(3, 3, "an OBB head [N, 4 + classes + 1, candidates] or [N, K, 7]"),
            **_hooks(obb),
        ),
        TaskSpec(
            "segment",
            "segmentation",
            "per-pixel classes: one semantic mask per image (instance masks: segment-instances)",
            first_output=(4, 4, "per-pixel class scores [N, C, H, W]"),
            camera=False,
            **_hooks(segment),
        ),
        TaskSpec(
            "embed",
            "embedding",
            "one L2-normalised vector per image (an image encoder; --embed-layer cuts a classifier)",
            first_output=(2, 4, "one vector per image [N, D] (or [N, D, 1, 1])"),
            camera=False,
            vectors=True,
            **_hooks(embed),
        ),
        TaskSpec(
            "faces",
            "face-detection",
            "face boxes from the MTCNN cascade (P-Net, R-Net, O-Net)",
            boxes=True,
            export_option=False,
            made_by="edgert export zoo:mtcnn",
            model="edgert.runtime.tasks.faces",
            plan=_NO_FACE_PLAN,
            **_hooks(detect, decode=None, head_extras=None),  # boxes as a detector's: compare, draw
        ),
        TaskSpec(
            "generic",
            "generic",
            "the raw outputs (name, shape, dtype)",
            images=False,
            camera=False,
            made_by="edgert export MODEL",
            takes_any=True,
        ),
    )
}
assert tuple(TASK_SPECS) == TASKS, "every task the manifest may name has one spec"


def task_spec(name: str) -> TaskSpec:
    """The spec of a task, or ModelError naming the tasks there are."""
    try:
        return TASK_SPECS[name]
    except KeyError:
        raise ModelError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}") from None


def spec_of(result) -> TaskSpec | None:
    """The spec of the task whose model gave ``result`` (None: not a Result of a known task)."""
    return TASK_SPECS.get(getattr(result, "task", None) or "")


def check_task_outputs(task: str, outputs) -> None:
    """ModelError when a model's outputs cannot be what ``task`` reads (a classifier called a
    segmenter): said when the model is exported or loaded, not as an error on the first frame."""
    want = TASK_SPECS[task].first_output if task in TASK_SPECS else None
    if not outputs or want is None:
        return
    low, high, what = want
    first = outputs[0]
    if len(first.shape) < low or (high is not None and len(first.shape) > high):
        raise ModelError(
            f"the task {task} reads {what} from the first output, and {first.describe()} is not "
            "that (export the model with the --task its outputs mean)"
        )


class EngineTask(TaskModel):
    """A task on one :class:`Engine`: classification, detection, segmentation (its spec's
    ``decode``), or raw outputs."""

    def __init__(self, engine, task: str, top_k: int = 5, conf: float = 0.25, iou: float = 0.45):
        check_task_outputs(task, engine.outputs)
        if engine.preprocessing is None:
            raise ModelError(
                "the model records no preprocessing; export it with edgert export (--resize, --size, ...)"
            )
        self.engine = engine
        self.task = task
        self.decode = TASK_SPECS[task].decode
        self.top_k, self.conf, self.iou = top_k, conf, iou
        self.backend = engine.backend
        self.backend_reason = engine.backend_reason
        self.labels = engine.labels
        first = engine.inputs[0].shape if engine.inputs else ()
        # a fixed batch B takes exactly B images (collate pads); a dynamic one what the export says
        self.fixed_batch = first[0] if first and first[0] > 0 else None
        self.max_batch = self.fixed_batch or engine.max_batch

    def preprocess(self, image: np.ndarray, source_hw: tuple[int, int] | None = None):
        """(tensor, transform); ``source_hw``: the size of the frame ``image`` was scaled from."""
        return self.engine.preprocessing.apply(image, source_hw=source_hw)

    def collate(self, tensors: list):
        if self.fixed_batch is not None and len(tensors) > self.fixed_batch:
            raise ModelError(
                f"{len(tensors)} images in one batch; this model takes exactly {self.fixed_batch} "
                "(export it with --dynamic-batch for more)"
            )
        if len(tensors) == 1 and self.fixed_batch in (None, 1):
            return np.expand_dims(tensors[0], 0)  # a view: one camera, no copy of its tensor
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
        if self.decode is not None:
            return self.decode(self, values, transforms)
        n = len(values[0]) if values else 0
        return [
            Result(
                "raw",
                self.task,
                raw={
                    name: {"shape": list(v[i].shape), "dtype": v.dtype.name}
                    for name, v in outputs.items()
                },
            )
            for i in range(n)
        ]

    def close(self) -> None:
        self.engine.close()


class _Decoding:
    """What a task's decoder reads of a model (its manifest, preprocessing, labels, thresholds),
    for outputs computed elsewhere."""

    def __init__(self, manifest, conf: float, iou: float) -> None:
        self.engine = self
        self.manifest, self.preprocessing = manifest, manifest.preprocessing
        self.task, self.labels = manifest.task, manifest.labels
        self.conf, self.iou = conf, iou


def decode_outputs(manifest, values: list, conf: float = 0.25, iou: float = 0.45) -> list:
    """Outputs of a bundle's model computed elsewhere (the build's FP32 and candidates' runs,
    each [N, ...], in the model's output order) -> one :class:`Result` per sample, decoded as its
    task decodes a frame's, in model-input pixels."""
    return TASK_SPECS[manifest.task].decode(_Decoding(manifest, conf, iou), list(values), [])


def load_task_model(
    path: str | Path | Bundle,
    task: str | None = None,
    backend: str = "auto",
    precision: str = "auto",
    top_k: int = 5,
    conf: float = 0.25,
    iou: float = 0.45,
    **options,
) -> TaskModel:
    """The task model for a bundle (its path, or a :class:`Bundle` already read: its manifest is
    not read again) or an .onnx / .engine: the manifest says which task; ``task`` must agree
    with it when given (a ``generic`` model takes any). ``options`` go to :meth:`Engine.load`
    (e.g. ``spin=False`` under a power cap)."""
    asked = task_spec(task) if task is not None else None
    bundle = path if isinstance(path, Bundle) else Bundle(path) if Path(path).is_dir() else None
    path = bundle.path if bundle is not None else path
    if bundle is not None:  # a description its graph contradicts: refused before it loads
        from .fit import check_bundle

        check_bundle(bundle.manifest, str(bundle.path / "manifest.json"))
    own = TASK_SPECS[bundle.manifest.task] if bundle is not None else None
    if own is not None and own.model is not None:  # a bundle of several networks: its own loader
        if asked not in (None, own):
            raise ModelError(f"{path} is a {own.kind} bundle, not a {task} model")
        load = importlib.import_module(own.model).load_task
        return load(path, backend=backend, precision=precision, **options)
    if asked is not None and asked.model is not None:
        raise ModelError(
            f"--task {task} needs a {asked.kind} bundle ({asked.how_made()}), not {path}"
        )
    from ..engine import Engine

    engine = Engine.load(bundle or path, backend=backend, precision=precision, **options)
    try:
        model_task = engine.manifest.task if engine.manifest else "generic"
        chosen = task or model_task
        own_spec = TASK_SPECS.get(model_task)
        if model_task != chosen and not (own_spec is not None and own_spec.takes_any):
            raise ModelError(
                f"the model's task is {model_task}, not {chosen} (export it with --task {chosen}, "
                f"or pick --task {model_task})"
            )
        model = EngineTask(engine, chosen, top_k, conf, iou)
        if TASK_SPECS[chosen].health is not None:
            TASK_SPECS[chosen].health(model)
        return model
    except BaseException:
        engine.close()
        raise
