"""What a fleet sees: Prometheus metrics and health probes (``metrics``, ``http``) and MQTT events
and heartbeats (``mqtt``) from ``edgert camera`` and ``edgert serve``. Both libraries are the
optional ``edgert[telemetry]`` extra; without them the options say how to install."""

from __future__ import annotations

from edgert.runtime.errors import MissingDependency

PIP_LINE = "pip install 'edgert[telemetry]'"


def require(module: str, option: str):
    """``module`` imported, or MissingDependency naming ``option`` and the install line."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependency(
            f"{option} needs {module.split('.')[0]}, which is not installed: {PIP_LINE}"
        ) from None
