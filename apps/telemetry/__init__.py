"""What a fleet sees: Prometheus metrics and health probes (``metrics``, ``http``, ``serving``) and
MQTT events and heartbeats (``mqtt``) from ``edgert camera`` and ``edgert serve``. Both libraries
are the optional ``edgert[telemetry]`` extra; without them the options say how to install."""

from __future__ import annotations

from edgert.runtime.errors import require as _require

PIP_LINE = "pip install 'edgert[telemetry]'"


def require(module: str, option: str):
    """``module`` imported, or MissingDependency naming ``option`` and the install line."""
    return _require(module, PIP_LINE, option)
