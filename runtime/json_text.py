"""The JSON text edgert writes (``run --json``, the camera's JSONL, events, MQTT, the web
viewer's and telemetry's answers, serve's results, summaries): always JSON (RFC 8259), which has
no NaN or Infinity. Python's ``json.dumps`` writes them as bare ``NaN`` / ``Infinity`` tokens,
and a reader in JavaScript (``JSON.parse``) or Go (``encoding/json``) then refuses the whole line.
A broken model's NaN that got this far is written as ``null`` instead, and the run goes on."""

from __future__ import annotations

import json
import math


def finite(value):
    """``value`` with every NaN or infinite float (numpy's float64 too) as None, through dicts,
    lists and tuples (tuples become lists, as JSON writes them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value, **options) -> str:
    """``json.dumps(value, **options)`` that never writes NaN or Infinity: such a number is
    ``null``. The value is copied only when it holds one (``allow_nan=False`` tells)."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:
        return json.dumps(finite(value), allow_nan=False, **options)
