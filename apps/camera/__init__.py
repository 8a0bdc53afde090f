"""The camera inference app as a library: sources, a drop-oldest threaded pipeline that batches
streams, tasks and outputs. The ``edgert camera`` command is a thin layer over these.

    from edgert.apps.camera import run_streams
    from edgert.runtime.tasks import load_task_model

    with load_task_model("det.edgert") as model:
        summary = run_streams(model, ["rtsp://cam1/live", "clip.mp4"],
                              on_result=lambda f: print(f.stream, f.index, f.results))
"""

from .app import CameraConfig, run_camera, run_streams
from .outputs import (
    DisplayOutput,
    JsonlOutput,
    MosaicOutput,
    Output,
    StreamFilesOutput,
    VideoFileOutput,
    open_output,
)
from .pipeline import Frame, Pipeline, Steps
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
from .web import HttpOutput

__all__ = [
    "CameraConfig",
    "CaptureSource",
    "DisplayOutput",
    "Frame",
    "FrameSource",
    "GstCameraSource",
    "GstFileSource",
    "HttpOutput",
    "ImageListSource",
    "JsonlOutput",
    "LiveCapture",
    "MosaicOutput",
    "Output",
    "Pipeline",
    "Steps",
    "SourceOptions",
    "StreamFilesOutput",
    "StreamSource",
    "SyntheticSource",
    "VideoFileOutput",
    "open_output",
    "open_source",
    "run_camera",
    "run_streams",
]
