"""``edgert camera``: a source, a model and outputs joined by the drop-oldest pipeline."""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import time
from dataclasses import dataclass, field

from .outputs import HttpOutput, JsonlOutput, frame_record, open_output
from .overlay import draw
from .pipeline import Pipeline
from .sources import SourceOptions, open_source
from .tasks import stages_for

log = logging.getLogger(__name__)


@dataclass
class CameraConfig:
    model: str
    source: str = "synthetic://"
    outputs: list[str] = field(default_factory=list)
    task: str | None = None
    power_cap: float | None = None
    duration: float | None = None
    max_frames: int | None = None
    jsonl: str | None = None
    headless: bool = False
    backend: str = "auto"
    precision: str = "auto"
    top_k: int = 3
    conf: float = 0.25
    iou: float = 0.45
    queue_size: int = 1
    source_options: SourceOptions = field(default_factory=SourceOptions)
    sysfs_root: str | None = None


def run_camera(cfg: CameraConfig, say=lambda s: None) -> dict:
    """Open the source first (a wrong URI is reported before a model loads, which may mean building
    a TensorRT plan), then the model, power and outputs; run the pipeline; close everything on
    every path; return the summary."""
    from edgert.runtime.tasks import load_task_model

    with contextlib.ExitStack() as stack:
        source = open_source(cfg.source, cfg.source_options)
        stack.callback(source.close)
        say(f"source: {source.description}")
        # under a power cap nothing busy-waits (ONNX Runtime's threads, CUDA's sync)
        spin = {"spin": False} if cfg.power_cap is not None else {}
        model = load_task_model(cfg.model, cfg.task, cfg.backend, cfg.precision, cfg.top_k,
                                cfg.conf, cfg.iou, **spin)  # fmt: skip
        stack.callback(model.close)
        say(f"backend: {model.backend_reason}")
        power = _Power.start(cfg, model, stack)
        outputs = _open_outputs(cfg, source, stack, say)
        pipeline, labels_seen = _pipeline(cfg, source, model, power, outputs)
        m_start = power.meter.now() if power.meter else None
        pipeline.run()
        summary = pipeline.stats()
        summary.update(
            task=model.task,
            backend=model.backend,
            backend_reason=model.backend_reason,
            source=source.description,
            labels_seen=dict(labels_seen.most_common(10)),
        )
        if pipeline.interrupted:
            summary["stopped"] = "interrupted (Ctrl-C or SIGTERM)"
        summary.update(power.summary(m_start, summary))
        return summary


@dataclass
class _Power:
    """The sensor, meter and (with --power-cap) the capped runner of one camera run."""

    meter: object = None
    runner: object = None
    reason: str | None = None

    @classmethod
    def start(cls, cfg: CameraConfig, model, stack: contextlib.ExitStack) -> _Power:
        from edgert.runtime.errors import SensorError
        from edgert.runtime.power.governor import CappedRunner
        from edgert.runtime.power.meter import PowerMeter
        from edgert.runtime.power.sensors import discover

        found = discover(cfg.sysfs_root)
        if found.sensor is None:
            if cfg.power_cap is not None:
                raise SensorError(
                    f"--power-cap needs a power sensor, and there is none: {found.reason}"
                )
            return cls(reason=found.reason)
        meter = PowerMeter(found.sensor).start()
        stack.callback(meter.stop)
        runner = None
        if cfg.power_cap is not None:
            runner = CappedRunner(model, meter, cfg.power_cap, meter.measure_idle(1.5))
        return cls(meter, runner)

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


def _open_outputs(cfg: CameraConfig, source, stack: contextlib.ExitStack, say) -> list:
    uris = list(cfg.outputs)
    has_display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    if not uris and not cfg.headless and has_display:
        uris.append("display://0")
    outputs = []
    for uri in uris:
        out = open_output(uri, source.fps or 30.0)
        stack.callback(out.close)
        outputs.append(out)
        if isinstance(out, HttpOutput):
            say(f"web viewer: {out.url}")
    if cfg.jsonl:
        out = JsonlOutput(cfg.jsonl)
        stack.callback(out.close)
        outputs.append(out)
    return outputs


def _pipeline(cfg: CameraConfig, source, model, power: _Power, outputs: list):
    """The pipeline and its sink: overlay (stats refreshed every 0.5 s), then every output."""
    labels_seen: collections.Counter = collections.Counter()
    t0 = time.monotonic()
    last_stats: list = [0.0, {}]
    drawn = any(not isinstance(o, JsonlOutput) for o in outputs)

    def sink(frame) -> None:
        if isinstance(frame.results, list) and frame.results:
            labels_seen[frame.results[0]["label"]] += 1
        now = time.monotonic()
        if now - last_stats[0] > 0.5:
            last_stats[0], last_stats[1] = now, power.live(pipeline.stats(recent=True))
        s = last_stats[1]
        e2e = s.get("latency_ms", {}).get("end_to_end", {}).get("p50", 0.0)
        lines = [f"{s.get('fps', 0):.1f} fps  e2e p50 {e2e:.1f} ms  dropped {pipeline.dropped}"]
        if s.get("power_w"):
            lines.append(f"{s['power_w']:.2f} W  {s.get('mj_per_frame') or 0:.1f} mJ/frame")
        record = frame_record(frame, t0)
        record["latency_ms"]["end_to_end"] = round((time.monotonic() - frame.t_capture) * 1e3, 3)
        image = draw(frame.image, frame.results, lines) if drawn else frame.image
        for o in outputs:
            if isinstance(o, HttpOutput):
                o.set_stats({**s, "last": record})
            o.write(frame, image, record)

    stages = stages_for(model, power.runner)
    pipeline = Pipeline(source, stages, sink, cfg.queue_size, cfg.duration, cfg.max_frames)
    return pipeline, labels_seen
