"""The feature contract and the run the features share (see the package's text)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from edgert.runtime.errors import EdgertError

from ..options import CameraConfig
from ..sinks import serves_probes

if TYPE_CHECKING:
    from edgert.apps.swap.camera import Loaded, ModelSlot
    from edgert.runtime.bundle import Bundle
    from edgert.runtime.power.session import PowerSession

    from ..analytics import Analytics
    from ..delivery import FrameHandler, SinkSet
    from ..metrics import CameraProbes
    from ..pipeline import Pipeline


@dataclass
class Run:
    """One camera run as its features see it: what is known before anything opens, then what
    the core and each feature made (the feature that makes a field names it below)."""

    cfg: CameraConfig
    say: Callable[[str], None]
    uris: list  # the sinks
    bundle: Bundle | None = None  # the model's manifest, read once (None: an .onnx / .engine)
    stack: contextlib.ExitStack | None = None
    sources: list = field(default_factory=list)
    handler: FrameHandler | None = None  # the core's
    model: Any = None  # the task model first loaded (runtime.tasks.TaskModel)
    first: Loaded | None = None  # the core's: what names the first model
    load: Callable | None = None  # loads a bundle path as the run does (a swap's candidate)
    seen: Any = None  # the bundle's fingerprint when the first model was read
    batch: int = 1
    runner: Any = None  # power: what infers, the model or its power cap
    geometries: list = field(default_factory=list)  # tracking's lines and zones
    gates: list | None = None  # gate: the streams' gates (event-gated inference), or None
    analytics: Analytics | None = None  # tracking: the trackers and counters
    power: PowerSession | None = None  # power
    probes: CameraProbes | None = None  # probes
    clocks: tuple | None = None  # clocks: (session, choice) of --clocks auto
    slot: ModelSlot | None = None  # swap
    sinks: SinkSet | None = None  # the core's
    pipeline: Pipeline | None = None  # the core's
    conditions: dict | None = None  # power: throttling seen by the power session, at the end
    features: list = field(default_factory=list)  # the table's features, made for this run
    routes: dict = field(default_factory=dict)  # (method, path) -> handler, merged at start
    on_result: Callable | None = None  # a library caller's callback for every frame
    start_from: str | None = None  # swap: the bundle the run starts on (a canary)

    @property
    def web(self) -> bool:
        return serves_probes(self.uris)


class Feature:
    """Everything a camera feature brings: its options, its steps in each phase, its part of
    the frame path, of /metrics, of the summary and of the HTTP routes, the event kinds it
    emits and what it needs of the others. Every part is empty by default."""

    name = ""  # what ``needs`` and ``after`` call it (default: the class's name, lower case)
    needs: tuple = ()  # features whose fields of Run it reads: they must be in the run's table
    after: tuple = ()  # features whose step of each phase must come before its own, if there
    events: tuple = ()  # the event kinds it emits
    section: str | None = None  # the config's section its options make (CameraConfig.section)
    help_rank = 100  # where its options stand in ``edgert camera --help`` (lower: earlier)
    summary_first = False  # its summary lines after the labels' line (else after the files)

    @staticmethod
    def add_arguments(parser) -> None:
        """Its flags (the command line's argparse section)."""

    @staticmethod
    def from_args(args) -> Any:
        """Its section of the config, from the parsed flags."""
        return None

    def check(self, run: Run) -> None:
        """Before anything opens: bad options are one sentence."""

    def open(self, run: Run) -> None:
        """The sources are open, the model not yet loaded."""

    def loaded(self, run: Run) -> None:
        """The model is loaded."""

    def attach(self, run: Run) -> None:
        """The pipeline exists."""

    def close(self, run: Run) -> None:
        """The pipeline ended."""

    def report(self, run: Run, summary: dict) -> None:
        """Its keys of the JSON summary."""

    on_frame: Callable | None = None  # (run, frame): its step on every frame, in table order
    on_events: Callable | None = None  # (run, events, frame): what it adds to every event

    def families(self, run: Run):
        """Its Prometheus families, read at scrape time."""
        return ()

    @staticmethod
    def summary_lines(s: dict) -> list:
        """Its lines of the printed summary, from the JSON summary's keys."""
        return []

    def routes(self, run: Run) -> dict:
        """Its HTTP routes on the metrics / web port: (method, path) -> handler(body) ->
        (status, body, content type), or :class:`Extend` of another feature's route."""
        return {}


class Extend:
    """A route that wraps the one an earlier feature declared: ``wrap(inner)`` -> handler."""

    def __init__(self, wrap: Callable) -> None:
        self.wrap = wrap


class TableError(EdgertError):
    """The features of a run do not fit together (a need missing, a route twice)."""


def check_table(table) -> None:
    """What each feature declared of the others holds in ``table`` (classes or instances):
    names once, needs present, order kept, event kinds emitted by one feature only."""
    names = [name_of(f) for f in table]
    emitted: dict = {}
    for i, (f, name) in enumerate(zip(table, names)):
        if names.count(name) > 1:
            raise TableError(f"two camera features are named {name}")
        for need in f.needs:
            if need not in names:
                raise TableError(f"camera feature {name} needs {need}, which this run lacks")
        for earlier in f.after:
            if earlier in names[i + 1 :]:
                raise TableError(f"camera feature {name} must come after {earlier}")
        for kind in f.events:
            if kind in emitted:
                raise TableError(f"event {kind} is emitted by both {emitted[kind]} and {name}")
            emitted[kind] = name


def merge_routes(run: Run, taken=()) -> dict:
    """Every feature's routes, merged once in table order; a route declared twice (or one of
    ``taken``, the probes' own paths) is refused in a sentence, as is an Extend of none."""
    merged: dict = {}
    owner: dict = {}
    for f in run.features:
        for key, handler in f.routes(run).items():
            method, path = key
            if isinstance(handler, Extend):
                if key not in merged:
                    raise TableError(f"{name_of(f)} extends {method} {path}, which nothing answers")
                merged[key] = handler.wrap(merged[key])
                continue
            if key in merged or (method == "GET" and path in taken):
                by = owner.get(key, "the probes")
                raise TableError(f"{method} {path} is answered by both {by} and {name_of(f)}")
            merged[key], owner[key] = handler, name_of(f)
    return merged


def name_of(f) -> str:
    """A feature's name (its class's, lower case, when it gives none)."""
    return f.name or (f if isinstance(f, type) else type(f)).__name__.lower()
