"""Typed events (issue 67 step 2): one table of kinds, records written key for key as the sinks
have always written them, read back by kind."""

from __future__ import annotations

import json

from edgert.runtime.events import KINDS, Event, kind_of
from edgert.runtime.tracking.counting import LineCounter, ZoneCounter


def test_a_tracked_event_writes_the_record_the_sinks_have_always_written():
    """Key order included (the JSONL and MQTT text is the record's dump): the kind, the stream,
    the kind's fields in its order, what else it carries, then where and when."""
    e = Event(
        "zone_exit",
        stream=1,
        track=7,
        time=1700000000.5,
        fields={"label": "car", "zone": "door", "dwell_s": 2.5, "t_monotonic": 12.25, "frame": 9},
    )
    e.fields["run_ended"] = True
    assert json.dumps(e.to_record()) == json.dumps(
        {
            "event": "zone_exit",
            "stream": 1,
            "zone": "door",
            "track_id": 7,
            "label": "car",
            "dwell_s": 2.5,
            "run_ended": True,
            "frame": 9,
            "t_monotonic": 12.25,
            "time": 1700000000.5,
        }
    )


def test_a_record_read_back_is_the_same_event():
    """``Event.of`` reads what ``to_record`` wrote (and what a sink added: the model), and
    writes it again unchanged (a key a sink added may stand before the times); ``kind_of`` is a record's kind, None for a record of no event."""
    record = Event(
        "track_label", 0, 3, 5.0, {"secondary": "colour", "t_monotonic": 1.0}
    ).to_record()
    assert list(Event.of(record).to_record().items()) == list(record.items())  # key order too
    record["model"] = "det@2"
    again = Event.of(record)
    assert (again.kind, again.stream, again.track, again.time) == ("track_label", 0, 3, 5.0)
    assert again.to_record() == record
    assert kind_of(record) == "track_label" and kind_of({"frame": 1}) is None


def test_the_counters_write_their_events_through_the_table():
    """A line crossing and a zone's entry and exit, from the real counters, are records of the
    table's kinds with the kind's fields in its order."""

    class T:
        def __init__(self, box):
            self.track_id, self.label, self.box = 4, "blob", box

    line = LineCounter("gate", [(50.0, 0.0), (50.0, 100.0)])
    zone = ZoneCounter("pen", [(60.0, 0.0), (100.0, 0.0), (100.0, 100.0), (60.0, 100.0)])
    events = []
    for i, x in enumerate(range(10, 95, 5)):
        t = [T((x - 5.0, 40.0, x + 5.0, 50.0))]
        events += line.update(t, i * 0.1) + zone.update(t, i * 0.1)
    events += zone.forget([4], 2.0, "track_lost")
    kinds = [kind_of(e) for e in events]
    assert kinds == ["line_cross", "zone_enter", "zone_exit"], events
    for e in events:
        order = [k for k in KINDS[kind_of(e)].fields if k in e]
        assert [k for k in e if k in order] == order and list(e)[0] == "event"


def test_the_swap_records_keep_their_text_through_the_table():
    """The swap package's records (a camera's, a secondary's and serve's swap; a refusal with
    what is kept, a rollback, a superseded request) come out of ``to_record`` key for key as the
    package wrote them by hand, whatever order the fields were given in."""
    written = [
        {
            "event": "model_swap",
            "from": "a@1",
            "to": "b@1",
            "bundle": "b.edgert",
            "requested_by": "POST /model",
            "load_s": 0.5,
            "forced": False,
            "check": {"n": 3},
        },
        {
            "event": "model_swap",
            "model": "det",
            "from": "a@1",
            "to": "b@1",
            "triton_version": 2,
            "bundle": "b.edgert",
            "requested_by": "POST /model",
            "s": 1.5,
            "forced": True,
        },
        {
            "event": "model_swap",
            "secondary": "colour",
            "bundle": "c.edgert",
            "requested_by": "POST /model",
            "s": 0.25,
        },
        {
            "event": "model_swap_refused",
            "secondary": "colour",
            "bundle": "c.edgert",
            "requested_by": "SIGHUP",
            "reason": "corrupt",
            "kept": "a@1",
            "s": 0.1,
            "check": {"judged": False},
        },
        {"event": "model_rollback", "from": "b@1", "to": "a@1", "reason": "slower"},
        {
            "event": "model_swap_superseded",
            "secondary": "colour",
            "bundle": "c.edgert",
            "requested_by": "POST /model",
            "by": "d.edgert",
        },
    ]
    for record in written:
        fields = dict(reversed([(k, v) for k, v in record.items() if k != "event"]))
        again = Event(kind_of(record), fields=fields).to_record()
        assert json.dumps(again) == json.dumps(record)
