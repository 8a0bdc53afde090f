"""The pipeline's steps for any task model (classify, detect, segment, faces): preprocess each
frame in its stream's thread, infer a batch of frames of several streams in one call (what a power
cap paces), postprocess the batch into typed results (one runtime.results.Result a frame)."""

from __future__ import annotations

from .frame import Frame, Steps


def _preprocess(model, f: Frame):
    """(tensor, transform); the frame's source size only when the decoder scaled it (a library
    caller's own task model may take the image alone)."""
    if f.source_hw is None:
        return model.preprocess(f.image)
    return model.preprocess(f.image, f.source_hw)


def steps_for(model, runner=None) -> Steps:
    """The :class:`Steps` for a :class:`edgert.runtime.tasks.TaskModel`. ``runner`` (a
    power-capped runner around the model) replaces ``model.infer`` when given."""
    infer = (runner or model).infer

    def prepare(f: Frame) -> None:
        f.tensor, f.transform = _preprocess(model, f)

    def run(frames: list) -> object:
        return infer(model.collate([f.tensor for f in frames]))

    def finish(frames: list, outputs) -> None:
        for f, result in zip(frames, model.postprocess(outputs, [f.transform for f in frames])):
            f.results = result

    return Steps(prepare, run, finish)


def slot_steps(slot) -> Steps:
    """The steps of a run that can swap its model (:class:`edgert.apps.swap.camera.ModelSlot`):
    each frame is prepared for the model in use and carries it; a batch whose frames were
    prepared for two models (it straddles a swap) runs as two, each within its model's batch
    limit, so no frame is dropped, run twice, or given to a model it was not prepared for."""

    def prepare(f: Frame) -> None:
        f.model = slot.take()
        f.tensor, f.transform = _preprocess(f.model.model, f)

    def run(frames: list) -> list:
        groups: dict = {}
        for f in frames:
            groups.setdefault(id(f.model), (f.model, []))[1].append(f)
        out = []
        for loaded, fs in groups.values():
            step = loaded.model.max_batch or len(fs)
            for i in range(0, len(fs), step):
                part = fs[i : i + step]
                batch = loaded.model.collate([f.tensor for f in part])
                out.append((part, loaded, slot.infer(loaded, batch)))
        return out

    def finish(frames: list, outputs: list) -> None:
        try:
            for part, loaded, out in outputs:
                results = loaded.model.postprocess(out, [f.transform for f in part])
                for f, result in zip(part, results):
                    f.results = result
        finally:
            slot.done(frames)

    def discard(f: Frame) -> None:
        slot.done([f], inferred=False)

    return Steps(prepare, run, finish, discard=discard)
