"""GStreamer in this process: PyGObject's ``Gst``, initialised once (after libgcc's unwinder is
loaded globally), and which of the elements edgert uses this machine has."""

from __future__ import annotations

import threading

INSTALL = (
    "install GStreamer's Python bindings: on Debian, Ubuntu or JetPack `apt install python3-gi "
    "gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0 gstreamer1.0-plugins-good "
    "gstreamer1.0-plugins-bad gstreamer1.0-libav`, then run edgert with the system Python or a "
    "venv made with --system-site-packages"
)
# the elements a pipeline may use; `edgert info` shows which exist
ELEMENTS = (
    "rtspsrc",
    "rtph264depay",
    "rtph265depay",
    "h264parse",
    "h265parse",
    "decodebin",
    "nvv4l2decoder",
    "nvvidconv",
    "nvarguscamerasrc",
    "avdec_h264",
    "avdec_h265",
    "v4l2src",
    "jpegdec",
    "videoconvert",
    "videoscale",
    "tee",  # tee and queue: the web viewer's full-picture branch (describe._view)
    "queue",
    "appsink",
    "appsrc",  # the rtsp:// output (sinks/rtsp.py): its encoders and payloader
    "nvv4l2h264enc",
    "x264enc",
    "openh264enc",
    "rtph264pay",
)

_state: dict = {}
_init_lock = threading.Lock()


def gst():
    """The ``Gst`` module, initialised once; ImportError with what to install when absent."""
    with _init_lock:
        if "Gst" in _state:
            return _state["Gst"]
        if "error" in _state:
            raise ImportError(_state["error"])
        _unwinder_first()
        try:
            import gi

            gi.require_version("Gst", "1.0")
            gi.require_version("GstApp", "1.0")
            from gi.repository import Gst, GstApp  # noqa: F401 - GstApp gives appsink its calls

            Gst.init(None)
        except (ImportError, ValueError) as exc:
            _state["error"] = f"GStreamer is not available to this Python ({exc})"
            raise ImportError(_state["error"]) from None
        _state["Gst"] = Gst
        return Gst


def _unwinder_first() -> None:
    """GIRepository opens libgstreamer with global symbols, and with it libunwind (Debian's and
    JetPack's builds link it for backtraces), whose ``_Unwind_*`` then take the place of libgcc's
    for every C++ library that throws later in this process (measured: PyTorch's JIT tracer aborts
    in torch.onnx.export after Gst.init). Loading libgcc_s globally first keeps its unwinder."""
    import contextlib
    import ctypes

    with contextlib.suppress(OSError):  # another C library (musl) or platform: nothing to keep
        ctypes.CDLL("libgcc_s.so.1", mode=ctypes.RTLD_GLOBAL)


def available() -> tuple[bool, str]:
    """(whether GStreamer can be used, its version or why not)."""
    try:
        return True, gst().version_string()
    except ImportError as exc:
        return False, str(exc)


def elements() -> set[str]:
    """The elements of :data:`ELEMENTS` this machine's GStreamer has (none without GStreamer)."""
    try:
        Gst = gst()
    except ImportError:
        return set()
    return {name for name in ELEMENTS if Gst.ElementFactory.find(name) is not None}


def hardware_decoder(have: set[str]) -> bool:
    """NVDEC through nvv4l2decoder, with nvvidconv to bring frames to system memory."""
    return {"nvv4l2decoder", "nvvidconv"} <= have
