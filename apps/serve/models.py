"""What Triton serves of one bundle (PyTriton's ``bind`` arguments): ``NAME``, the bundle's own
tensors, where it is one engine, and ``NAME_image``, encoded images in and the task's results as
JSON out, one inference function per instance."""

from __future__ import annotations

import numpy as np

from edgert.runtime import json_text
from edgert.runtime.results import records

from .config import ServeConfig


def tensor(spec, batched: bool):
    from pytriton.model_config import Tensor

    shape = tuple(spec.shape[1:] if batched else spec.shape)
    return Tensor(name=spec.name, dtype=np.dtype(spec.dtype).type, shape=shape)


class TensorModel:
    """NAME: the bundle's tensors in, its outputs out."""

    def __init__(self, engine, counted=None) -> None:
        self.engine = engine
        self.counted = counted or (lambda n: None)

    def __call__(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        out = self.engine.infer(inputs)
        self.counted(len(next(iter(inputs.values()))) if inputs else 1)
        return out


def per_request(fn):
    """For models without batching PyTriton hands over a list of requests (each a mapping of
    input name to array, batch axis included): answer each one."""

    def infer(requests):
        return [fn(**dict(r.items())) for r in requests]

    return infer


class ImageModel:
    """NAME_image: encoded images -> preprocessing -> one batch -> results as JSON."""

    def __init__(
        self, model, batch_images: bool = True, counted=None, label: str = "", recent=None
    ) -> None:
        self.model = model  # an edgert.runtime.tasks.TaskModel
        self.counted = counted or (lambda n: None)
        self.label = label  # name@version#hash: in every result
        self.recent = recent  # swap.Recent: images and results a --swap-check compares on
        # a fixed-batch model (or one of several networks) takes one image per inference
        self.batch_images = batch_images and model.batched

    def __call__(self, image: np.ndarray) -> dict[str, np.ndarray]:
        from edgert.runtime.errors import EdgertError
        from edgert.runtime.images import decode_image

        frames, failed = [], {}
        for i, blob in enumerate(image.reshape(len(image), -1)[:, 0]):
            try:
                frames.append(decode_image(bytes(blob), "the request's image"))
            except EdgertError as exc:
                failed[i] = str(exc)
                frames.append(None)
        results: list = [None] * len(frames)
        raw: dict[str, np.ndarray] = {}
        no_raw: set[int] = set()  # said in their JSON: {"raw_outputs": false}
        ok = [i for i, f in enumerate(frames) if f is not None]
        if self.batch_images:
            groups: dict[tuple, list] = {}  # one inference per input size (an any-size model)
            for i in ok:
                try:
                    tensor, transform = self.model.preprocess(frames[i])
                except EdgertError as exc:  # this request's image only
                    failed[i] = str(exc)
                    continue
                groups.setdefault(tensor.shape, []).append((i, tensor, transform))
            for members in groups.values():
                idx = [i for i, _, _ in members]
                outputs = self.model.infer(np.stack([t for _, t, _ in members]))
                decoded = self.model.postprocess(outputs, [tr for _, _, tr in members])
                for name, value in outputs.items():
                    if name not in raw:
                        raw[name] = np.zeros((len(frames), *value.shape[1:]), value.dtype)
                    if raw[name].shape[1:] == value.shape[1:]:
                        raw[name][idx] = value
                    else:  # one batch holds one shape: these requests' raw outputs stay zeros
                        no_raw.update(idx)
                for i, r in zip(idx, decoded):
                    results[i] = r
        else:  # several networks, or a fixed batch of 1: one image per inference, no raw outputs
            for i in ok:
                try:
                    results[i] = self.model(frames[i])
                except EdgertError as exc:
                    failed[i] = str(exc)
        self.counted(len(frames) - len(failed))
        answered = [i for i in ok if i not in failed]
        if self.recent is not None and answered:
            self.recent.add(frames[answered[-1]], results[answered[-1]])
        text = [
            json_text.dumps(
                {"error": failed[i]}
                if i in failed
                else {
                    "results": records(results[i]),
                    "model": self.label,
                    **({"raw_outputs": False} if i in no_raw else {}),
                }
            )
            for i in range(len(frames))
        ]
        return {"result": np.array([[t.encode()] for t in text], dtype=np.object_), **raw}


def bindings(
    name: str, image_models: list, cfg: ServeConfig, counted, label: str, recent=None
) -> list:
    """PyTriton's ``bind`` arguments of one bundle's two models (NAME: its tensors, where it is one
    engine; NAME_image), one inference function per instance (``image_models``: one task model
    each). ``label``: the model's ``name@version#hash``, in every image result; ``recent``: where
    the image model keeps what a ``--swap-check`` compares on."""
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor

    bindings = []
    probe = image_models[0]
    if probe.engine is not None:  # one engine: its tensors are a model of their own
        engines = [m.engine for m in image_models]
        specs = engines[0]
        dynamic = bool(specs.inputs) and specs.inputs[0].shape[0] < 0
        recorded = specs.max_batch or 8
        max_batch = min(cfg.max_batch or recorded, recorded) if dynamic else 0
        tensor_config = ModelConfig(
            batching=dynamic,
            max_batch_size=max_batch,
            batcher=DynamicBatcher(max_queue_delay_microseconds=cfg.max_queue_delay_us),
        )
        bindings.append(
            dict(
                model_name=name,
                infer_func=[
                    batch(TensorModel(e, counted(name)))
                    if dynamic
                    else per_request(TensorModel(e, counted(name)))
                    for e in engines
                ],
                inputs=[tensor(s, dynamic) for s in specs.inputs],
                outputs=[tensor(s, dynamic) for s in specs.outputs],
                config=tensor_config,
            )
        )
        raw_outputs = [tensor(s, True) for s in specs.outputs] if dynamic else []
        image_batch = max_batch or cfg.max_batch or 8
    else:
        dynamic, raw_outputs, image_batch = False, [], cfg.max_batch or 8
    bindings.append(
        dict(
            model_name=f"{name}_image",
            infer_func=[
                batch(ImageModel(m, dynamic, counted(f"{name}_image"), label, recent))
                for m in image_models
            ],
            inputs=[Tensor(name="image", dtype=np.bytes_, shape=(1,))],
            outputs=[Tensor(name="result", dtype=np.bytes_, shape=(1,)), *raw_outputs],
            config=ModelConfig(
                max_batch_size=image_batch,
                batcher=DynamicBatcher(max_queue_delay_microseconds=cfg.max_queue_delay_us),
            ),
        )
    )
    return bindings
