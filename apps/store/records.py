"""The one adapter between the camera's events and the store: :func:`row_of` reads an event
record (today's dict: ``event``, ``stream``, ``time``, ``track_id``, ``label``, ``line``,
``zone``, ``clip``, ``snapshot``, ``secondary``...) and gives the row the store keeps. The
kind is read with :func:`edgert.runtime.events.kind_of`; nothing else reads the records.

A second stage's ``track_label`` event keeps its label in the row's ``label`` (the model's: a
filter ``label=red`` finds it) and in ``secondary`` (``{model: {label, confidence}}``); the
track's own labels stay the detector's (:func:`~.writer.update_track`)."""

from __future__ import annotations

import time

from edgert.runtime.events import kind_of

# what a row keeps in its own columns; the rest of the record is kept as JSON in ``data``
_COLUMNS = (
    *("event", "stream", "time", "track_id", "label", "zone", "line", "clip", "snapshot"),
    "config",  # the site's version the event was made under (the reload's mark)
)
_NOT_KEPT = ("t_monotonic", "frame")  # a run's own clock and frame index: nothing after it
# a track_embedding's vector goes to the embeddings table, not into the event's JSON
_VECTOR = ("vector",)


def row_of(record: dict, cameras: list) -> dict:
    """The store's row of one event ``record``; ``cameras``: each stream's name (its URI with
    passwords hidden)."""
    kind = kind_of(record)
    stream = record.get("stream", 0)
    stream = stream if isinstance(stream, int) else 0
    track_id = record.get("track_id")
    secondary = record.get("secondary")
    if kind == "track_label" and isinstance(secondary, str):
        secondary = {
            secondary: {"label": record.get("label"), "confidence": record.get("confidence")}
        }
    return {
        "kind": str(kind or "event"),
        "time": float(record.get("time") or time.time()),
        "stream": stream,
        "camera": cameras[stream] if 0 <= stream < len(cameras) else f"stream {stream}",
        "track_id": track_id if isinstance(track_id, int) else None,
        "label": _text(record.get("label")),
        "zone": _text(record.get("zone")),
        "line": _text(record.get("line")),
        "clip": _text(record.get("clip")),
        "snapshot": _text(record.get("snapshot")),
        "secondary": secondary if isinstance(secondary, dict) else None,
        "config_version": _text(record.get("config")),
        "data": {
            k: v
            for k, v in record.items()
            if k not in _COLUMNS and k not in _NOT_KEPT and k not in _VECTOR
        },
        "embedding": _embedding(record) if kind == "track_embedding" else None,
        "reid": _reid(record) if kind == "track_reid" else None,
    }


def _embedding(record: dict) -> dict | None:
    """A ``track_embedding``'s vector as the store keeps it (the compact blob of
    :func:`edgert.runtime.embeddings.encode`, base64 in the record), or None when it has none."""
    import base64
    import binascii

    try:
        blob = base64.b64decode(str(record.get("vector") or ""), validate=True)
    except (binascii.Error, ValueError):
        return None
    dim = record.get("dim")
    if not blob or not isinstance(dim, int):
        return None
    return {
        "model": str(record.get("secondary") or "embedder"),
        "dim": dim,
        "form": str(record.get("form") or ""),
        "vector": blob,
        "how": _text(record.get("how")),
        "crops": record.get("crops") if isinstance(record.get("crops"), int) else None,
    }


def _reid(record: dict) -> dict | None:
    """A ``track_reid``'s link: the other stream's track and the similarity."""
    other, stream = record.get("other_track_id"), record.get("other_stream")
    if not isinstance(other, int) or not isinstance(stream, int):
        return None
    return {"stream": stream, "track_id": other, "similarity": float(record.get("similarity") or 0)}


def _text(value) -> str | None:
    return None if value is None else str(value)
