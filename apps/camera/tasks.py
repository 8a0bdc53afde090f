"""The pipeline's three stages for any task model (classify, detect, segment, faces): preprocess,
infer (what a power cap paces), postprocess into plain results."""

from __future__ import annotations

from .pipeline import Frame, Stage


def stages_for(model, runner=None) -> list[Stage]:
    """[preprocess, infer, postprocess] for a :class:`edgert.runtime.tasks.TaskModel`. ``runner``
    (a power-capped runner around the model) replaces ``model.infer`` when given."""
    infer = (runner or model).infer

    def preprocess(f: Frame) -> None:
        f.tensor, f.transform = model.preprocess(f.image)

    def run(f: Frame) -> None:
        f.outputs = infer(f.tensor[None] if model.batched else f.tensor)

    def post(f: Frame) -> None:
        f.results = model.postprocess(f.outputs, [f.transform])[0]

    return [Stage("preprocess", preprocess), Stage("infer", run), Stage("postprocess", post)]
