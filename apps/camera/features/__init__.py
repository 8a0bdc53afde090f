"""The camera run's features that are neither sources nor sinks, one module each, with one
contract (:class:`Feature`) that holds everything a feature brings:

    options         add_arguments(parser) / from_args(args): its argparse section (standing at
                    ``help_rank`` in --help) and its section of the config (``section``)
    check(run)      before anything opens: bad options are one sentence (``run.stack`` exists
                    for what must be undone at the end)
    open(run)       the sources are open, the model not yet loaded
    loaded(run)     the model is loaded
    attach(run)     the pipeline exists (start threads, watch)
    on_frame        (run, frame): its step on every processed frame, in the table's order
    on_events       (run, events, frame): what it adds to every event (the model that made it)
    close(run)      the pipeline ended (stop threads, deliver the last events)
    report(run, s)  its keys of the JSON summary ``s``; ``summary_lines(s)`` its printed lines
    families(run)   its Prometheus families, read at scrape time
    routes(run)     its HTTP routes on the metrics / web port, merged once at start
    events          the event kinds it emits
    needs, after    the features whose fields of :class:`Run` it reads (they must be in the
                    run's table) and whose steps must come before its own (checked at start)

``run_camera`` calls every feature's step in :data:`FEATURES`' order (``close`` in the reverse
order), and ``run_streams`` (the library entry) does the same with :data:`LIBRARY_FEATURES`.
What a feature makes is a field of :class:`Run` that the features after it read. A new feature
is its module here, its row in :data:`FEATURES` and its tests: no other file changes.
"""

from __future__ import annotations

import dataclasses
import functools

from .base import Extend, Feature, Run, TableError, check_table, merge_routes, name_of
from .clocks import Clocks
from .gate import Gate, gate_says
from .power import Power
from .probes import Probes
from .reload import Reload
from .secondary import Secondaries
from .swap import Swap
from .tracking import Tracking

__all__ = [
    "FEATURES",
    "LIBRARY_FEATURES",
    "Extend",
    "Feature",
    "Run",
    "TableError",
    "add_arguments",
    "check_run",
    "check_table",
    "config_sections",
    "frame_steps",
    "gate_says",
    "merge_routes",
    "name_of",
    "summary_lines",
]

FEATURES: tuple = (Probes, Tracking, Clocks, Power, Gate, Swap, Secondaries, Reload)
# ``run_streams``: the features a library caller asks for by its options; the command line's own
# (the metrics port, clocks, the power session, the model slot with its signals) are left out
LIBRARY_FEATURES: tuple = (Tracking, Gate)


def add_arguments(parser, table=None) -> None:
    """Every feature's flags, in their ``help_rank`` order."""
    for f in sorted(table or FEATURES, key=lambda f: f.help_rank):
        f.add_arguments(parser)


def config_sections(args, config_type, table=None) -> dict:
    """``config_type``'s keyword arguments from every feature's section: the config's own
    fields by name, the others in ``more``."""
    names = {f.name for f in dataclasses.fields(config_type)}
    out: dict = {"more": {}}
    for f in table or FEATURES:
        if f.section is not None:
            value = f.from_args(args)
            if f.section in names:
                out[f.section] = value
            else:
                out["more"][f.section] = value
    return out


def summary_lines(s: dict, first: bool, table=None) -> list:
    """The printed summary's lines of every feature that puts them ``first`` (after the labels'
    line) or not (after the files)."""
    return [
        line for f in table or FEATURES if f.summary_first == first for line in f.summary_lines(s)
    ]


def check_run(run: Run) -> None:
    """Before anything opens: the run's features fit together (:func:`check_table`) and their
    routes merge (a route twice, or over a probe's path, is refused in a sentence)."""
    from edgert.apps.telemetry.http import Probes as ProbePaths

    check_table(run.features)
    run.routes = merge_routes(run, ProbePaths.PATHS)


def frame_steps(run: Run) -> tuple[list, list]:
    """(each feature's step on every frame, what each adds to every event), in table order."""
    steps = [functools.partial(f.on_frame, run) for f in run.features if f.on_frame is not None]
    stamps = [functools.partial(f.on_events, run) for f in run.features if f.on_events is not None]
    return steps, stamps
