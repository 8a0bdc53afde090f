"""The interface every task model speaks (:mod:`tasks` holds the registry and the one-engine
tasks; a task whose bundle is several networks brings its own, e.g. :class:`faces.FaceTask`)."""

from __future__ import annotations

import numpy as np


class TaskModel:
    """Base of the task models. ``infer`` takes and returns what ``preprocess`` / ``postprocess``
    speak: a batch of model inputs and its outputs."""

    task = "generic"
    backend = "?"
    backend_reason = ""
    batched = True  # infer takes a numpy batch of preprocessed tensors (else: a list of frames)
    engine = None  # the one Engine behind it, whose tensors a server can expose (None: several)
    max_batch: int | None = None  # the most images one infer call takes (None: no limit known)

    def preprocess(self, image: np.ndarray, source_hw: tuple[int, int] | None = None):
        """(tensor, transform) of one image; ``source_hw``: the size of the frame ``image`` was
        scaled from (by a decoder), which the transform maps back to."""
        raise NotImplementedError

    def collate(self, tensors: list):
        """One ``infer`` argument for several preprocessed images."""
        return np.stack(tensors)

    def infer(self, batch):
        raise NotImplementedError

    def postprocess(self, outputs, transforms: list) -> list:
        """One :class:`~edgert.runtime.results.Result` per transform (image)."""
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
