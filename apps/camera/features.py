"""The camera run's features that are neither sources nor sinks, with one life cycle, the way
sinks have one. Each is a :class:`Feature` in :data:`FEATURES`; ``run_camera`` calls every
feature's step in the table's order (``close`` in the reverse order), and ``run_streams`` (the
library entry) does the same with :data:`LIBRARY_FEATURES`:

    check(run)      before anything opens: bad options are one sentence (``run.stack`` exists
                    for what must be undone at the end)
    open(run)       the sources are open, the model not yet loaded
    loaded(run)     the model is loaded
    attach(run)     the pipeline exists (start threads, watch)
    close(run)      the pipeline ended (stop threads, deliver the last events)
    report(run, s)  its part of the summary ``s``
    metrics(run)    its part of the Prometheus registry (CameraMetrics.attach's arguments)

What a feature makes is a field of :class:`Run` that later features and the core read (the
power session's cap is what the swap infers with; the tracker is what the gate asks). A new
feature of this kind is its class here (or in its own module), its row in :data:`FEATURES` and
its tests.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

from edgert.apps.swap.camera import Canary, ModelSlot, catch_hangups
from edgert.apps.swap.secondary import camera_routes
from edgert.apps.uris import escape_controls
from edgert.runtime.errors import OutputError, SourceError

from .analytics import Analytics, check_in_frame, check_task, parse_all
from .gate import GateOptions, check_masks_in_frame, gates_for
from .options import CameraConfig
from .sinks import serves_probes


@dataclass
class Run:
    """One camera run as its features see it: what is known before anything opens, then what
    the core and each feature made."""

    cfg: CameraConfig
    say: Callable[[str], None]
    uris: list  # the sinks
    bundle: Any = None  # the model's manifest, read once (None: an .onnx / .engine)
    stack: contextlib.ExitStack | None = None
    sources: list = field(default_factory=list)
    handler: Any = None  # delivery.FrameHandler
    model: Any = None  # the task model first loaded
    first: Any = None  # swap.Loaded of it
    load: Callable | None = None  # loads a bundle path as the run does (a swap's candidate)
    seen: Any = None  # the bundle's fingerprint when the first model was read
    batch: int = 1
    runner: Any = None  # what infers: the model, or its power cap
    geometries: list = field(default_factory=list)  # tracking's lines and zones
    gates: list | None = None  # the streams' gates (event-gated inference), or None
    analytics: Analytics | None = None
    power: Any = None  # runtime.power.session.PowerSession
    probes: Any = None  # metrics.CameraProbes
    clocks: tuple | None = None  # (session, choice) of --clocks auto
    slot: ModelSlot | None = None
    sinks: Any = None  # delivery.SinkSet
    pipeline: Any = None
    conditions: dict | None = None  # throttling seen by the power session, at the end
    features: list = field(default_factory=list)
    on_result: Callable | None = None  # a library caller's callback for every frame
    start_from: str | None = None  # the bundle the run starts on when not its own (a canary)

    @property
    def web(self) -> bool:
        return serves_probes(self.uris)


class Feature:
    """One step of each phase (see the module's text); every step does nothing by default."""

    def check(self, run: Run) -> None:
        pass

    def open(self, run: Run) -> None:
        pass

    def loaded(self, run: Run) -> None:
        pass

    def attach(self, run: Run) -> None:
        pass

    def close(self, run: Run) -> None:
        pass

    def report(self, run: Run, summary: dict) -> None:
        pass

    def metrics(self, run: Run) -> dict:
        return {}


class Probes(Feature):
    """``--metrics [HOST:]PORT`` (or a web viewer's port): /metrics, /live and /ready, which
    says 503 while the model loads."""

    def open(self, run: Run) -> None:
        from .metrics import CameraProbes

        run.probes = CameraProbes(run.cfg.metrics, run.web, run.say)
        run.stack.callback(run.probes.close)

    def loaded(self, run: Run) -> None:
        m = run.cfg.model
        run.probes.loaded(run.model, m.precision if m.precision != "auto" else None)

    def attach(self, run: Run) -> None:
        gauges: dict = {"sinks": run.sinks.all}
        for f in run.features:
            gauges.update(f.metrics(run))
        run.probes.attach(run.pipeline, **gauges)

    def report(self, run: Run, summary: dict) -> None:
        summary.update(run.probes.report())


class Tracking(Feature):
    """``--track``, ``--line``, ``--zone`` (or a sink that follows objects): a tracker and its
    counters per stream."""

    def check(self, run: Run) -> None:
        cfg = run.cfg
        if not cfg.tracks:
            return
        t = cfg.tracking
        run.geometries = parse_all(list(t.lines), list(t.zones), len(cfg.sources))
        if run.bundle is not None:
            from edgert.runtime.tasks import task_spec

            task = cfg.model.task or run.bundle.manifest.task
            if not task_spec(task).takes_any:  # a generic bundle: checked once --task loads it
                check_task(task, cfg.tracking_asked_by())

    def open(self, run: Run) -> None:
        if run.geometries:
            for i, source in enumerate(run.sources):
                check_in_frame(run.geometries, i, source.size)

    def loaded(self, run: Run) -> None:
        cfg = run.cfg
        if not cfg.tracks:
            return
        check_task(run.model.task, cfg.tracking_asked_by())
        t = cfg.tracking
        run.analytics = Analytics(
            len(run.sources),
            run.geometries,
            t.count_anchor,
            t.lost_seconds,
            t.tracker,
            t.thresholds(cfg.model.conf),
        )
        run.handler.analytics = run.analytics

    def close(self, run: Run) -> None:
        if run.analytics is not None:  # the tracks still live end
            run.sinks.events(run.handler.labelled(run.analytics.finish()))

    def report(self, run: Run, summary: dict) -> None:
        if run.analytics is not None:
            for st in summary["streams"]:
                st["counts"] = run.analytics.counts(st["stream"])
                st["tracked"] = run.analytics.coverage.report(st["stream"])
            summary["events"] = dict(run.analytics.event_counts)
            summary["tracker"] = run.analytics.thresholds

    def metrics(self, run: Run) -> dict:
        return {"analytics": run.analytics}


class Clocks(Feature):
    """``--clocks auto``: the GPU / EMC limits with the least energy per frame at
    ``--target-fps`` frames a second per stream, measured on the model before the streams start
    (as ``edgert bench --target-fps --clocks auto`` does), held for the run and put back at its
    end."""

    def check(self, run: Run) -> None:
        if run.cfg.clocks is not None and run.cfg.gate.target_fps is None:
            raise SourceError(
                "--clocks auto chooses clocks for a rate: give --target-fps N as well"
            )

    def loaded(self, run: Run) -> None:
        cfg = run.cfg
        if cfg.clocks is None:
            return
        from edgert.apps.bench import BenchConfig, choose_clocks, clock_session

        m = cfg.model
        bench = BenchConfig(
            str(m.path),
            batch=run.batch,
            precision=m.precision,
            backend=m.backend,
            target_fps=cfg.gate.target_fps * len(run.sources),
            sysfs_root=cfg.power.sysfs_root,
            clocks="auto",
        )
        session = run.stack.enter_context(clock_session(bench, run.say))
        run.say(f"clocks: measuring the clock points at {bench.target_fps:g} frames/s in all")
        choice = choose_clocks(bench, session, run.power.meter, {"spin": False}, run.say)
        choice.pop("key")
        run.clocks = (session, choice)

    def report(self, run: Run, summary: dict) -> None:
        if run.clocks is not None:
            summary["clocks_set"], summary["clock_choice"] = run.clocks[0].report(), run.clocks[1]


class Power(Feature):
    """The power session: sensors, ``--power-cap`` (the cap is what infers), the meter's
    summary and the throttling conditions seen."""

    def open(self, run: Run) -> None:
        from edgert.runtime.power.session import PowerSession

        run.power = run.stack.enter_context(PowerSession(run.cfg.power))

    def loaded(self, run: Run) -> None:
        run.runner = run.power.cap(run.model)

    def attach(self, run: Run) -> None:
        run.power.watch()

    def close(self, run: Run) -> None:
        # a camera paces itself by its frame rate: only lowered limits, hot zones and NVML
        # slowdowns count as throttling, not DVFS easing off between frames
        run.conditions = run.power.conditions(getattr(run.model, "engine", None), busy=False)

    def report(self, run: Run, summary: dict) -> None:
        summary["conditions"] = run.conditions
        camera_s = sum(st.get("camera_s") or 0.0 for st in summary["streams"])
        summary.update(run.power.summary(summary["frames_processed"], summary["seconds"], camera_s))

    def metrics(self, run: Run) -> dict:
        from edgert.apps.telemetry.metrics import PowerGauges

        return {"power": PowerGauges(run.power.meter, run.power.runner)}


class Gate(Feature):
    """Event-gated inference (``--gate``, ``--target-fps``): which frames are inferred."""

    def check(self, run: Run) -> None:
        run.gates = gates_for(run.cfg.gate, len(run.cfg.sources))  # its masks checked here

    def open(self, run: Run) -> None:
        for i, source in enumerate(run.sources):
            check_masks_in_frame(run.cfg.gate, i, source.size)

    def loaded(self, run: Run) -> None:
        if run.gates is None:
            return
        if run.analytics is not None:
            run.analytics.gates = run.gates
        run.say(f"gate: {gate_says(run.cfg.gate, run.model.task, run.analytics is not None)}")


def gate_says(o: GateOptions, task: str, tracking: bool) -> str:
    """What the gate does for this run, in a sentence."""
    which = o.policy.says(o)
    if o.mode != "off" and o.target_fps is not None:
        which += f", at most {o.target_fps:g} a second"
    between = (
        "the tracker predicts the frames between (results marked predicted)"
        if tracking
        else f"the frames between repeat the last {task} results, marked predicted"
    )
    return f"{o.mode}: inference on {which}; {between}"


class Swap(Feature):
    """The model slot: SIGHUP, ``--watch-model``, ``--model-endpoint`` (GET and POST /model)
    replace the model while the run goes on (``--swap-check``, rollback); ``--check-against``
    starts on the model this one replaces and takes this one through the check (a canary:
    /ready waits for it)."""

    canary: Canary | None = None

    def check(self, run: Run) -> None:
        o = run.cfg.swap
        if o.endpoint and not (run.cfg.metrics or run.web):
            raise OutputError(
                "--model-endpoint answers on the --metrics port or the web viewer's: give one "
                "of them"
            )
        if o.against:
            if not (run.cfg.metrics or run.web):
                raise OutputError(
                    "--check-against gives its verdict on /ready: give --metrics [HOST:]PORT "
                    "(or a web viewer)"
                )
            run.start_from = o.against
        # from now on SIGHUP re-reads the bundle path, whatever the run is doing (opening the
        # sources, loading the model, measuring clocks); the handler before is put back at its end
        run.stack.callback(catch_hangups())

    def loaded(self, run: Run) -> None:
        runner = run.runner if run.runner is not None else run.model
        slot = ModelSlot(
            run.first,
            run.load,
            run.cfg.swap,
            runner if runner is not run.model else None,
            run.say,
            run.handler.post_event,
            needs_detector=run.analytics is not None,
            watch_path=str(run.cfg.model.path),
            seen=run.seen,
        )
        run.stack.callback(lambda: slot.current.close())  # the model in use at the end
        run.stack.callback(slot.close)  # first: the swap thread stopped, a spare model closed
        run.handler.slot = run.slot = slot
        if run.start_from:
            self.canary = Canary(slot, str(run.cfg.model.path))
            run.probes.conditions.append(self.canary)
            run.say(escape_controls(  # paths as given: a CR/LF in one cannot forge a line
                f"canary: started on {run.start_from}; ready once {self.canary.target} passes "
                "the check on live frames"
            ))  # fmt: skip

    def attach(self, run: Run) -> None:
        # the routes once the pipeline exists: a stop after /model answers is held until the
        # pipeline's loop takes it (the run's summary is written)
        if run.probes is not None:
            run.probes.probes.routes[("GET", "/model")] = run.slot.http_get
            run.probes.probes.routes[("POST", "/model")] = run.slot.http_post
        run.slot.start()
        if self.canary is not None:
            self.canary.start()

    def close(self, run: Run) -> None:
        run.slot.close()  # no swap after the pipeline ended; its events still go to the sinks
        run.handler.flush_events()

    def report(self, run: Run, summary: dict) -> None:
        summary["model"] = run.slot.report()

    def metrics(self, run: Run) -> dict:
        return {"slot": run.slot}


# the order of every phase (close: the reverse); what a feature reads of another comes first:
# the clocks are set before the cap measures idle power, the swap infers through the cap
class Secondaries(Feature):
    """``--secondary BUNDLE[:OPTIONS]``: second-stage models on crops of the tracks, on their
    own thread (:mod:`.secondary`); one that fails to load is said and left out."""

    stage: Any = None

    def loaded(self, run: Run) -> None:
        specs = run.cfg.secondaries
        if not specs:
            return
        from edgert.runtime.tasks import load_task_model

        from .secondary import SecondaryStage, load_all, warn
        from .secondary_spec import unknown_on

        m = run.cfg.model

        def load(path):
            return load_task_model(path, None, m.backend, "auto", spin=False)  # its own best

        found = load_all(specs, load, run.say)
        if not found:
            return
        self.stage = run.handler.secondary = SecondaryStage(found)
        run.stack.callback(self.stage.close)
        for s in found:
            unknown = unknown_on(s.spec, getattr(run.model, "labels", None))
            if unknown:  # said at start: it would run on nothing of those, silently
                warn(unknown, run.say)
            on = "+".join(s.spec.on) or "every label"
            run.say(escape_controls(
                f"secondary: {s.name} ({s.model.task}) on {on}, at most {s.spec.attempts} "
                "attempts per track"
            ))  # fmt: skip

    def attach(self, run: Run) -> None:
        """``POST /model`` naming ``"secondary": NAME`` swaps that secondary; ``GET /model``
        lists the secondaries (:mod:`edgert.apps.swap.secondary`)."""
        if run.probes is not None and run.slot is not None:
            run.probes.probes.routes.update(camera_routes(run, self.stage))

    def close(self, run: Run) -> None:
        if self.stage is not None:  # the held crops tried, the answers in, before tracks end
            run.sinks.events(self.stage.finish())  # track_label events, as during the run

    def report(self, run: Run, summary: dict) -> None:
        if self.stage is not None:
            summary["secondary"] = self.stage.report()
            if self.stage.errors:
                summary["secondary_errors"] = list(self.stage.errors)

    def metrics(self, run: Run) -> dict:
        return {"secondary": self.stage} if self.stage is not None else {}


FEATURES: tuple = (Probes, Tracking, Clocks, Power, Gate, Swap, Secondaries)
# ``run_streams``: the features a library caller asks for by its options; the command line's own
# (the metrics port, clocks, the power session, the model slot with its signals) are left out
LIBRARY_FEATURES: tuple = (Tracking, Gate)
