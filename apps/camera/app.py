"""``edgert camera``: sources, a model and sinks joined by the drop-oldest pipeline.

    run_camera(cfg):
      check the sinks, the same-file guard, lines and zones      (before anything opens)
      open the sources                     (sources/: one table of URI schemes)
      start the probes, the power session  (/ready says 503 while the model loads)
      load the model; cap it               (runtime: task models, power/session.py)
      open the sinks                       (sinks/: one table of URI schemes)
      run the pipeline                     (pipeline.py; each frame through delivery.py)
      close everything on every path; summarise

The configuration is a few sections, each owned by the component that reads it and declaring
its own flags: the model (:class:`ModelOptions`), the sources (:class:`SourceOptions`), the
sinks (:class:`SinkOptions`), tracking (:class:`TrackingOptions`), power (:class:`PowerOptions`)
and the run (:class:`RunOptions`)."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from edgert.apps import processes
from edgert.runtime.errors import OutputError
from edgert.runtime.power.session import PowerOptions, PowerSession
from edgert.runtime.tasks import task_spec

from .analytics import Analytics, TrackingOptions, check_in_frame, check_task, parse_all
from .delivery import FrameHandler, SinkSet
from .fit import decoder_fit
from .fit import describe as describe_fit
from .gate import GateOptions, check_masks_in_frame, gates_for
from .pipeline import Pipeline
from .sinks import (
    SinkContext,
    SinkOptions,
    check_sink,
    open_sink,
    resolve,
    scheme_of,
    shows_picture,
    sink_paths,
    tracks,
)
from .sources import SourceOptions, open_source, source_files
from .steps import slot_steps, steps_for
from .swap import Loaded, ModelSlot, SwapOptions, catch_hangups, fingerprint, model_info

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelOptions:
    """The model and how it is loaded and read: its bundle (or .onnx / .engine), the task,
    backend and precision, and the results' thresholds."""

    path: str
    task: str | None = None  # default: the bundle's
    backend: str = "auto"
    precision: str = "auto"
    top_k: int = 3
    conf: float = 0.25
    iou: float = 0.45

    @staticmethod
    def add_arguments(parser, tasks: list[str]) -> None:
        from edgert.apps.argtypes import BACKENDS, PRECISIONS, fraction, positive_int

        parser.add_argument("model", metavar="MODEL")
        parser.add_argument("--task", choices=tasks, help="default: the bundle's task")
        parser.add_argument("--backend", default="auto", choices=BACKENDS)
        parser.add_argument("--precision", default="auto", choices=PRECISIONS)
        parser.add_argument("--top-k", type=positive_int, default=3)
        parser.add_argument("--conf", type=fraction, default=0.25)
        parser.add_argument("--iou", type=fraction, default=0.45)

    @classmethod
    def from_args(cls, args) -> ModelOptions:
        return cls(
            args.model, args.task, args.backend, args.precision, args.top_k, args.conf, args.iou
        )


@dataclass(frozen=True)
class RunOptions:
    """How long and how the pipeline runs: its duration, frames per stream, the batch and its
    deadline, and the streams' queue size."""

    duration: float | None = None  # seconds
    max_frames: int | None = None  # per stream
    batch: int | None = None  # frames per inference; default one per stream, up to the model max
    batch_timeout_ms: float = 20.0
    queue_size: int = 1

    @staticmethod
    def add_arguments(parser) -> None:
        from edgert.apps.argtypes import nonneg_float, positive_float, positive_int

        parser.add_argument("--duration", type=positive_float, metavar="S")
        parser.add_argument("--max-frames", type=positive_int, metavar="N", help="per stream")
        parser.add_argument(
            "--batch",
            type=positive_int,
            metavar="N",
            help="frames per inference (default: the number of streams, within the model's "
            "largest batch)",
        )
        parser.add_argument(
            "--batch-timeout-ms",
            type=nonneg_float,
            default=20.0,
            metavar="MS",
            help="how long a batch waits for the other streams once it has a frame (default 20)",
        )

    @classmethod
    def from_args(cls, args) -> RunOptions:
        return cls(args.duration, args.max_frames, args.batch, args.batch_timeout_ms)


@dataclass
class CameraConfig:
    """One camera run: the model, source URIs, sink URIs and each component's options."""

    model: ModelOptions
    sources: list = field(default_factory=lambda: ["synthetic://"])  # URIs or FrameSource objects
    sinks: list[str] = field(default_factory=list)  # display://, http://, file://, jsonl://, ...
    source_options: SourceOptions = field(default_factory=SourceOptions)
    sink_options: SinkOptions = field(default_factory=SinkOptions)
    tracking: TrackingOptions = field(default_factory=TrackingOptions)
    power: PowerOptions = field(default_factory=PowerOptions)
    run: RunOptions = field(default_factory=RunOptions)
    gate: GateOptions = field(default_factory=GateOptions)
    metrics: str | None = None  # [HOST:]PORT of /metrics, /live, /ready
    clocks: str | None = None  # "auto" (with gate.target_fps): GPU / EMC limits for the rate
    swap: SwapOptions = field(default_factory=SwapOptions)  # taking a new model while it runs

    @property
    def tracks(self) -> bool:
        """Tracking is on: asked for, or implied by lines, zones or an events sink."""
        return self.tracking.enabled or any(tracks(u) for u in self.sinks)

    def tracking_asked_by(self) -> str:
        """What turned tracking on, as the user gave it (for a sentence)."""
        t = self.tracking
        if t.track or not (t.lines or t.zones or any(tracks(u) for u in self.sinks)):
            return "--track"
        if t.lines or t.zones:
            return "--line" if t.lines else "--zone"
        uri = next(u for u in self.sinks if tracks(u))
        entry = scheme_of(uri)
        return f"{entry.flag} {uri.split('://', 1)[-1]}" if entry.flag else f"--output {uri}"

    def sink_uris(self) -> list[str]:
        """The sinks, with a window when nothing shows the picture and a display is there."""
        uris = list(self.sinks)
        has_display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
        if not self.sink_options.headless and has_display and not any(map(shows_picture, uris)):
            uris.append("display://0")
        return uris


def choose_batch(requested: int | None, streams: int, model) -> tuple[int, str | None]:
    """(frames per inference, a note when it is not what was asked or expected): by default one
    frame per stream, never more than the model takes (a fixed-batch model its batch)."""
    fixed = getattr(model, "fixed_batch", None)
    limit = fixed or model.max_batch
    want = requested or streams
    if limit is None or want <= limit:
        return want, None
    if fixed == 1:
        why = "the model takes a fixed batch of 1 (export it with --dynamic-batch --max-batch N to batch streams)"
    elif fixed:
        why = f"the model takes a fixed batch of {fixed}"
    else:
        why = f"the model's largest batch is {limit}"
    return limit, f"batch {limit}, not {want}: {why}"


def open_sources(uris: list[str], opts: SourceOptions, stack: contextlib.ExitStack) -> list:
    """Every source, each closed by ``stack``; a wrong URI fails before any model loads. A
    :class:`FrameSource` object given instead of a URI is taken as it is (its caller closes it)."""
    sources = []
    for uri in uris:
        if not isinstance(uri, str):
            sources.append(uri)
            continue
        source = open_source(uri, opts)
        stack.callback(source.close)
        sources.append(source)
    return sources


def run_streams(
    model,
    sources: list,
    on_result=None,
    batch: int | None = None,
    batch_timeout_ms: float = 20.0,
    duration: float | None = None,
    max_frames: int | None = None,
    source_options: SourceOptions | None = None,
    sinks: list[str] | None = None,
    sink_options: SinkOptions | None = None,
) -> dict:
    """The camera pipeline without the command line: frames of every source batched through one
    task model (see :func:`edgert.runtime.tasks.load_task_model`).

        with load_task_model("det.edgert") as model:
            summary = run_streams(model, ["rtsp://cam1/live", "rtsp://cam2/live"],
                                  on_result=lambda f: print(f.stream, f.index, f.results.to_records()),
                                  sinks=["http://127.0.0.1:8080", "jsonl://frames.jsonl"])

    ``sources``: URIs (opened and closed here) or FrameSource objects. ``on_result(frame)`` is
    called from the output thread for every processed frame (``frame.stream``, ``frame.index``,
    ``frame.image``, ``frame.results``). ``sinks``: URIs of the sinks' table (opened, checked
    apart from the sources' files and closed here). Returns the statistics, overall and per
    stream (with ``outputs`` and ``output_errors`` when there are sinks); Ctrl-C ends the run
    cleanly. A processing error, or every stream failing, raises.
    """
    if isinstance(sources, str) or not isinstance(sources, (list, tuple)):
        sources = [sources]  # one source given alone
    sink_options = sink_options or SinkOptions()
    uris = [s for s in sources if isinstance(s, str)]
    _files_apart(uris, list(sinks or []), len(sources), sink_options)
    with contextlib.ExitStack() as stack:
        opts = source_options or SourceOptions()
        opened = open_sources(sources, opts, stack)
        size, note = choose_batch(batch, len(opened), model)
        if note:
            log.warning(note)
        handler = FrameHandler(opened, on_result=on_result)
        shown = [s if isinstance(s, str) else s.description for s in sources]
        sinkset = _open_sinks(
            list(sinks or []), shown, opened, sink_options, stack, SinkContext(live=handler.numbers)
        )
        pipeline = Pipeline(
            opened,
            steps_for(model),
            handler,
            size,
            batch_timeout_ms / 1e3,
            duration=duration,
            max_frames=max_frames,
        )
        handler.attach(sinkset, pipeline)
        pipeline.run()
        sinkset.close()
        summary = pipeline.stats()
        if sinks:
            summary["outputs"] = sinkset.reports()
            if sinkset.errors:
                summary["output_errors"] = sinkset.errors
        return summary


def run_camera(cfg: CameraConfig, say=lambda s: None) -> dict:
    """Check, open, run and close as the module's text says; return the summary. A sink that
    fails (a full disk) is in the summary's ``output_errors``: the run stopped there, or with
    ``on_error="continue"`` went on without it."""
    from edgert.runtime.tasks import load_task_model

    from .metrics import CameraProbes

    m, uris = cfg.model, cfg.sink_uris()
    check_outputs_apart(cfg, uris)
    web = any(resolve(u)[0] == "http" for u in uris)
    if cfg.swap.endpoint and not (cfg.metrics or web):
        raise OutputError(
            "--model-endpoint answers on the --metrics port or the web viewer's: give one of them"
        )
    bundle = _bundle(m.path)  # the manifest, read once for the run
    geometries = _tracking_before_sources(cfg, bundle)
    gates = gates_for(cfg.gate, len(cfg.sources))  # its masks checked before anything opens
    with contextlib.ExitStack() as stack:
        stack.callback(catch_hangups())  # SIGHUP re-reads the bundle path, from here on
        opts, why = decoder_fit(cfg.source_options, uris, cfg.gate, bundle)
        sources = open_sources(cfg.sources, opts, stack)
        probes = CameraProbes(cfg.metrics, web, say)
        stack.callback(probes.close)
        _describe(sources, geometries, cfg.gate, say)
        fitted = describe_fit(sources, opts, why)
        if fitted:
            say(f"decoder scale: {fitted}")
        power = stack.enter_context(PowerSession(cfg.power))
        # nothing busy-waits (ONNX Runtime's threads, CUDA's sync): a camera paces itself by its
        # frame rate, so spinning between frames buys nothing (MobileNetV2 at 30 fps: e2e p50
        # 19.8 ms without, 21.2 with), burns cores, and while a model is swapped in the two
        # sessions' spinning threads fight the live one (benchmarks/hot_swap.py, 100 swaps:
        # 251 frames dropped and p99 +84 ms with spinning; 0-1 and +8 to +29 ms without)
        spin = {"spin": False}

        def load(path):
            return load_task_model(
                _bundle(path) or path, m.task, m.backend, m.precision, m.top_k, m.conf, m.iou,
                **spin,
            )  # fmt: skip

        # what names the model and what --watch-model compares with, read before it loads: a
        # bundle replaced while it loads is then a change to swap to, not one missed
        info, seen = model_info(m.path), fingerprint(str(m.path))
        model = processes.uninterrupted(  # a Ctrl-C in onnx's first import would abort
            load_task_model, bundle or m.path, m.task, m.backend, m.precision, m.top_k, m.conf,
            m.iou, **spin,
        )  # fmt: skip
        stack.callback(model.close)  # closing twice is harmless
        first = Loaded(model, info, str(m.path))
        probes.loaded(model, m.precision if m.precision != "auto" else None)
        say(f"backend: {model.backend_reason}")
        batch = _batch(cfg, len(sources), model, say)
        analytics = None
        if cfg.tracks:
            check_task(model.task, cfg.tracking_asked_by())
            t = cfg.tracking
            analytics = Analytics(
                len(sources), geometries, t.count_anchor, t.lost_seconds, t.tracker
            )
        clocks = _clocks(cfg, m.path, batch, len(sources), power, stack, say)
        runner = power.cap(model)
        if gates is not None:
            if analytics is not None:
                analytics.gates = gates
            say(f"gate: {_gate_says(cfg.gate, model.task, analytics is not None)}")
        handler = FrameHandler(sources, power, analytics)
        slot = ModelSlot(
            first,
            load,
            cfg.swap,
            runner if runner is not model else None,
            say,
            handler.post_event,
            needs_detector=analytics is not None,
            watch_path=str(m.path),
            seen=seen,
        )
        stack.callback(lambda: slot.current.close())  # the model in use at the end
        stack.callback(slot.close)  # first: the swap thread stopped, a spare model closed
        handler.slot = slot
        probes.probes.routes[("GET", "/model")] = slot.http_get
        probes.probes.routes[("POST", "/model")] = slot.http_post
        sinks = _open_sinks(
            uris,
            [u if isinstance(u, str) else u.description for u in cfg.sources],
            sources,
            cfg.sink_options,
            stack,
            SinkContext(
                say=say,
                probes=probes.probes,
                live=handler.numbers,
                demand=opts.fit.demand if opts.fit is not None else None,
            ),
        )
        pipeline = Pipeline(
            sources,
            slot_steps(slot),
            handler,
            batch,
            cfg.run.batch_timeout_ms / 1e3,
            cfg.run.queue_size,
            cfg.run.duration,
            cfg.run.max_frames,
            gates,
        )
        handler.attach(sinks, pipeline)
        probes.attach(pipeline, power, analytics, sinks.all, slot)
        power.watch()
        slot.start()
        # what start-up made (modules, the model, sources) out of the collector's sight: a full
        # collection, which a swap's allocations trigger, then scans only what came since
        # (measured: ~30 ms with the GIL held before, under 1 ms after; a frame is 33 ms)
        gc.freeze()
        try:
            pipeline.run()
        finally:
            gc.unfreeze()  # a library caller's objects are collectable again
            # a camera paces itself by its frame rate: only lowered limits, hot zones and NVML
            # slowdowns count as throttling, not DVFS easing off between frames
            conditions = power.conditions(getattr(model, "engine", None), busy=False)
        slot.close()  # no swap after the pipeline ended; its events still go to the sinks
        handler.flush_events()
        if analytics is not None:
            sinks.events(handler.labelled(analytics.finish()))  # the tracks still live end
        sinks.close()
        summary = _summary(
            pipeline, sources, model, handler, analytics, sinks, power, probes, conditions
        )
        summary["model"] = slot.report()
        if clocks is not None:
            summary["clocks_set"], summary["clock_choice"] = clocks[0].report(), clocks[1]
        return summary


def _clocks(cfg: CameraConfig, model_path, batch: int, streams: int, power, stack, say):
    """``--clocks auto``: the GPU / EMC limits with the least energy per frame at
    ``--target-fps`` frames a second per stream, measured on the model before the streams start
    (as ``edgert bench --target-fps --clocks auto`` does), held for the run and put back at its
    end. (session, choice) or None."""
    if cfg.clocks is None:
        return None
    from edgert.apps.bench import BenchConfig, _clock_session, choose_clocks
    from edgert.runtime.errors import SourceError

    if cfg.gate.target_fps is None:
        raise SourceError("--clocks auto chooses clocks for a rate: give --target-fps N as well")
    m = cfg.model
    bench = BenchConfig(
        str(model_path),
        batch=batch,
        precision=m.precision,
        backend=m.backend,
        target_fps=cfg.gate.target_fps * streams,
        sysfs_root=cfg.power.sysfs_root,
        clocks="auto",
    )
    session = stack.enter_context(_clock_session(bench, say))
    say(f"clocks: measuring the clock points at {bench.target_fps:g} frames/s in all")
    choice = choose_clocks(bench, session, power.meter, {"spin": False}, say)
    choice.pop("key")
    return session, choice


def _gate_says(o: GateOptions, task: str, tracking: bool) -> str:
    """What the gate does for this run, in a sentence."""
    if o.mode == "off":
        which = f"{o.target_fps:g} evenly spaced frames a second (--target-fps)"
    elif o.mode == "interval":
        which = f"one frame in {o.interval}"
    else:
        which = (
            f"frames with motion, moving tracks or tracks at a line or zone, and one every "
            f"{o.keyframe_s:g} s"
        )
    if o.mode != "off" and o.target_fps is not None:
        which += f", at most {o.target_fps:g} a second"
    between = (
        "the tracker predicts the frames between (results marked predicted)"
        if tracking
        else f"the frames between repeat the last {task} results, marked predicted"
    )
    return f"{o.mode}: inference on {which}; {between}"


def _describe(sources: list, geometries: list, gate, say) -> None:
    for i, source in enumerate(sources):
        say(
            f"source: {source.description}"
            if len(sources) == 1
            else f"source [{i}]: {source.description}"
        )
        if source.note:
            say(f"note: {source.note}")
        if geometries:
            check_in_frame(geometries, i, source.size)
        check_masks_in_frame(gate, i, source.size)


def _batch(cfg: CameraConfig, streams: int, model, say) -> int:
    batch, note = choose_batch(cfg.run.batch, streams, model)
    if note:
        say(f"note: {note}")
    elif streams > 1 or batch > 1:
        say(
            f"batching: up to {batch} frames per inference, {cfg.run.batch_timeout_ms:g} ms deadline"
        )
    return batch


def _open_sinks(
    uris: list[str],
    source_uris: list[str],
    sources: list,
    options: SinkOptions,
    stack,
    ctx: SinkContext,
) -> SinkSet:
    """Every sink, opened with the streams (URIs shown without passwords), their frame rate and
    the sinks' options; each closed by ``stack`` on an error path (a run closes its own)."""
    from edgert.apps.uris import redact
    from edgert.runtime.errors import EdgertError

    ctx.streams = [
        {"stream": i, "uri": redact(uri), "source": s.description}
        for i, (uri, s) in enumerate(zip(source_uris, sources))
    ]
    ctx.fps = next((s.fps for s in sources if s.fps), None) or 30.0
    ctx.options = options
    ctx.sources = list(sources)
    opened = []
    for uri in uris:
        sink = open_sink(uri, ctx)
        stack.callback(_quiet_close, sink, (EdgertError, OSError))
        opened.append(sink)
    return SinkSet(opened, options.on_error)


def _quiet_close(sink, errors: tuple) -> None:
    with contextlib.suppress(*errors):
        sink.close()


def _summary(
    pipeline, sources, model, handler, analytics, sinks, power, probes, conditions
) -> dict:
    summary = pipeline.stats()
    if analytics is not None:
        for st in summary["streams"]:
            st["counts"] = analytics.counts(st["stream"])
        summary["events"] = dict(analytics.event_counts)
    summary.update(
        task=model.task,
        backend=model.backend,
        backend_reason=model.backend_reason,
        source=sources[0].description if len(sources) == 1 else f"{len(sources)} streams",
        labels_seen=dict(handler.labels_seen.most_common(10)),
        outputs=sinks.reports(),
        conditions=conditions,
    )
    if sinks.errors:
        summary["output_errors"] = sinks.errors
    camera_s = sum(st.get("camera_s") or 0.0 for st in summary["streams"])
    summary.update(power.summary(summary["frames_processed"], summary["seconds"], camera_s))
    summary.update(probes.report())
    return summary


def _bundle(path: str):
    """The model's bundle, read (and validated) once; None for an .onnx or .engine file."""
    from edgert.runtime.bundle import Bundle, is_bundle

    return Bundle(path) if is_bundle(path) else None


def _tracking_before_sources(cfg: CameraConfig, bundle) -> list:
    """Lines and zones parsed and the model's task checked before any camera opens."""
    if not cfg.tracks:
        return []
    t = cfg.tracking
    geometries = parse_all(list(t.lines), list(t.zones), len(cfg.sources))
    if bundle is not None:
        task = cfg.model.task or bundle.manifest.task
        if not task_spec(task).takes_any:  # a generic bundle: checked once --task loads it
            check_task(task, cfg.tracking_asked_by())
    return geometries


def check_outputs_apart(cfg: CameraConfig, uris: list[str] | None = None) -> None:
    """OutputError when a sink cannot be one (checked before anything opens), when a file the
    run would write is a file it reads (the same file: inode, symlinks followed) or another
    sink's file (``--output file://clip.mp4`` on ``clip.mp4`` would destroy the source), or when
    --metrics and a web viewer would listen on one port. Every scheme of both tables is covered:
    the files come from the tables' own functions."""
    uris = cfg.sink_uris() if uris is None else uris
    read = [u for u in cfg.sources if isinstance(u, str)]  # FrameSource objects read no file here
    _files_apart(read, uris, len(cfg.sources), cfg.sink_options)
    _ports_apart(cfg, uris)


def _files_apart(sources: list[str], uris: list[str], streams: int, options: SinkOptions) -> None:
    for uri in uris:
        check_sink(uri, options)
    reads = [f for uri in sources for f in source_files(uri)]
    writes = [w for uri in uris for w in sink_paths(uri, streams, options.mosaic)]
    for k, (what, path) in enumerate(writes):
        for src in reads:
            if _same_file(path, src):
                raise OutputError(
                    f"{what} would write {path}, which is the source {src}: it would destroy what "
                    "is read; pick another output file"
                )
        for other_what, other in writes[:k]:
            if _same_file(path, other):
                raise OutputError(
                    f"{what} and {other_what} would both write {path}: give each its own file"
                )


def _ports_apart(cfg: CameraConfig, uris: list[str]) -> None:
    """OutputError when two of the run's listeners (--metrics, web viewers, RTSP re-streams)
    would take one port (the viewer's port serves the probes and /metrics itself, so --metrics
    may simply be left out), or when --model-endpoint would answer on an address other than
    loopback (whoever reaches it could replace the model)."""
    from edgert.apps.telemetry.http import parse_address
    from edgert.apps.uris import is_loopback, redact

    from .sinks import rtsp, web

    listeners = [("--metrics", *parse_address(cfg.metrics))] if cfg.metrics else []
    for uri in uris:
        kind = resolve(uri)[0]
        if kind == "http":
            listeners.append((f"--output {redact(uri)}", *web.address(uri)))
        elif kind == "rtsp":
            o = rtsp.options(uri)
            listeners.append((f"--output {redact(uri)}", o["host"], o["port"]))
    seen: dict = {}
    for what, _, port in listeners:
        if port and port in seen:
            raise OutputError(
                f"{seen[port]} and {what} would both listen on port {port}: give each its own"
                + (
                    " (or leave --metrics out: the web viewer's port serves /metrics, /live and "
                    "/ready too)"
                    if seen[port] == "--metrics" and "http" in what
                    else ""
                )
            )
        seen[port] = what
    answering = [(w, h) for w, h, _ in listeners if w == "--metrics" or "http" in w]
    if cfg.swap.endpoint and any(not is_loopback(h) for _, h in answering):
        what, host = next((w, h) for w, h in answering if not is_loopback(h))
        raise OutputError(
            f"--model-endpoint lets whoever reaches {what} on {host} replace the model: it needs "
            "--metrics and the web viewer on a loopback address (127.0.0.1); swap with SIGHUP or "
            "--watch-model instead"
        )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet): the same path once links are followed
        return os.path.realpath(a) == os.path.realpath(b)
