"""A new configuration applied to a running camera (issue 68): :meth:`Reloader.apply` checks the
whole of it first, as the camera's start does (lines, zones and masks parsed and inside their
frames, files apart, new sources opened, the model there), and refuses it with the reason (the
running one goes on, a ``config_refused`` event says why), or applies the difference, each
camera on its own:

    cameras added          their source opened, a stream started (its tracker, counters, gate)
    cameras removed        their stream ended as one that ran out; the others untouched
    lines and zones        the camera's counters replaced from the next frame: unchanged ones
                           keep their counts, a new or edited one starts from zero; the tracker
                           and its tracks are kept
    masks, gate options    the camera's gate made again (its motion history starts anew)
    outputs                one added is opened (before anything changes: one that cannot be is
                           a refusal) and takes the next frame; one removed is closed between
                           two frames (what it wrote stays in the summary)
    the model's bundle     a swap asked of the model slot (its checks, rollback: apps/swap)

Everything else (the model's backend, task, precision and thresholds, the batch and queues, the
sources' options, the outputs' options, the second stages, the tracker, telemetry, power, clocks) is read
once at the start: a change to it is refused with a sentence saying to restart. Cameras are
matched by name (default: their position, "0", "1", ...). A ``config_applied`` event lists what
changed; every event the run makes from then on carries the version (``"config"``)."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time

from edgert.apps.swap.core import Watched, give_back_memory
from edgert.apps.uris import escape_controls, redact
from edgert.runtime.errors import EdgertError, ModelError
from edgert.runtime.events import Event

from .analytics import check_in_frame, parse_all
from .delivery import open_more
from .gate import check_masks_in_frame, gates_for, parse_mask
from .preflight import check_outputs_apart
from .sinks import resolve
from .sources import open_source

log = logging.getLogger(__name__)

RESTART = "restart edgert camera to change it"
# outputs that take any stream's frames and events: the others were opened for the streams there
# were (a tile, a file, a mount, a clip buffer per camera) and take no camera added later
ANY_STREAM = ("jsonl", "events", "mqtt", "mqtts", "snapshots", "store")
# what is read once at the start, with what a sentence calls it
FIXED = (
    ("model.backend", "the model's backend"),
    ("model.task", "the model's task"),
    ("model.precision", "the model's precision"),
    ("model.top_k", "--top-k"),
    ("model.conf", "--conf"),
    ("model.iou", "--iou"),
    ("run", "the batch, its deadline, the duration and the frame limit"),
    ("source_options", "the sources' options (size, codec, reconnect, loop, decoder)"),
    ("sink_options", "the outputs' options"),
    ("secondaries", "the second stages"),
    ("power", "the power options"),
    ("metrics", "--metrics"),
    ("clocks", "--clocks"),
    ("swap", "the model hot-swap options"),
    ("tracking.tracker", "the tracker"),
    ("tracking.count_anchor", "--count-point"),
    ("tracking.lost_seconds", "--lost-seconds"),
    ("tracking.track_high", "--track-high"),
    ("tracking.track_new", "--track-new"),
    ("tracks", "whether the camera tracks (--track, lines, zones, an events output)"),
)


class ConfigRefused(EdgertError):
    """A configuration the running camera does not take (one sentence)."""


def _get(cfg, dotted: str):
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def default_names(cfg) -> list[str]:
    """A camera's name when its configuration gives none: its position."""
    return [str(i) for i in range(len(cfg.sources))]


@dataclasses.dataclass
class Plan:
    """What a new configuration changes: cameras (name -> its position in the new one) added,
    removed (name -> running stream) and kept (name -> (position, stream))."""

    cfg: object
    names: list
    added: dict
    removed: dict
    kept: dict
    geometries: list
    gates: list | None
    uris: list  # the outputs: the run's URIs, then (camera, URI) of each camera's own
    model: str | None = None  # a new bundle path to swap to
    opened: dict = dataclasses.field(default_factory=dict)  # name -> its new source
    sinks: list = dataclasses.field(default_factory=list)  # the outputs added, opened
    adding: list = dataclasses.field(default_factory=list)  # what they are, in plan.uris' keys


class Reloader:
    """The running camera's configuration, its version, and the one way to change it."""

    def __init__(self, run, loader, version: str, names=None) -> None:
        self.run, self.loader = run, loader
        self.cfg, self.version = run.cfg, version
        self.names = list(names or default_names(run.cfg))  # the cameras, in cfg's order
        self.streams = {name: i for i, name in enumerate(self.names)}  # camera -> its stream
        self.lock = threading.Lock()
        self.applied = self.refused = 0
        self.retiring: list = []  # streams removed, what they hold not yet let go
        own = [(self.names[i], uri) for i, uri in run.cfg.stream_sinks]  # a camera's own
        self.sinks = dict(zip([*run.uris, *own], run.sinks.order))  # each output -> its sink
        self.last: dict | None = None

    # -- the entries ---------------------------------------------------------------------
    def apply_text(self, text: str, why: str) -> dict:
        """The configuration in ``text`` (the loader's format) applied, or refused."""
        t0 = time.monotonic()
        try:
            cfg, version, *names = self.loader(text)
        except (EdgertError, ValueError, OSError) as exc:
            return self._refuse(None, why, str(exc), t0)
        return self.apply(cfg, version, why, names[0] if names else None, t0)

    def apply(self, cfg, version: str, why: str = "apply", names=None, t0=None) -> dict:
        """``cfg`` (a CameraConfig) checked as a whole, then applied camera by camera; the
        record of its ``config_applied`` or ``config_refused`` event."""
        t0 = time.monotonic() if t0 is None else t0
        with self.lock:
            p = self.run.pipeline
            self.retiring = [i for i in self.retiring if not p.retire(i)]
            try:
                if p.stop_event.is_set() or p.finished:
                    raise ConfigRefused("the camera is stopping")
                plan = self._plan(cfg, list(names or default_names(cfg)), why)
                self._open_new(plan)
            except (EdgertError, ValueError, OSError) as exc:
                return self._refuse(version, why, str(exc), t0)
            changes = self._apply(plan)
            before, self.cfg, self.version = self.version, cfg, version
            self.names = plan.names
            self.run.handler.marks["config"] = version
            self.applied += 1
            fields = {"version": version, "from": before, "requested_by": why}
            now = time.monotonic()  # from the next frame on (frames captured after it)
            fields.update(changes=changes, s=round(now - t0, 4), t_monotonic=round(now, 4))
            said = ", ".join(changes) or "nothing changed"
            return self._said(Event("config_applied", fields=fields), f"applied ({said})")

    # -- checks ----------------------------------------------------------------------------
    def _plan(self, cfg, names: list, why: str = "apply") -> Plan:
        if len(set(names)) != len(names) or len(names) != len(cfg.sources):
            raise ConfigRefused("each camera needs a name of its own")
        for dotted, what in FIXED:
            if _get(cfg, dotted) != _get(self.cfg, dotted):
                raise ConfigRefused(f"{what} cannot change while the camera runs: {RESTART}")
        gates = gates_for(cfg.gate, len(cfg.sources))  # its masks parsed (a sentence if not)
        if (gates is None) != (self.run.gates is None):
            raise ConfigRefused(f"the gate cannot be turned on or off while it runs: {RESTART}")
        t = cfg.tracking
        geometries = parse_all(list(t.lines), list(t.zones), len(cfg.sources)) if cfg.tracks else []
        uris = cfg.sink_uris()
        check_outputs_apart(cfg, uris)
        was = {n: self.cfg.sources[k] for k, n in enumerate(self.names)}
        # a camera whose source changed is another camera under the same name
        kept = {
            n: (j, self.streams[n])
            for j, n in enumerate(names)
            if n in was and cfg.sources[j] == was[n]
        }
        added = {n: j for j, n in enumerate(names) if n not in kept}
        fixed = [u for u in uris if resolve(u)[0] not in ANY_STREAM]
        if added and fixed:
            raise ConfigRefused(
                f"a camera cannot be added while {_shown(fixed[0])} runs (it was opened for the "
                f"cameras there were): {RESTART.replace('change it', 'add one')}"
            )
        removed = {n: i for n, i in self.streams.items() if n not in kept}
        for j, i in kept.values():
            size = self._size(i)
            check_in_frame(geometries, j, size)
            check_masks_in_frame(cfg.gate, j, size)
        model = None
        if cfg.model.path != self.cfg.model.path:
            model = str(cfg.model.path)
            if self.run.slot is None or not os.path.exists(model):
                raise ModelError(f"the model {escape_controls(model)} is not there")
            if why.startswith("POST") and not self.run.slot.allowed(model):  # as POST /model
                raise ModelError(
                    f"{escape_controls(model)} is not in a folder --allow-models names "
                    f"({', '.join(self.run.slot.roots)})"
                )
        uris += [(names[j], uri) for j, uri in cfg.stream_sinks]  # opened for their camera
        return Plan(cfg, names, added, removed, kept, geometries, gates, uris, model)

    def _size(self, stream: int):
        """The frame size of a running stream (what it delivered, else what its source said)."""
        a = self.run.analytics
        if a is not None and stream < len(a.streams) and a.streams[stream].size is not None:
            return a.streams[stream].size
        return self.run.pipeline.streams[stream].source.size

    def _open_new(self, plan: Plan) -> None:
        """The new cameras' sources opened (a wrong URI, a camera that does not answer: the
        configuration refused, what was opened closed) and their lines and masks checked in
        their frames."""
        opts = dataclasses.replace(plan.cfg.source_options, fit=None)
        try:
            for name, j in plan.added.items():
                source = plan.cfg.sources[j]
                if isinstance(source, str):
                    source = open_source(source, opts)
                    plan.opened[name] = source
                check_in_frame(plan.geometries, j, source.size)
                check_masks_in_frame(plan.cfg.gate, j, source.size)
            self._open_outputs(plan)
        except BaseException:
            for source in plan.opened.values():
                source.close()
            raise

    def _open_outputs(self, plan: Plan) -> None:
        """The outputs the plan adds, opened: the run's, then the cameras' own, each for its
        camera's stream (a camera added: the stream it is about to be, after the run's)."""
        fresh = {name: k for k, name in enumerate(plan.added)}  # a camera added, or made anew
        run_wide = [u for u in plan.uris if isinstance(u, str) and u not in self.sinks]
        own = [
            key
            for key in plan.uris
            if not isinstance(key, str) and (key not in self.sinks or key[0] in fresh)
        ]
        base = len(self.run.sources)
        more = [plan.opened.get(n, plan.cfg.sources[j]) for n, j in plan.added.items()]
        streams = [base + fresh[n] if n in fresh else self.streams[n] for n, _ in own]
        pairs = [(i, uri) for i, (_, uri) in zip(streams, own)]
        plan.sinks = open_more(self.run, run_wide, pairs, more)
        plan.adding = [*run_wide, *own]

    # -- the change --------------------------------------------------------------------------
    def _apply(self, plan: Plan) -> list:
        run, changes = self.run, []
        for name, i in plan.removed.items():
            if run.pipeline.remove_stream(i):
                _close(run.pipeline.streams[i].source)
            del self.streams[name]
            self.retiring.append(i)
            changes.append(f"camera {name} removed")
        for name, (j, i) in plan.kept.items():
            changes += self._restyle(plan, name, j, i)
        for name, j in plan.added.items():
            source = plan.opened.get(name, plan.cfg.sources[j])
            if name in plan.opened:
                run.stack.callback(_close, source)
            geometries = [dataclasses.replace(g, stream=None) for g in _of(plan.geometries, j)]
            if run.analytics is not None:
                t = plan.cfg.tracking
                run.analytics.add_stream(geometries, t.tracker, t.lost_seconds)
            gate = plan.gates[j] if plan.gates is not None else None
            run.sources.append(source)
            i = run.pipeline.add_stream(source, gate)
            self.streams[name] = i
            changes.append(f"camera {name} added as stream {i} ({_shown(plan.cfg.sources[j])})")
        changes += self._outputs(plan)
        if plan.removed:
            give_back_memory()  # what the removed cameras' decoders freed, back to the system
        if plan.model is not None:  # SIGHUP and --watch-model read this path from now on
            run.slot.watched = Watched(plan.model)
            run.slot.request(plan.model, "config")
            changes.append(f"model: a swap to {escape_controls(plan.model)} asked")
        return changes

    def _outputs(self, plan: Plan) -> list:
        """The outputs added (opened already) and removed (closed), between two frames."""
        added = plan.adding
        gone = [u for u in self.sinks if u not in plan.uris or u in added]  # or opened anew
        if not added and not gone:
            return []
        removed = [self.sinks.pop(u) for u in gone]
        self.sinks.update(zip(added, plan.sinks))
        self.run.handler.change_sinks(plan.sinks, removed)
        said = [f"{_output(u)} removed" for u in gone if u not in added]
        return said + [f"{_output(u)} added" for u in added]

    def _restyle(self, plan: Plan, name: str, j: int, i: int) -> list:
        """A kept camera's lines, zones and gate, where they changed."""
        run, changes = self.run, []
        new = [dataclasses.replace(g, stream=None) for g in _of(plan.geometries, j)]
        if run.analytics is not None:
            old = run.analytics.streams[i].geometries
            if [(g.kind, g.name, g.points) for g in old] != [
                (g.kind, g.name, g.points) for g in new
            ]:
                got = run.analytics.set_geometries(i, new)
                kinds = {g.name: g.kind for g in (*old, *new)}
                edited = set(got["added"]) & set(got["removed"])
                for what, names in (("added", got["added"]), ("removed", got["removed"])):
                    for n in names:
                        if n not in edited:
                            changes.append(f"camera {name}: {kinds[n]} {n} {what}")
                changes += [f"camera {name}: {kinds[n]} {n} edited" for n in sorted(edited)]
        if plan.gates is not None and self._gate_changed(plan, name, j):
            run.gates[i] = plan.gates[j]
            changes.append(f"camera {name}: gate and masks made again")
        return changes

    def _gate_changed(self, plan: Plan, name: str, j: int) -> bool:
        old, new = self.cfg.gate, plan.cfg.gate
        k = self.names.index(name)
        own_old = dataclasses.replace(old.for_stream(k), masks=())
        if own_old != dataclasses.replace(new.for_stream(j), masks=()):
            return True  # its mode, rate, keyframe or sensitivity (the run's or its own)
        was = _masks_of(old, k, len(self.cfg.sources))
        return was != _masks_of(new, j, len(plan.cfg.sources))

    # -- what is said -----------------------------------------------------------------------
    def _refuse(self, version, why: str, reason: str, t0: float) -> dict:
        self.refused += 1
        fields = {"version": version, "requested_by": why, "reason": reason}
        return self._said(Event("config_refused", fields=fields), f"refused ({reason}); the "
                          "running configuration goes on")  # fmt: skip

    def _said(self, event: Event, sentence: str) -> dict:
        record = event.to_record()
        self.last = {**record, "time": round(time.time(), 3)}
        self.run.say(escape_controls(f"config: {sentence}"))
        self.run.handler.post_event(record)
        return record

    def report(self) -> dict:
        """The version, the counts and the last change or refusal (GET /config, the summary)."""
        return {
            "version": self.version,
            "applied": self.applied,
            "refused": self.refused,
            "cameras": {n: i for n, i in self.streams.items()},
            "last": self.last,
        }

    def shown(self) -> dict:
        """The running configuration as data, credentials redacted (GET /config)."""
        return _redacted(self.cfg)


def _of(geometries: list, j: int) -> list:
    return [g for g in geometries if g.stream in (None, j)]


def _masks_of(options, j: int, streams: int) -> list:
    return [spec for spec in options.masks if parse_mask(spec, streams)[0] in (None, j)]


def _output(key) -> str:
    """An output in a sentence: the run's (its URI), or a camera's own ((camera, URI))."""
    if isinstance(key, str):
        return f"output {_shown(key)}"
    return f"camera {key[0]}: output {_shown(key[1])}"


def _shown(uri) -> str:
    return escape_controls(redact(uri)) if isinstance(uri, str) else str(uri)


def _close(source) -> None:
    try:
        source.close()
    except Exception as exc:  # noqa: BLE001 - a source that fails to close leaves the run as is
        log.warning("closing %s: %s", getattr(source, "description", source), exc)


def _redacted(value):
    """``value`` (a configuration, its sections) as JSON data: every string's credentials
    redacted, what is not data (a callable, a source object) named by its type."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _redacted(v) for k, v in value.items() if k != "loader"}
    if isinstance(value, (list, tuple)):
        return [_redacted(v) for v in value]
    if isinstance(value, str):
        return redact(value) if "://" in value or "@" in value else value
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return type(value).__name__
