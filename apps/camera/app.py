"""``edgert camera``: a source, a model and outputs joined by the drop-oldest pipeline."""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from edgert.runtime.errors import EdgertError, OutputError

from .analytics import Analytics, EventsOutput, check_in_frame, check_task, parse_all
from .outputs import HttpOutput, JsonlOutput, frame_record, open_output, output_paths
from .overlay import draw
from .pipeline import Pipeline
from .sources import SourceOptions, open_source, redact, source_files
from .steps import steps_for

log = logging.getLogger(__name__)


@dataclass
class CameraConfig:
    model: str
    sources: list[str] = field(default_factory=lambda: ["synthetic://"])
    outputs: list[str] = field(default_factory=list)
    task: str | None = None
    power_cap: float | None = None
    temp_cap: float | None = None  # °C for the hottest thermal zone
    duration: float | None = None
    max_frames: int | None = None  # per stream
    jsonl: str | None = None
    headless: bool = False
    backend: str = "auto"
    precision: str = "auto"
    top_k: int = 3
    conf: float = 0.25
    iou: float = 0.45
    queue_size: int = 1
    batch: int | None = None  # frames per inference; default one per stream, up to the model max
    batch_timeout_ms: float = 20.0
    mosaic: bool = False
    source_options: SourceOptions = field(default_factory=SourceOptions)
    sysfs_root: str | None = None
    on_output_error: str = "stop"  # stop: the run ends; continue: that output ends, the run goes on
    track: bool = False  # a tracker per stream (implied by lines, zones and events)
    lines: list[str] = field(default_factory=list)  # [STREAM:]NAME=x1,y1,x2,y2
    zones: list[str] = field(default_factory=list)  # [STREAM:]NAME=x1,y1,x2,y2,x3,y3,...
    events: str | None = None  # JSONL file of track and counting events
    count_anchor: str = "bottom_center"  # the point of a box that counts: or "center"
    lost_seconds: float = 1.0  # how long a track is kept without a detection
    metrics: str | None = None  # [HOST:]PORT of /metrics, /live, /ready
    mqtt: str | None = None  # mqtt[s]://[user:pass@]host[:port]/PREFIX
    mqtt_buffer: int = 1000  # events kept while the broker is away
    mqtt_heartbeat: float = 10.0  # seconds between heartbeats (0: none)
    mqtt_ca: str | None = None
    mqtt_cert: str | None = None
    mqtt_key: str | None = None
    mqtt_insecure: bool = False
    mqtt_client_id: str | None = None
    mqtt_protocol: str = "5"  # 5 | 3.1.1

    @property
    def tracking(self) -> bool:
        return bool(self.track or self.lines or self.zones or self.events)


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
    """Every source, each closed by ``stack``; a wrong URI fails before any model loads."""
    sources = []
    for uri in uris:
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
) -> dict:
    """The camera pipeline without the command line: frames of every source batched through one
    task model (see :func:`edgert.runtime.tasks.load_task_model`).

        with load_task_model("det.edgert") as model:
            summary = run_streams(model, ["rtsp://cam1/live", "rtsp://cam2/live"],
                                  on_result=lambda f: print(f.stream, f.index, f.results))

    ``sources``: URIs (opened and closed here) or FrameSource objects. ``on_result(frame)`` is
    called from the output thread for every processed frame (``frame.stream``, ``frame.index``,
    ``frame.image``, ``frame.results``). Returns the statistics, overall and per stream; Ctrl-C
    ends the run cleanly. A processing error, or every stream failing, raises.
    """
    if isinstance(sources, str) or not isinstance(sources, (list, tuple)):
        sources = [sources]  # one source given alone
    with contextlib.ExitStack() as stack:
        opened = [
            open_sources([s], source_options or SourceOptions(), stack)[0]
            if isinstance(s, str)
            else s
            for s in sources
        ]
        size, note = choose_batch(batch, len(opened), model)
        if note:
            log.warning(note)
        pipeline = Pipeline(opened, steps_for(model), on_result or (lambda frame: None), size,
                            batch_timeout_ms / 1e3, duration=duration, max_frames=max_frames)  # fmt: skip
        pipeline.run()
        return pipeline.stats()


def run_camera(cfg: CameraConfig, say=lambda s: None) -> dict:
    """Open the sources first (a wrong URI is reported before a model loads, which may mean
    building a TensorRT plan), then the model, power and outputs; run the pipeline; close
    everything on every path; return the summary. An output that fails (a full disk) is in the
    summary's ``output_errors``: the run stopped there, or with ``on_output_error="continue"``
    went on without it."""
    from edgert.runtime.tasks import load_task_model

    from .telemetry import CameraTelemetry

    check_outputs_apart(cfg)
    geometries = _tracking_before_sources(cfg)
    with contextlib.ExitStack() as stack:
        sources = open_sources(cfg.sources, cfg.source_options, stack)
        telemetry = CameraTelemetry(cfg, say)  # /ready answers 503 while the model loads
        stack.callback(telemetry.close)
        for i, source in enumerate(sources):
            say(
                f"source: {source.description}"
                if len(sources) == 1
                else f"source [{i}]: {source.description}"
            )
            if getattr(source, "note", None):
                say(f"note: {source.note}")
            if geometries:
                check_in_frame(geometries, i, getattr(source, "size", None))
        # under a power cap nothing busy-waits (ONNX Runtime's threads, CUDA's sync)
        capped = cfg.power_cap is not None or cfg.temp_cap is not None
        spin = {"spin": False} if capped else {}
        model = load_task_model(cfg.model, cfg.task, cfg.backend, cfg.precision, cfg.top_k,
                                cfg.conf, cfg.iou, **spin)  # fmt: skip
        stack.callback(model.close)
        telemetry.loaded(model)
        say(f"backend: {model.backend_reason}")
        batch, note = choose_batch(cfg.batch, len(sources), model)
        if note:
            say(f"note: {note}")
        elif len(sources) > 1 or batch > 1:
            say(
                f"batching: up to {batch} frames per inference, {cfg.batch_timeout_ms:g} ms deadline"
            )
        analytics = None
        if cfg.tracking:
            check_task(model.task)
            analytics = Analytics(len(sources), geometries, cfg.count_anchor, cfg.lost_seconds)
        power = _Power.start(cfg, model, stack)
        outputs = _open_outputs(cfg, sources, stack, say, telemetry)
        pipeline, labels_seen = _pipeline(cfg, sources, model, power, outputs, batch, analytics)
        telemetry.attach(pipeline, power, analytics)
        m_start = power.meter.now() if power.meter else None
        from edgert.runtime.power.thermal import ConditionsMonitor, busy_clocks

        monitor = ConditionsMonitor(cfg.sysfs_root).start()
        try:
            pipeline.run()
        finally:
            engine = getattr(model, "engine", None)
            # a camera paces itself by its frame rate: only lowered limits, hot zones and NVML
            # slowdowns count as throttling, not DVFS easing off between frames
            conditions = monitor.stop(busy_clocks(engine), busy=False)
        if analytics is not None:
            outputs.write_events(analytics.finish())  # the tracks still live end
        outputs.close()
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
            labels_seen=dict(labels_seen.most_common(10)),
            outputs=outputs.reports(),
            conditions=conditions,
        )
        if outputs.errors:
            summary["output_errors"] = outputs.errors
        summary.update(power.summary(m_start, summary))
        summary.update(telemetry.report())
        return summary


def _tracking_before_sources(cfg: CameraConfig) -> list:
    """Lines and zones parsed and the model's task checked before any camera opens."""
    from edgert.runtime.bundle import Bundle, is_bundle

    if not cfg.tracking:
        return []
    geometries = parse_all(cfg.lines, cfg.zones, len(cfg.sources))
    if is_bundle(cfg.model):
        task = cfg.task or Bundle(cfg.model).manifest.task
        if task != "generic":
            check_task(task)
    return geometries


def check_outputs_apart(cfg: CameraConfig) -> None:
    """OutputError when a file the run would write is a file it reads (the same file: inode,
    symlinks followed) or another output's file: ``--output file://clip.mp4`` on ``clip.mp4``
    would destroy the source."""
    _ports_apart(cfg)
    reads = [f for uri in cfg.sources for f in source_files(uri)]
    writes = output_paths(cfg.outputs, len(cfg.sources), cfg.mosaic)
    if cfg.jsonl:
        writes.append(("--jsonl", Path(cfg.jsonl)))
    if cfg.events:
        writes.append(("--events", Path(cfg.events)))
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


def _ports_apart(cfg: CameraConfig) -> None:
    """OutputError when --metrics and a web viewer would listen on one port (the viewer's port
    serves the probes and /metrics itself, so --metrics may simply be left out)."""
    from urllib.parse import urlparse

    from edgert.apps.telemetry.http import parse_address

    port = parse_address(cfg.metrics)[1] if cfg.metrics else 0
    if not port:  # none, or a free one chosen when it listens
        return
    for uri in cfg.outputs:
        if uri.startswith("http://"):
            with contextlib.suppress(ValueError):  # a bad port: open_output says so
                if urlparse(uri).port == port:
                    raise OutputError(
                        f"--metrics and --output {uri} would both listen on port {port}: give "
                        "each its own, or leave --metrics out (the web viewer's port serves "
                        "/metrics, /live and /ready too)"
                    )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet): the same path once links are followed
        return os.path.realpath(a) == os.path.realpath(b)


class _Outputs:
    """Every output of a run. One whose write fails (a full disk, a broken pipe) is closed and
    reported; then the run stops (``stop``) or goes on without it (``continue``)."""

    def __init__(self, outputs: list, policy: str) -> None:
        self.live = list(outputs)
        self.all = list(outputs)
        self.policy = policy
        self.errors: list[str] = []
        self.on_stop = lambda: None

    def write(self, frame, image, record: dict) -> None:
        for o in list(self.live):
            self._guarded(o, o.write, frame, image, record)

    def write_events(self, events: list) -> None:
        """Events that belong to no frame (the end of the run) to the events outputs."""
        for o in list(self.live):
            if hasattr(o, "write_events"):
                self._guarded(o, o.write_events, events)

    def _guarded(self, o, call, *args) -> None:
        try:
            call(*args)
        except OutputError as exc:
            self._failed(o, exc)

    def _failed(self, o, exc: EdgertError) -> None:
        self.live.remove(o)
        self.errors.append(str(exc))
        with contextlib.suppress(EdgertError, OSError):
            o.close()
        if self.policy == "continue":
            log.warning("%s; going on without that output", exc)
        else:
            self.on_stop()

    def close(self) -> None:
        while self.live:
            try:
                self.live.pop(0).close()
            except OutputError as exc:
                self.errors.append(str(exc))

    def reports(self) -> list:
        return [o.report() for o in self.all if hasattr(o, "report")]


@dataclass
class _Power:
    """The sensor, meter and (with --power-cap) the capped runner of one camera run."""

    meter: object = None
    runner: object = None
    reason: str | None = None

    @classmethod
    def start(cls, cfg: CameraConfig, model, stack: contextlib.ExitStack) -> _Power:
        from edgert.runtime.errors import SensorError
        from edgert.runtime.power.governor import CappedRunner, HottestZone
        from edgert.runtime.power.meter import PowerMeter
        from edgert.runtime.power.sensors import discover

        zone = HottestZone(cfg.sysfs_root) if cfg.temp_cap is not None else None
        found = discover(cfg.sysfs_root)
        meter = None
        if found.sensor is not None:
            meter = PowerMeter(found.sensor).start()
            stack.callback(meter.stop)
        elif cfg.power_cap is not None:
            raise SensorError(
                f"--power-cap needs a power sensor, and there is none: {found.reason}"
            )
        runner = None
        if cfg.power_cap is not None or zone is not None:
            idle = meter.measure_idle(1.5) if cfg.power_cap is not None else None
            runner = CappedRunner(model, meter, cfg.power_cap, idle, temp_cap_c=cfg.temp_cap,
                                  zone=zone)  # fmt: skip
        return cls(meter, runner, None if meter else found.reason)

    def live(self, s: dict) -> dict:
        if self.meter and not self.meter.lost:
            w = self.meter.recent_w(2.0)
            s["power_w"] = w
            s["mj_per_frame"] = (w / s["fps"] * 1e3) if w and s["fps"] else None
        else:
            s["power_w"] = None
            s["power_reason"] = (self.meter.lost if self.meter else self.reason) or "unavailable"
        return s

    def summary(self, m_start, s: dict) -> dict:
        out: dict = {}
        if self.meter and not self.meter.lost:
            avg = self.meter.average_w(m_start, self.meter.now())
            out["power_w"] = avg
            frames = max(1, s["frames_processed"])
            out["mj_per_frame"] = avg * s["seconds"] / frames * 1e3 if avg else None
        else:
            out["power_w"] = None
            out["power_reason"] = (self.meter.lost if self.meter else self.reason) or "unavailable"
        if self.runner is not None:
            out["power_cap"] = self.runner.report()
        return out


def _open_outputs(cfg: CameraConfig, sources: list, stack: contextlib.ExitStack, say,
                  telemetry=None) -> _Outputs:  # fmt: skip
    uris = list(cfg.outputs)
    has_display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    if not uris and not cfg.headless and has_display:
        uris.append("display://0")
    fps = next((s.fps for s in sources if s.fps), None) or 30.0
    outputs = []
    for uri in uris:
        out = open_output(uri, fps, len(sources), cfg.mosaic)
        stack.callback(_quiet_close, out)  # on an error path; the run closes them itself
        outputs.append(out)
        if isinstance(out, HttpOutput):
            out.probes = telemetry.probes if telemetry is not None else None
            say(f"web viewer: {out.url}")
    streams = [{"stream": i, "uri": redact(uri), "source": s.description}
               for i, (uri, s) in enumerate(zip(cfg.sources, sources))]  # fmt: skip
    if cfg.jsonl:
        header = {"run_start": round(time.time(), 4), "streams": streams}
        out = JsonlOutput(cfg.jsonl, header)
        stack.callback(_quiet_close, out)
        outputs.append(out)
    if cfg.events:
        out = EventsOutput(cfg.events, streams)
        stack.callback(_quiet_close, out)
        outputs.append(out)
    for out in telemetry.outputs() if telemetry is not None else []:
        stack.callback(_quiet_close, out)
        outputs.append(out)
    return _Outputs(outputs, cfg.on_output_error)


def _quiet_close(out) -> None:
    with contextlib.suppress(EdgertError, OSError):
        out.close()


def _pipeline(cfg: CameraConfig, sources: list, model, power: _Power, outputs, batch: int,
              analytics=None):  # fmt: skip
    """The pipeline and its sink: overlay (stats refreshed every 0.5 s), then every output."""
    labels_seen: collections.Counter = collections.Counter()
    t0 = time.monotonic()
    last_stats: list = [0.0, {}]
    last_records: dict = {}
    drawn = any(getattr(o, "draws", True) and not isinstance(o, (JsonlOutput, EventsOutput))
                for o in outputs.all)  # fmt: skip
    web = [o for o in outputs.all if isinstance(o, HttpOutput)]
    many = len(sources) > 1

    def sink(frame) -> None:
        if isinstance(frame.results, list) and frame.results:
            labels_seen[frame.results[0]["label"]] += 1
        if analytics is not None:
            analytics.update(frame)  # track IDs into the results, events onto the frame
        now = time.monotonic()
        record = frame_record(frame, t0)
        record["latency_ms"]["end_to_end"] = round((now - frame.t_capture) * 1e3, 3)
        last_records[frame.stream] = record
        if now - last_stats[0] > 0.5:
            last_stats[0], last_stats[1] = now, power.live(pipeline.stats(recent=True))
            for st in last_stats[1]["streams"]:
                st["last"] = last_records.get(st["stream"])
                if analytics is not None:
                    st["counts"] = analytics.counts(st["stream"])
            for o in web:
                o.set_stats(last_stats[1])
        s = last_stats[1]
        image = frame.image
        if drawn:
            scene = analytics.overlay(frame.stream) if analytics is not None else None
            image = draw(frame.image, frame.results, _overlay_lines(s, frame.stream, sources, many),
                         scene)  # fmt: skip
        outputs.write(frame, image, record)

    steps = steps_for(model, power.runner)
    pipeline = Pipeline(sources, steps, sink, batch, cfg.batch_timeout_ms / 1e3, cfg.queue_size,
                        cfg.duration, cfg.max_frames)  # fmt: skip
    outputs.on_stop = pipeline.stop
    return pipeline, labels_seen


def _overlay_lines(s: dict, stream: int, sources: list, many: bool) -> list[str]:
    """The numbers drawn on a frame: its stream's (named when there are several), then power."""
    lines = []
    if many:
        st = s["streams"][stream] if s.get("streams") else {}
        e2e = st.get("latency_ms", {}).get("end_to_end", {}).get("p50", 0.0)
        lines.append(f"[{stream}] {sources[stream].description}"[:60])
        lines.append(
            f"{st.get('fps', 0):.1f} fps  e2e p50 {e2e:.1f} ms  dropped {st.get('frames_dropped', 0)}"
        )
        batch = s.get("batch", {})
        lines.append(
            f"all: {s.get('fps', 0):.1f} fps, batch {batch.get('mean', 0):.1f}/{batch.get('max', 1)}"
        )
    else:
        e2e = s.get("latency_ms", {}).get("end_to_end", {}).get("p50", 0.0)
        lines.append(
            f"{s.get('fps', 0):.1f} fps  e2e p50 {e2e:.1f} ms  dropped {s.get('frames_dropped', 0)}"
        )
    if s.get("power_w"):
        lines.append(f"{s['power_w']:.2f} W  {s.get('mj_per_frame') or 0:.1f} mJ/frame")
    return lines
