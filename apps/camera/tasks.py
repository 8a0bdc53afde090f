"""What the pipeline's stages do for each task: preprocess, infer, postprocess into plain results."""

from __future__ import annotations

from edgert.runtime.errors import ModelError

from .pipeline import Frame, Stage

TASKS = ("classify", "detect", "faces")


def face_stages(detector) -> list[Stage]:
    """MTCNN: the detector runs its own pyramid and crops, so preprocessing is part of infer."""

    def preprocess(f: Frame) -> None:
        f.tensor = f.image

    def run(f: Frame) -> None:
        f.outputs = {"faces": detector.detect(f.tensor)}

    def post(f: Frame) -> None:
        f.results = [d.to_dict() for d in f.outputs["faces"]]

    return [Stage("preprocess", preprocess), Stage("infer", run), Stage("postprocess", post)]


def stages_for(
    engine, task: str | None, top_k: int = 3, conf: float = 0.25, iou: float = 0.45, runner=None
) -> tuple[str, list[Stage]]:
    """(task, [preprocess, infer, postprocess]) for a loaded engine. ``runner`` (e.g. a power-capped
    runner) replaces engine.infer when given."""
    model_task = engine.manifest.task if engine.manifest else "generic"
    task = task or model_task
    if task not in TASKS:
        raise ModelError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if model_task not in (task, "generic"):
        raise ModelError(
            f"the model's task is {model_task}, not {task} (export it with --task {task}, or pick --task {model_task})"
        )
    pre = engine.preprocessing
    if pre is None:
        raise ModelError(
            "the model records no preprocessing; export it with edgert export (--resize, --size, ...)"
        )
    infer = (runner or engine).infer
    labels = engine.labels

    def preprocess(f: Frame) -> None:
        f.tensor, f.transform = pre.apply(f.image)

    def run(f: Frame) -> None:
        f.outputs = infer(f.tensor[None])

    if task == "classify":
        from edgert.runtime.postprocess import classify

        def post(f: Frame) -> None:
            top = classify(next(iter(f.outputs.values())), labels, top_k)[0]
            f.results = [{"label": c.label, "score": round(c.score, 5)} for c in top]

    else:
        from edgert.runtime.detection import decode_ssd, decode_yolo

        def post(f: Frame) -> None:
            values = list(f.outputs.values())
            if len(values) == 2:
                boxes, scores = sorted(values, key=lambda v: v.shape[-1] != 4)
                size = pre.size if float(boxes.max(initial=0)) <= 1.5 else None
                dets = decode_ssd(
                    boxes,
                    scores,
                    conf,
                    iou,
                    input_size=size,
                    transforms=[f.transform],
                    labels=labels,
                )
            else:
                dets = decode_yolo(values[0], conf, iou, transforms=[f.transform], labels=labels)
            f.results = [d.to_dict() for d in dets[0]]

    return task, [Stage("preprocess", preprocess), Stage("infer", run), Stage("postprocess", post)]
