"""H.264 encoders for the rtsp:// output and clips (sinks/), and what ``edgert info`` says of the
machine's decoders and encoder."""

from __future__ import annotations

from pathlib import Path

from .describe import describe
from .load import INSTALL, available, elements, hardware_decoder


def decoders(have: set[str] | None = None, found: tuple[bool, str] | None = None) -> dict:
    """Which decoders this machine has and which edgert would use (``edgert info``); ``have``
    and ``found`` default to this machine's (a test gives a Jetson's)."""
    ok, version = found if found is not None else available()
    have = elements() if have is None else have
    hw = ok and hardware_decoder(have)
    return {
        "gstreamer": {
            "available": ok,
            "version": version if ok else None,
            "reason": None if ok else f"{version}; {INSTALL}",
            "elements": sorted(have),
        },
        "ffmpeg": {"available": True, "version": "OpenCV's FFmpeg back end"},
        "hardware_decoder": "nvv4l2decoder (NVDEC)" if hw else None,
        "rtsp": {
            "decoder": "gstreamer" if ok else "ffmpeg",
            "pipeline_h264": describe("rtsp-h264", have) if ok else None,
            "pipeline_h265": describe("rtsp-h265", have) if ok else None,
        },
        "files": {
            "decoder": "gstreamer" if hw else "ffmpeg",
            "pipeline": describe("file", have) if hw else None,
        },
        "rtsp_output": _encoder(have) if ok else None,
    }


def _encoder(have: set[str]) -> dict:
    """The rtsp:// output's H.264 encoder on this machine and its chain (``edgert info``)."""
    name, why = choose_encoder(have)
    return {
        "encoder": name,
        "why": why,
        "pipeline": None if name is None else encode_chain(name, 4000, 30) + " ! rtph264pay",
    }


# the rtsp:// output and clips (sinks/): H.264 encoders (in ELEMENTS), the hardware one first
NVENC_DEVICES = ("dev/nvhost-msenc", "dev/v4l2-nvenc")  # JetPack 4/5, JetPack 5.1+/6
INSTALL_ENCODER = (
    "install an H.264 encoder for GStreamer: on Debian or Ubuntu `apt install "
    "gstreamer1.0-plugins-ugly` (x264enc); on a Jetson JetPack's nvv4l2h264enc"
)


def choose_encoder(have: set, root: str | Path = "/") -> tuple:
    """(the encoder element, why): NVENC where the element exists and the board has the
    encoder's device (an Orin Nano has the element from JetPack but no NVENC), else x264, else
    OpenH264; (None, why) without any."""
    devices = [d for d in NVENC_DEVICES if (Path(root) / d).exists()]
    if "nvv4l2h264enc" in have and devices:
        return "nvv4l2h264enc", f"NVENC (/{devices[0]})"
    if "x264enc" in have:
        why = "x264 on the CPU" + (
            " (nvv4l2h264enc is there but this board has no NVENC)"
            if "nvv4l2h264enc" in have
            else ""
        )
        return "x264enc", why
    if "openh264enc" in have:
        return "openh264enc", "OpenH264 on the CPU"
    return None, INSTALL_ENCODER


def encode_chain(encoder: str, kbps: int, gop: int) -> str:
    """From raw BGR frames to H.264 RTP packets, with ``encoder``: a key frame every ``gop``
    frames, SPS/PPS with every key frame (a client may join at any one)."""
    if encoder == "nvv4l2h264enc":
        return (
            "nvvidconv ! video/x-raw(memory:NVMM),format=NV12 ! "
            f"nvv4l2h264enc bitrate={kbps * 1000} iframeinterval={gop} idrinterval={gop} "
            "insert-sps-pps=true preset-level=1 maxperf-enable=true ! h264parse"
        )
    if encoder == "x264enc":
        return (
            "videoconvert ! video/x-raw,format=I420 ! "
            f"x264enc tune=zerolatency speed-preset=ultrafast bitrate={kbps} key-int-max={gop} "
            "bframes=0 sliced-threads=false threads=1 ! video/x-h264,profile=baseline"
        )
    return (
        "videoconvert ! video/x-raw,format=I420 ! "
        f"openh264enc bitrate={kbps * 1000} gop-size={gop} ! h264parse"
    )
