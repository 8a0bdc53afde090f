"""Names a package offers from its modules, imported when first asked for (PEP 562), so that
importing the package loads no optional library (OpenCV, GStreamer, paho) until a name is used."""

from __future__ import annotations

import importlib


def lazy_names(package: str, where: dict[str, str]):
    """A module ``__getattr__`` for ``package``: ``where`` maps a name to its submodule."""

    def __getattr__(name: str):
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
