"""Frames through GStreamer (PyGObject's ``Gst`` and an ``appsink``, as JetPack's own Python and
DeepStream's Python apps have it): NVDEC through ``nvv4l2decoder`` on a Jetson, FFmpeg's decoders
(``avdec_h264``/``avdec_h265``) elsewhere, ``rtspsrc`` with a small jitter buffer; and OpenCV's
own log, kept quiet where edgert says what went wrong.

- ``load``: GStreamer in this process, and which elements the machine has;
- ``describe``: the pipeline descriptions, pure functions of those elements (a Jetson's are
  tested on any machine), the decoder's scale to the model (:class:`Fit`, :class:`Demand`);
- ``connection``: :class:`GstConnection`, the thin part that runs one;
- ``tap``: a stream's encoded packets for clips; ``encode``: the H.264 encoders and what
  ``edgert info`` says; ``opencv_log``: OpenCV's and FFmpeg's messages.

Sources and sinks import what they use from here; nothing here imports the camera app.
"""

from __future__ import annotations

from .connection import GstConnection, bgr_copy
from .describe import (
    BGR,
    BGRX,
    SINK_CAPS,
    VIEW_ELEMENTS,
    Demand,
    Fit,
    Launch,
    Views,
    appsink,
    csi_pipeline,
    decode_chain,
    describe,
    file_pipeline,
    paced,
    rtsp_source,
    v4l2_pipeline,
)
from .encode import INSTALL_ENCODER, NVENC_DEVICES, choose_encoder, decoders, encode_chain
from .load import ELEMENTS, INSTALL, available, elements, gst, hardware_decoder
from .tap import PacketTap

__all__ = [
    "BGR",
    "BGRX",
    "ELEMENTS",
    "INSTALL",
    "INSTALL_ENCODER",
    "NVENC_DEVICES",
    "SINK_CAPS",
    "VIEW_ELEMENTS",
    "Demand",
    "Fit",
    "GstConnection",
    "Launch",
    "PacketTap",
    "Views",
    "appsink",
    "available",
    "bgr_copy",
    "choose_encoder",
    "csi_pipeline",
    "decode_chain",
    "decoders",
    "describe",
    "elements",
    "encode_chain",
    "file_pipeline",
    "gst",
    "hardware_decoder",
    "paced",
    "rtsp_source",
    "v4l2_pipeline",
]
