"""The camera inference app as a library: sources (``sources/``, chosen by URI scheme through
one table), a drop-oldest threaded pipeline that batches streams, tasks, and sinks (``sinks/``,
the same). The ``edgert camera`` command is a thin layer over these.

    from edgert.apps.camera import run_streams
    from edgert.runtime.tasks import load_task_model

    with load_task_model("det.edgert") as model:
        summary = run_streams(model, ["rtsp://cam1/live", "clip.mp4"],
                              on_result=lambda f: print(f.stream, f.index, f.results.to_records()))

Every name below is also importable from here when its module moves.
"""

from .app import CameraConfig, ModelOptions, RunOptions, run_camera, run_streams
from .pipeline import Frame, Pipeline, Steps
from .sinks import (
    DisplayOutput,
    EventsOutput,
    HttpOutput,
    JsonlOutput,
    MosaicOutput,
    MqttOutput,
    Sink,
    SinkContext,
    SinkOptions,
    StreamFilesOutput,
    VideoFileOutput,
    open_sink,
)
from .sources import (
    CaptureSource,
    FrameSource,
    GstCameraSource,
    GstFileSource,
    ImageListSource,
    LiveCapture,
    SourceOptions,
    StreamSource,
    SyntheticSource,
    open_source,
)

Output = Sink  # the contract's name before sinks were a package


def open_output(uri: str, fps: float = 30.0, streams: int = 1, mosaic: bool = False) -> Sink:
    """A sink for ``uri`` (the library call before sinks were a package): ``streams`` camera
    streams at ``fps``, a video file per stream or one mosaic of all."""
    return open_sink(
        uri, SinkContext(fps, [{"stream": i} for i in range(streams)], SinkOptions(mosaic=mosaic))
    )


__all__ = [
    "CameraConfig",
    "CaptureSource",
    "DisplayOutput",
    "EventsOutput",
    "Frame",
    "FrameSource",
    "GstCameraSource",
    "GstFileSource",
    "HttpOutput",
    "ImageListSource",
    "JsonlOutput",
    "LiveCapture",
    "ModelOptions",
    "MosaicOutput",
    "MqttOutput",
    "Output",
    "Pipeline",
    "RunOptions",
    "Sink",
    "SinkContext",
    "SinkOptions",
    "Steps",
    "SourceOptions",
    "StreamFilesOutput",
    "StreamSource",
    "SyntheticSource",
    "VideoFileOutput",
    "open_output",
    "open_sink",
    "open_source",
    "run_camera",
    "run_streams",
]
