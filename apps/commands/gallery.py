"""``edgert run MODEL IMAGE --gallery DIR``: an encoder's nearest gallery images to each image,
by the cosine similarity of their L2-normalised vectors (exact: every gallery vector is
compared)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgert.runtime import embeddings
from edgert.runtime.errors import ModelError, ShapeError, SourceError, escape_controls


class Gallery:
    """The gallery's image paths and their unit vectors [G, D]."""

    def __init__(self, folder: str, paths: list, vectors: np.ndarray) -> None:
        self.folder, self.paths, self.vectors = folder, paths, vectors

    @classmethod
    def of(cls, model, folder: str, files: list) -> Gallery:
        """Every image of ``files`` (the gallery folder's) through ``model``, in batches."""
        from edgert.runtime.images import read_image
        from edgert.runtime.tasks import task_spec

        spec = task_spec(model.task)
        if not spec.vectors:
            raise ModelError(
                f"--gallery ranks an encoder's vectors (a bundle of task embed: edgert export "
                f"MODEL --task embed), not a {spec.kind} model's results"
            )
        step = max(1, model.max_batch or 1)
        rows = []
        for i in range(0, len(files), step):
            part = []
            for path in files[i : i + step]:
                try:
                    part.append(model.preprocess(read_image(path)))
                except (SourceError, ShapeError) as exc:
                    raise SourceError(f"the gallery image {path}: {exc}") from None
            outputs = model.infer(model.collate([t for t, _ in part]))
            rows += model.postprocess(outputs, [tr for _, tr in part])
        return cls(folder, list(files), np.stack([r.embedding.vector for r in rows]))

    def nearest(self, result, k: int) -> list:
        """The ``k`` gallery images most similar to ``result``'s vector: [{image, similarity}]."""
        query = result.embedding.vector[None]
        if query.shape[1] != self.vectors.shape[1]:
            raise ModelError("the gallery's vectors and the image's differ in size")
        idx, sims = embeddings.neighbours(self.vectors, query, k)
        return [
            {"image": str(self.paths[i]), "similarity": round(float(s), 6)}
            for i, s in zip(idx[0], sims[0])
        ]

    def lines(self, found: list) -> list:
        """``edgert run``'s lines for :meth:`nearest`'s list."""
        head = f"  nearest of {len(self.paths)} in {Path(self.folder)} (cosine similarity):"
        lines = [head, *(f"    {f['similarity']:7.4f}  {f['image']}" for f in found)]
        return [escape_controls(line) for line in lines]  # file names: no line of their own
