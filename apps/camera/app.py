"""``edgert camera``: sources, a model and sinks joined by the drop-oldest pipeline.

    run_camera(cfg):
      check the sinks, the same-file guard, each feature's options   (before anything opens)
      open the sources                     (sources/: one table of URI schemes)
      open the features                    (features/: probes, tracking, clocks, power, gate,
                                            swap, secondary; /ready says 503 while the model loads)
      load the model; the features take it (runtime: task models; the power cap, the slot)
      open the sinks                       (sinks/: one table of URI schemes)
      run the pipeline                     (pipeline.py; each frame through delivery.py)
      close everything on every path; summarise

The configuration (options.py) is a few sections, each owned by the component that reads it and
declaring its own flags; the pre-flight checks are preflight.py's; the features that are neither
sources nor sinks have one contract (features/: their options, steps in each phase and on each
frame, metrics, summary, routes, events) and ``run_camera`` is a loop over them; ``run_streams``, the library entry, is the same
composition (``_execute``) with the features a library caller asks for by its options and the
caller's model."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging

from edgert.apps import processes
from edgert.apps.swap.core import Loaded, fingerprint, model_info

from . import features
from .analytics import TrackingOptions
from .delivery import FrameHandler, open_sinks
from .features import Run
from .fit import decoder_fit
from .fit import describe as describe_fit
from .gate import GateOptions
from .options import CameraConfig, ModelOptions, RunOptions
from .pipeline import Pipeline
from .preflight import check_outputs_apart
from .sinks import SinkOptions
from .sources import SourceOptions, open_source
from .steps import slot_steps, steps_for

__all__ = [
    "CameraConfig",
    "ModelOptions",
    "RunOptions",
    "check_outputs_apart",
    "choose_batch",
    "run_camera",
    "run_streams",
]

log = logging.getLogger(__name__)


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
    for i, uri in enumerate(uris):
        if not isinstance(uri, str):
            sources.append(uri)
            continue
        # each stream's decoder follows its own stream's viewers
        fit = dataclasses.replace(opts.fit, stream=i) if opts.fit is not None else None
        source = open_source(uri, dataclasses.replace(opts, fit=fit))
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
    tracking: TrackingOptions | None = None,
    gate: GateOptions | None = None,
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
    apart from the sources' files and closed here). ``tracking`` (TrackingOptions: a tracker,
    lines, zones; on by itself for a sink of events) and ``gate`` (GateOptions: which frames are
    inferred) are the camera's features of the same name. Returns the statistics, overall and
    per stream, with ``outputs`` (and ``output_errors``); Ctrl-C ends the run cleanly. A
    processing error, or every stream failing, raises.

    It is ``run_camera``'s composition (:func:`_execute`) with the features a library caller
    can ask for (:data:`features.LIBRARY_FEATURES`); the command line's own (the metrics port,
    clocks, the power session, the model slot) are left out and the model is the caller's.
    """
    if isinstance(sources, str) or not isinstance(sources, (list, tuple)):
        sources = [sources]  # one source given alone
    cfg = CameraConfig(
        ModelOptions(str(getattr(model, "path", "") or "")),
        list(sources),
        list(sinks or []),
        source_options or SourceOptions(),
        sink_options or SinkOptions(),
        tracking=tracking or TrackingOptions(),
        run=RunOptions(duration, max_frames, batch, batch_timeout_ms),
        gate=gate or GateOptions(),
    )
    run = Run(cfg, _logged, cfg.sinks, model=model, on_result=on_result)
    run.features = [feature() for feature in features.LIBRARY_FEATURES]
    return _execute(run)


def run_camera(cfg: CameraConfig, say=lambda s: None) -> dict:
    """Check, open, run and close as the module's text says; return the summary. A sink that
    fails (a full disk) is in the summary's ``output_errors``: the run stopped there, or with
    ``on_error="continue"`` went on without it."""
    run = Run(cfg, say, cfg.sink_uris(), _bundle(cfg.model.path))  # the manifest, read once
    run.features = [feature() for feature in features.FEATURES]  # the table, read now
    return _execute(run)


def _execute(run: Run) -> dict:
    """The composition of both entries: checks, sources, each feature's steps in the table's
    order, the model (loaded here unless the caller gave one), sinks, the pipeline; everything
    closed on every path."""
    cfg, say = run.cfg, run.say
    check_outputs_apart(cfg, run.uris)
    features.check_run(run)  # needs, order, event kinds, routes: a clash refused now
    with contextlib.ExitStack() as stack:
        run.stack = stack
        for f in run.features:
            f.check(run)  # before anything opens
        crops = bool(cfg.secondaries)  # the second stage crops the camera's full pictures
        shown = [*run.uris, *(uri for _, uri in cfg.stream_sinks)]  # a camera's own too
        opts, why = decoder_fit(cfg.source_options, shown, cfg.gate, run.bundle, crops)
        run.sources = sources = open_sources(cfg.sources, opts, stack)
        _describe(sources, say)
        fitted = describe_fit(sources, opts, why)
        if fitted:
            say(f"decoder scale: {fitted}")
        for f in run.features:
            f.open(run)
        if run.model is None:
            _load(run)
        run.batch = _batch(cfg, len(sources), run.model, say)
        run.handler = handler = FrameHandler(sources, run.power, on_result=run.on_result)
        for f in run.features:
            f.loaded(run)
        handler.join(run, *features.frame_steps(run))  # their steps on every frame
        run.sinks = sinks = open_sinks(run, opts)
        # from here a stop (Ctrl-C, SIGTERM) is held until the pipeline's loop takes it: once
        # the camera answers on its port (the model slot's routes, attached below) a stop ends
        # an interrupted run with its summary, not a start-up with none
        _, resume = processes.defer_signals()
        stack.callback(resume)  # an error on the way: the handlers back (twice is harmless)
        run.pipeline = pipeline = _pipeline(run)
        handler.attach(sinks, pipeline)
        for f in run.features:
            f.attach(run)
        # what start-up made (modules, the model, sources) out of the collector's sight: a full
        # collection, which a swap's allocations trigger, then scans only what came since
        # (measured: ~30 ms with the GIL held before, under 1 ms after; a frame is 33 ms), only
        # where nothing is frozen yet (a library caller's, a pre-fork one, a concurrent run's)
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        try:
            pipeline.run(started=resume)
        finally:
            if freeze:
                gc.unfreeze()  # the objects of the caller's process are collectable again
        # the run is ending: a stop now is held too (noted, the summary still made), so that a
        # SIGTERM landing while the features close (a second stage's last answers) loses nothing
        _, resume = processes.defer_signals()
        stack.callback(resume)
        for f in reversed(run.features):
            f.close(run)
        sinks.close()
        summary = _summary(run)
        resume()
        return summary


def _load(run: Run) -> None:
    """The model, loaded as every swap's candidate is; what names it and what --watch-model
    compares with are read before it loads (a bundle replaced while it loads is then a change to
    swap to, not one missed)."""
    from edgert.runtime.tasks import load_task_model

    m, say = run.cfg.model, run.say
    # nothing busy-waits (ONNX Runtime's threads, CUDA's sync): a camera paces itself by its
    # frame rate, so spinning between frames buys nothing (MobileNetV2 at 30 fps: e2e p50
    # 19.8 ms without, 21.2 with), burns cores, and while a model is swapped in the two
    # sessions' spinning threads fight the live one (benchmarks/hot_swap.py, 100 swaps:
    # 251 frames dropped and p99 +84 ms with spinning; 0-1 and +8 to +29 ms without)
    spin = {"spin": False}

    def load(path):
        return load_task_model(
            _bundle(path) or path,
            m.task,
            m.backend,
            m.precision,
            m.top_k,
            m.conf,
            m.iou,
            **spin,
        )

    path = run.start_from or m.path  # a canary starts on the model it replaces
    bundle = _bundle(path) if run.start_from else run.bundle
    info, run.seen = model_info(path), fingerprint(str(m.path))
    model = processes.uninterrupted(  # a Ctrl-C in onnx's first import would abort
        load_task_model,
        bundle or path,
        m.task,
        m.backend,
        m.precision,
        m.top_k,
        m.conf,
        m.iou,
        **spin,
    )
    run.stack.callback(model.close)  # closing twice is harmless
    run.model, run.load, run.first = model, load, Loaded(model, info, str(path))
    say(f"backend: {model.backend_reason}")


def _pipeline(run: Run) -> Pipeline:
    """The pipeline: the model slot's steps where there is one (a swap may replace the model),
    else the model's own (through its power cap where there is one)."""
    r = run.cfg.run
    steps = slot_steps(run.slot) if run.slot is not None else steps_for(run.model, run.runner)
    return Pipeline(
        run.sources,
        steps,
        run.handler,
        run.batch,
        r.batch_timeout_ms / 1e3,
        r.queue_size,
        r.duration,
        r.max_frames,
        run.gates,
    )


def _logged(line: str) -> None:
    """What a library run says goes to the log (a note, on a choice not the one asked, warns)."""
    (log.warning if line.startswith("note:") else log.info)(line)


def _describe(sources: list, say) -> None:
    for i, source in enumerate(sources):
        say(
            f"source: {source.description}"
            if len(sources) == 1
            else f"source [{i}]: {source.description}"
        )
        if source.note:
            say(f"note: {source.note}")


def _batch(cfg: CameraConfig, streams: int, model, say) -> int:
    batch, note = choose_batch(cfg.run.batch, streams, model)
    if note:
        say(f"note: {note}")
    elif streams > 1 or batch > 1:
        say(
            f"batching: up to {batch} frames per inference, {cfg.run.batch_timeout_ms:g} ms deadline"
        )
    return batch


def _summary(run: Run) -> dict:
    """The pipeline's statistics and the run's own lines; each feature adds its part."""
    summary = run.pipeline.stats()
    model, sources, sinks = run.model, run.sources, run.sinks
    summary.update(
        task=model.task,
        backend=model.backend,
        backend_reason=model.backend_reason,
        source=sources[0].description if len(sources) == 1 else f"{len(sources)} streams",
        labels_seen=dict(run.handler.labels.top.most_common(10)),
        objects_by_label=dict(run.handler.labels.objects.most_common()),
        labels_frames=run.handler.labels.frames,
        outputs=sinks.reports(),
        files=sinks.wrote(),
    )
    if sinks.errors:
        summary["output_errors"] = sinks.errors
    for f in run.features:
        f.report(run, summary)
    return summary


def _bundle(path: str):
    """The model's bundle, read (and validated) once; None for an .onnx or .engine file."""
    from edgert.runtime.bundle import Bundle, is_bundle

    return Bundle(path) if is_bundle(path) else None
