"""Events, typed as results are (:mod:`edgert.runtime.results`): what happened (its kind), on
which stream and track, when, and what the kind carries. One table of kinds (:data:`KINDS`),
each declared once with its fields; :meth:`Event.to_record` writes the JSON record every events
sink has always written (JSONL, MQTT, the events file, the page), key for key and in the same
order:

    {"event": KIND, "stream": N, <the kind's fields, in its order>, <more, as given>,
     "frame": N, "t_monotonic": S, "time": WALL, "t_video": S}

(``stream`` and the last four only where the event has them). Records travel as dicts through
the sinks, which add to them (the model that made it, a snapshot's path); :func:`kind_of` and
:meth:`Event.of` read them back, the only places a record's ``"event"`` key is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["KINDS", "Event", "Kind", "kind_of"]

EVENT, STREAM, TRACK, TIME = "event", "stream", "track_id", "time"
PLACE = ("frame", "t_monotonic", TIME, "t_video")  # where and when, at the record's end


@dataclass(frozen=True)
class Kind:
    """An event kind: its name, the fields it carries (in the record's order) and who emits it."""

    name: str
    fields: tuple[str, ...]
    what: str


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("run_start", (TIME, "pid", "streams"), "an events file's first line of each run"),
        Kind("track_start", (TRACK, "label"), "a track is confirmed"),
        Kind("track_end", (TRACK, "label", "duration_s"), "a track is lost, or the run ended"),
        Kind("line_cross", ("line", "direction", TRACK, "label"), "a track crossed a line"),
        Kind("zone_enter", ("zone", TRACK, "label"), "a track entered a zone"),
        Kind(
            "zone_exit",
            ("zone", TRACK, "label", "dwell_s", "track_lost", "run_ended"),
            "a track left a zone (track_lost / run_ended: it ended inside)",
        ),
        Kind("track_label", (TRACK,), "a second stage's consensus on a track, or its change"),
        Kind(
            "track_embedding",
            (TRACK, "secondary", "dim", "form", "how", "crops", "primary", "vector"),
            "an embedder secondary's vector of a track (base64 of its compact form), or its update",
        ),
        Kind(
            "track_reid",
            (TRACK, "other_stream", "other_track_id", "similarity", "secondary"),
            "a track re-identified as another stream's recent track (its embedding's cosine)",
        ),
        Kind(
            "model_swap",
            (
                "secondary",
                "model",
                "from",
                "to",
                "triton_version",
                "bundle",
                "requested_by",
                "load_s",
                "s",
                "forced",
                "check",
            ),
            "the model (a camera's, a secondary's, or serve's name) was replaced",
        ),
        Kind(
            "model_swap_refused",
            ("secondary", "bundle", "requested_by", "reason", "kept", "s", "check"),
            "a swap was refused; the model in use goes on",
        ),
        Kind("model_rollback", ("from", "to", "reason"), "a swap was rolled back"),
        Kind(
            "config_applied",
            ("version", "from", "requested_by", "changes", "s"),
            "a new configuration was applied to the running camera (what changed)",
        ),
        Kind(
            "config_refused",
            ("version", "requested_by", "reason"),
            "a new configuration was refused; the running one goes on",
        ),
        Kind(
            "model_swap_superseded",
            ("secondary", "bundle", "requested_by", "by"),
            "a secondary's swap was dropped for a later request",
        ),
    )
}


@dataclass
class Event:
    """One event: ``kind`` (a name of :data:`KINDS`, or a camera feature's own), the ``stream``
    and ``track`` it is about (None: the run's, or no track's), its wall-clock ``time`` and the
    kind's other ``fields`` (``frame``, ``t_monotonic``, ``t_video`` among them where known)."""

    kind: str
    stream: int | None = None
    track: int | None = None
    time: float | None = None
    fields: dict = field(default_factory=dict)

    def to_record(self) -> dict:
        """The JSON record (the module's text has its layout)."""
        body = dict(self.fields)
        if self.track is not None:
            body[TRACK] = self.track
        if self.time is not None:
            body[TIME] = self.time
        record = {EVENT: self.kind}
        if self.stream is not None:
            record[STREAM] = self.stream
        kind = KINDS.get(self.kind)
        for name in kind.fields if kind is not None else ():
            if name in body:
                record[name] = body.pop(name)
        record.update((k, v) for k, v in body.items() if k not in PLACE)
        record.update((k, body[k]) for k in PLACE if k in body)
        return record

    @classmethod
    def of(cls, record: dict) -> Event:
        """A record read back (what :meth:`to_record` wrote, or a sink added to)."""
        fields = {k: v for k, v in record.items() if k not in (EVENT, STREAM, TRACK, TIME)}
        return cls(record[EVENT], record.get(STREAM), record.get(TRACK), record.get(TIME), fields)


def kind_of(record: dict) -> str | None:
    """A record's kind (None: not an event's record)."""
    return record.get(EVENT)
