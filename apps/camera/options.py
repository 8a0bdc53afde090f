"""The camera run's configuration: a few sections, each owned by the component that reads it and
declaring its own flags: the model (:class:`ModelOptions`), the sources (:class:`SourceOptions`),
the sinks (:class:`SinkOptions`), tracking (:class:`TrackingOptions`), power
(:class:`PowerOptions`), the run (:class:`RunOptions`), the gate, the swap; :class:`CameraConfig`
holds one of each."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from edgert.apps.swap.options import SwapOptions
from edgert.runtime.power.session import PowerOptions

from .analytics import TrackingOptions
from .gate import GateOptions
from .sinks import SinkOptions, scheme_of, shows_picture, tracks
from .sources import SourceOptions

__all__ = ["CameraConfig", "ModelOptions", "RunOptions"]


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

        parser.add_argument(
            "model",
            metavar="MODEL",
            nargs="?",
            help="a bundle, .onnx or .engine (not with --config: the file names it)",
        )
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
    # a live stream's queues (raw, then ready): the oldest dropped (counted) beyond this many; two
    # absorb a burst (frames decoded late, together) at one frame of latency more only while it
    # lasts (8 streams on 2 cores: 6 % of frames dropped at one, 0.5-1.5 % at two)
    queue_size: int = 2

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
    secondaries: tuple = ()  # secondary.SecondarySpec: second-stage models on the tracks
    more: dict = field(default_factory=dict)  # the sections of features not named above
    stream_sinks: tuple = ()  # (stream, URI): a camera's own outputs (sinks.own); last: a
    # library caller's positional arguments keep their places

    def section(self, name: str):
        """A feature's section of the config (``Feature.section``), None when not given."""
        return self.more.get(name) if name in self.more else getattr(self, name, None)

    @property
    def tracks(self) -> bool:
        """Tracking is on: asked for, or implied by lines, zones or an events sink."""
        return self.tracking.enabled or bool(self.secondaries) or any(map(tracks, self.all_uris()))

    def all_uris(self) -> list[str]:
        """Every output's URI: the run's, then each camera's own."""
        return [*self.sinks, *(uri for _, uri in self.stream_sinks)]

    def tracking_asked_by(self) -> str:
        """What turned tracking on, as the user gave it (for a sentence)."""
        t = self.tracking
        if t.track or not (
            t.lines or t.zones or self.secondaries or any(map(tracks, self.all_uris()))
        ):
            return "--track"
        if self.secondaries and not (t.lines or t.zones):
            return f"--secondary {self.secondaries[0].bundle}"
        if t.lines or t.zones:
            return "--line" if t.lines else "--zone"
        uri = next((u for u in self.sinks if tracks(u)), None)
        if uri is None:  # a camera's own events output
            return next(f"--stream-output {i}:{u}" for i, u in self.stream_sinks if tracks(u))
        entry = scheme_of(uri)
        return f"{entry.flag} {uri.split('://', 1)[-1]}" if entry.flag else f"--output {uri}"

    def sink_uris(self) -> list[str]:
        """The sinks, with a window when nothing shows the picture and a display is there."""
        uris = list(self.sinks)
        has_display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
        if not self.sink_options.headless and has_display and not any(map(shows_picture, uris)):
            uris.append("display://0")
        return uris
