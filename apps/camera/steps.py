"""The pipeline's steps for any task model (classify, detect, segment, faces): preprocess each
frame in its stream's thread, infer a batch of frames of several streams in one call (what a power
cap paces), postprocess the batch into plain results."""

from __future__ import annotations

from .frame import Frame, Steps


def steps_for(model, runner=None) -> Steps:
    """The :class:`Steps` for a :class:`edgert.runtime.tasks.TaskModel`. ``runner`` (a
    power-capped runner around the model) replaces ``model.infer`` when given."""
    infer = (runner or model).infer

    def prepare(f: Frame) -> None:
        f.tensor, f.transform = model.preprocess(f.image)

    def run(frames: list) -> object:
        return infer(model.collate([f.tensor for f in frames]))

    def finish(frames: list, outputs) -> None:
        for f, result in zip(frames, model.postprocess(outputs, [f.transform for f in frames])):
            f.results = result

    return Steps(prepare, run, finish)
