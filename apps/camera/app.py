"""``edgert camera``: a source, a model and outputs joined by the drop-oldest pipeline."""

from __future__ import annotations

import collections
import logging
import os
import time
from dataclasses import dataclass, field

from .outputs import HttpOutput, JsonlOutput, frame_record, open_output
from .overlay import draw
from .pipeline import Pipeline
from .sources import SourceOptions, open_source
from .tasks import face_stages, stages_for

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
    from edgert.runtime.engine import Engine
    from edgert.runtime.power.governor import CappedRunner
    from edgert.runtime.power.meter import PowerMeter
    from edgert.runtime.power.sensors import discover

    outputs = []
    meter = None
    try:
        from edgert.runtime.bundle import Bundle, is_bundle

        faces = is_bundle(cfg.model) and Bundle(cfg.model).manifest.task == "faces"
        if cfg.task == "faces" and not faces:
            from edgert.runtime.errors import ModelError

            raise ModelError(
                f"--task faces needs a face-detection bundle (edgert export zoo:mtcnn), not {cfg.model}"
            )
        if faces:
            from edgert.runtime.faces import MtcnnDetector

            engine = MtcnnDetector(cfg.model, backend=cfg.backend)
        else:
            engine = Engine.load(cfg.model, backend=cfg.backend, precision=cfg.precision)
        say(f"backend: {engine.backend_reason}")
        found = discover(cfg.sysfs_root)
        runner = None
        if found.sensor:
            meter = PowerMeter(found.sensor).start()
            if cfg.power_cap is not None:
                idle = meter.measure_idle(1.5)
                runner = CappedRunner(engine, meter, cfg.power_cap, idle)
        elif cfg.power_cap is not None:
            from edgert.runtime.errors import SensorError

            raise SensorError(
                f"--power-cap needs a power sensor, and there is none: {found.reason}"
            )
        if faces:
            if cfg.power_cap is not None:
                from edgert.runtime.errors import ModelError

                raise ModelError(
                    "--power-cap is not supported with the three-network face detector yet"
                )
            task, stages = "faces", face_stages(engine)
        else:
            task, stages = stages_for(engine, cfg.task, cfg.top_k, cfg.conf, cfg.iou, runner)
        source = open_source(cfg.source, cfg.source_options)
        say(f"source: {source.description}")
        fps = source.fps or 30.0
        uris = list(cfg.outputs)
        if (
            not uris
            and not cfg.headless
            and (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
        ):
            uris.append("display://0")
        outputs = [open_output(u, fps) for u in uris]
        for o in outputs:
            if isinstance(o, HttpOutput):
                say(f"web viewer: {o.url}")
        if cfg.jsonl:
            outputs.append(JsonlOutput(cfg.jsonl))
        labels_seen: collections.Counter = collections.Counter()
        t0 = time.monotonic()
        pipeline: Pipeline

        def live_stats() -> dict:
            s = pipeline.stats(recent=True)
            if meter and not meter.lost:
                w = meter.recent_w(2.0)
                s["power_w"] = w
                s["mj_per_frame"] = (w / s["fps"] * 1e3) if w and s["fps"] else None
            else:
                s["power_w"] = None
                s["power_reason"] = (meter.lost if meter else found.reason) or "unavailable"
            return s

        last_stats = [0.0, {}]

        def sink(frame) -> None:
            if isinstance(frame.results, list) and frame.results:
                labels_seen[frame.results[0]["label"]] += 1
            now = time.monotonic()
            if now - last_stats[0] > 0.5:
                last_stats[0], last_stats[1] = now, live_stats()
            s = last_stats[1]
            e2e = s.get("latency_ms", {}).get("end_to_end", {}).get("p50", 0.0)
            lines = [f"{s.get('fps', 0):.1f} fps  e2e p50 {e2e:.1f} ms  dropped {pipeline.dropped}"]
            if s.get("power_w"):
                lines.append(f"{s['power_w']:.2f} W  {s.get('mj_per_frame') or 0:.1f} mJ/frame")
            record = frame_record(frame, t0)
            record["latency_ms"]["end_to_end"] = round(
                (time.monotonic() - frame.t_capture) * 1e3, 3
            )
            image = (
                draw(frame.image, frame.results, lines)
                if any(not isinstance(o, JsonlOutput) for o in outputs)
                else frame.image
            )
            for o in outputs:
                if isinstance(o, HttpOutput):
                    o.set_stats({**s, "last": record})
                o.write(frame, image, record)

        pipeline = Pipeline(source, stages, sink, cfg.queue_size, cfg.duration, cfg.max_frames)
        m_start = meter.now() if meter else None
        try:
            pipeline.run()
        finally:
            source.close()
        summary = pipeline.stats()
        summary.update(
            task=task,
            backend=f"mtcnn ({engine.engines['pnet'].backend})" if faces else engine.backend,
            backend_reason=engine.backend_reason,
            source=source.description,
        )
        summary["labels_seen"] = dict(labels_seen.most_common(10))
        if pipeline.interrupted:
            summary["stopped"] = "interrupted (Ctrl-C or SIGTERM)"
        if meter and not meter.lost:
            avg = meter.average_w(m_start, meter.now())
            summary["power_w"] = avg
            summary["mj_per_frame"] = (
                avg * summary["seconds"] / max(1, summary["frames_processed"]) * 1e3
                if avg
                else None
            )
        else:
            summary["power_w"] = None
            summary["power_reason"] = (meter.lost if meter else found.reason) or "unavailable"
        if runner is not None:
            summary["power_cap"] = runner.report()
        engine.close()
        return summary
    finally:
        for o in outputs:
            o.close()
        if meter:
            meter.stop()
