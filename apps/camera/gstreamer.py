"""Frames through GStreamer (PyGObject's ``Gst`` and an ``appsink``, as JetPack's own Python and
DeepStream's Python apps have it): NVDEC through ``nvv4l2decoder`` on a Jetson, FFmpeg's decoders
(``avdec_h264``/``avdec_h265``) elsewhere, ``rtspsrc`` with a small jitter buffer.

The pipeline descriptions are pure functions of what the machine has (:func:`elements`), so they
are tested for a Jetson on any machine; :class:`GstConnection` is the thin part that runs one.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgert.runtime.errors import StreamLost

log = logging.getLogger(__name__)

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
    "appsink",
    "appsrc",  # the rtsp:// output (sinks/rtsp.py): its encoders and payloader
    "nvv4l2h264enc",
    "x264enc",
    "openh264enc",
    "rtph264pay",
)
BGR = "videoconvert ! capsfilter caps=video/x-raw,format=BGR"
BGRX = "capsfilter caps=video/x-raw,format=BGRx"  # what nvvidconv writes (see _to_bgr)
SINK_CAPS = "video/x-raw,format={ BGR, BGRx }"  # what the appsink takes; _frame gives BGR
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


class Demand:
    """Full frames on demand: a sink that shows the camera's pixels only while someone watches
    (the web viewer's video streams) holds it up while one does; the decoder gives full frames
    while it is up and frames at the model's size otherwise. Any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0

    @property
    def wanted(self) -> bool:
        return self._holders > 0

    def hold(self) -> None:
        with self._lock:
            self._holders += 1

    def release(self) -> None:
        with self._lock:
            self._holders = max(0, self._holders - 1)


@dataclass(frozen=True)
class Fit:
    """Frames scaled in the decoder to the size the model's preprocessing resizes them to (a
    camera run where no sink needs full frames): ``size(w, h)`` of a decoded frame -> (W, H), or
    None to keep it (it would not shrink); ``interpolation``: the preprocessing's; ``demand``: a
    :class:`Demand` whose holders get full frames while they hold it (None: never)."""

    size: object  # Callable[[int, int], tuple[int, int] | None]
    interpolation: str = "bilinear"
    demand: Demand | None = None


# the preprocessing's interpolation -> the scaler's closest method (videoscale's GstVideoScale
# method enum; nvvidconv's interpolation-method: 0 nearest, 1 bilinear, 2 5-tap, 4 smart)
_VIDEOSCALE = {"nearest": 0, "bilinear": 1, "linear": 4, "area": 4, "cubic": 8}
_NVVIDCONV = {"nearest": 0, "bilinear": 1, "linear": 4, "area": 4, "cubic": 2}


def _to_bgr(have: set[str], fit: Fit | None = None) -> str:
    """The end of a decode chain: BGR (or BGRx) frames, scaled when ``fit`` says so (the scaler
    named ``scale``; its output caps, the capsfilter ``fit``, are set once the decoded size is
    known: :meth:`GstConnection._fit_caps`)."""
    # nvvidconv takes NVMM (NVDEC's) and system memory alike, and converts on the VIC; the VIC
    # writes BGRx, not BGR: the appsink takes BGRx as it is, and the one copy out of GStreamer's
    # memory drops the fourth byte (a CPU videoconvert after it was a second full-frame pass)
    if hardware_decoder(have):
        if fit is None:
            return f"nvvidconv ! {BGRX}"
        method = _NVVIDCONV.get(fit.interpolation, 1)
        return (
            f"nvvidconv name=scale interpolation-method={method} ! "
            "capsfilter name=fit caps=video/x-raw,format=BGRx"
        )
    if fit is None or "videoscale" not in have:
        return BGR
    # scaled before the colour conversion: it then converts the model's pixels, not the camera's
    method = _VIDEOSCALE.get(fit.interpolation, 1)
    return f"videoscale name=scale method={method} ! capsfilter name=fit caps=video/x-raw ! {BGR}"


def decode_chain(
    codec: str, have: set[str], tap: bool = False, fit: Fit | None = None
) -> tuple[str, str]:
    """(the description from ``codec``'s RTP packets to BGR frames, the decoder it uses).
    ``codec``: the RTP encoding name (H264, H265; anything else goes to decodebin). ``tap``: the
    parsed access units also go, before decoding, to an appsink named ``packets`` (clips keep
    the camera's own video: :class:`PacketTap`); ``fit``: frames scaled to the model's size."""
    codec = codec.lower()
    if codec in ("h264", "h265") and {f"rtp{codec}depay", f"{codec}parse"} <= have:
        head = f"rtp{codec}depay ! {codec}parse ! "
        if tap:  # SPS/PPS (VPS) before every key frame: a clip may start at any of them
            head = (
                f"rtp{codec}depay ! {codec}parse config-interval=-1 ! "
                f"video/x-{codec},stream-format=byte-stream,alignment=au ! tee name=t ! "
                "queue ! appsink name=packets sync=false emit-signals=true t. ! queue ! "
            )
        if hardware_decoder(have):
            return head + f"nvv4l2decoder ! {_to_bgr(have, fit)}", "nvv4l2decoder"
        if f"avdec_{codec}" in have:  # frame threading would hold frames back: slices only
            return (
                head + f"avdec_{codec} thread-type=slice ! {_to_bgr(have, fit)}",
                f"avdec_{codec}",
            )
    return f"decodebin ! {_to_bgr(have, fit)}", "decodebin"


def appsink(live: bool) -> str:
    """A live source keeps only the newest frame (older ones are stale); a file loses none."""
    if live:
        return "appsink name=sink sync=false max-buffers=1 drop=true"
    return "appsink name=sink sync=false max-buffers=4 drop=false"


def _caps_size(caps) -> tuple | None:
    """(width, height) of a parser's caps, None when it does not say."""
    if caps is None or caps.get_size() == 0:
        return None
    s = caps.get_structure(0)
    ok_w, w = s.get_int("width")
    ok_h, h = s.get_int("height")
    return (w, h) if ok_w and ok_h else None


def bgr_copy(data, w: int, h: int, fmt: str) -> np.ndarray:
    """A BGR frame (its own memory) from a mapped BGR or BGRx buffer of ``w`` x ``h``: rows are
    padded (BGR to 4 bytes); BGRx loses its fourth byte in the same single copy."""
    import cv2

    stride = len(data) // h
    rows = np.frombuffer(data, np.uint8, count=stride * h).reshape(h, stride)
    if fmt == "BGRx":
        return cv2.cvtColor(rows[:, : w * 4].reshape(h, w, 4), cv2.COLOR_BGRA2BGR)
    return rows[:, : w * 3].reshape(h, w, 3).copy()


class PacketTap:
    """A stream's encoded video as it arrives, before decoding: H.264 or H.265 access units in
    byte-stream form, parameter sets before every key frame, each ``(t_pts, t_dts, key, bytes,
    connection)`` with its times on the frames' clock (the capture time a frame of it gets) and
    the number of the segment it came in: a connection, or a picture size within one (a camera
    that reboots may come back with other parameter sets, one set to another size may change it
    mid-stream: what was kept of the one before must not run on into it). What clips keep
    of an RTSP camera: its own packets, never decoded and encoded again, as NVRs record. Filled
    on GStreamer's streaming thread, drained by the output thread; bounded: when nobody drains,
    the oldest go (``lost`` counts them)."""

    def __init__(self, maxlen: int = 4096) -> None:
        self.codec: str | None = None  # h264, h265: set when the stream's pad appears
        self.connection = 0  # counted up by each connection that feeds it
        self.lost = 0
        self._q: collections.deque = collections.deque()
        self._maxlen = maxlen
        self._lock = threading.Lock()

    def put(self, packet: tuple) -> None:
        with self._lock:
            if len(self._q) >= self._maxlen:
                self._q.popleft()
                self.lost += 1
            self._q.append(packet)

    def drain(self) -> list:
        with self._lock:
            out = list(self._q)
            self._q.clear()
        return out


@dataclass(frozen=True)
class Launch:
    """A pipeline to run: its first element, made by name with its properties set as values (a
    URI, a path or a device a user gave is a property value, never pipeline syntax: a quote in
    it cannot add elements), then ``rest``, a description edgert writes itself from fixed
    strings and numbers ("" for ``rtspsrc``, whose decode chain follows its stream's codec)."""

    element: str
    props: tuple = ()  # ((name, value), ...)
    rest: str = ""

    def text(self) -> str:
        """As ``gst-launch-1.0`` would write it (``edgert info``, logs); never parsed."""
        props = "".join(f" {k}={'***' if k == 'user-pw' else _shown(v)}" for k, v in self.props)
        return f"{self.element}{props}" + (f" ! {self.rest}" if self.rest else "")


def _named_values(spec) -> bool:
    """Whether a property takes one of GLib's named flags or enum values."""
    from gi.repository import GObject

    return GObject.type_is_a(spec.value_type, GObject.TYPE_FLAGS) or GObject.type_is_a(
        spec.value_type, GObject.TYPE_ENUM
    )


def _shown(value) -> str:
    if isinstance(value, str) and not value.replace("-", "").replace("_", "").isalnum():
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def rtsp_source(url: str, latency_ms: int, transport: str, timeout_s: float) -> Launch:
    """``rtspsrc`` for ``url``: ``latency_ms`` of jitter buffer (GStreamer's default is 2000),
    ``transport`` tcp, udp or auto (UDP, then TCP)."""
    from edgert.apps.uris import without_credentials

    us = int(timeout_s * 1e6)
    try:  # decoded: "#", "/" or "@" as they are
        location, user, password = without_credentials(url)
    except ValueError:  # not a URI (open_source refuses those first): a location as given
        location, user, password = url, None, None
    props = [("location", location), ("latency", int(latency_ms))]
    if user is not None:
        props += [("user-id", user), ("user-pw", password or "")]
    if transport in ("tcp", "udp"):
        props.append(("protocols", transport))
    props += [("tcp-timeout", us), ("timeout", us)]
    return Launch("rtspsrc", tuple(props))


def file_pipeline(path: str, have: set[str], fit: Fit | None = None) -> Launch:
    return Launch(
        "filesrc",
        (("location", path),),
        f"decodebin name=head ! {_to_bgr(have, fit)} ! {appsink(False)}",
    )


def csi_pipeline(sensor: int, width: int, height: int, fps: int) -> Launch:
    return Launch(
        "nvarguscamerasrc",
        (("sensor-id", int(sensor)),),
        f'capsfilter name=head caps="video/x-raw(memory:NVMM),width={int(width)},'
        f'height={int(height)},framerate={int(fps)}/1" ! nvvidconv ! '
        f"{BGRX} ! {appsink(True)}",
    )


def v4l2_pipeline(device: str, width, height, fps, codec) -> Launch:
    caps = ",".join(
        [f"width={int(width)}"] * bool(width)
        + [f"height={int(height)}"] * bool(height)
        + [f"framerate={int(fps)}/1"] * bool(fps)
    )
    if codec == "mjpeg":
        head = "capsfilter name=head caps=image/jpeg" + ("," + caps if caps else "") + " ! jpegdec"
    else:
        head = (
            "capsfilter name=head caps=video/x-raw"
            + (",format=YUY2" if codec == "yuyv" else "")
            + ("," + caps if caps else "")
        )
    return Launch("v4l2src", (("device", device),), f"{head} ! {BGR} ! {appsink(True)}")


def describe(kind: str, have: set[str], latency_ms: int = 100, transport: str = "auto") -> str:
    """The pipeline edgert would run here for ``kind`` (rtsp-h264, rtsp-h265, file), for
    ``edgert info``."""
    if kind.startswith("rtsp"):
        chain, _ = decode_chain(kind.split("-")[1], have)
        head = rtsp_source("rtsp://…", latency_ms, transport, 5.0).text()
        return f"{head} ! {chain} ! {appsink(True)}"
    return file_pipeline("…", have).text()


class GstConnection:
    """One running pipeline ending in an appsink, built from a :class:`Launch`: its first element
    made by name with its properties set as values, then the rest of the description. For RTSP
    (``rtspsrc`` alone) the video pad is linked, once it appears, to the decode chain of its
    codec (:func:`decode_chain`), and other pads (audio) to a fakesink.

    :meth:`close` takes the pipeline to NULL and lets go of every reference to it (the pad-added
    handler too, which held this object from inside GLib): a failed attempt or a dropped stream
    leaves no socket, poll descriptor or thread behind, however often a camera is retried."""

    def __init__(
        self,
        launch: Launch,
        live: bool,
        have: set[str],
        timeout_s: float,
        cancel: threading.Event,
        tap: PacketTap | None = None,
        fit: Fit | None = None,
    ) -> None:
        Gst = gst()
        self.Gst, self.live, self.have, self.tap, self.fit = Gst, live, have, tap, fit
        self._probe: tuple | None = None  # (the scaler's sink pad, the probe that fits it)
        self._fitted: tuple | None = None  # ((W, H) the decoder scales to, (h, w) it came from)
        self._fit_el: tuple | None = None  # (the capsfilter "fit", its caps without a size)
        self._full = False  # the capsfilter lets full frames through (a Demand held)
        self._fit_lock = threading.Lock()  # the streaming thread fits, the reader re-fits
        self.scaled_from: tuple | None = None  # the last frame's, None: it came unscaled
        self.decoder: str | None = None
        self.pipeline = None
        self._src = None
        self._handler: int | None = None
        self._tapped: tuple | None = None  # (the packets appsink, its new-sample handler)
        self._connection = 0  # this connection's number on the tap
        self._tap_size = None  # the picture size its parser last said
        try:
            self._build(launch)
        except BaseException:
            self.close()
            raise
        self.bus = self.pipeline.get_bus()
        self.media_time: float | None = None
        self._linked = False
        self._error: str | None = None
        self._problem: StreamLost | None = None
        self._drained = time.monotonic()
        try:
            self.pipeline.set_state(Gst.State.PLAYING)
            self.first = self.read(timeout_s, cancel, connecting=True)
        except BaseException:
            self.close()
            raise

    def _build(self, launch: Launch) -> None:
        Gst = self.Gst
        if launch.rest:  # ours: fixed strings and numbers, its first element named "head"
            try:
                self.pipeline = Gst.parse_launch(launch.rest)
            except Exception as exc:  # noqa: BLE001 - GLib.Error: an element this machine lacks
                raise StreamLost(
                    f"GStreamer cannot build {launch.rest.split()[0]}: {exc}"
                ) from None
        else:
            self.pipeline = Gst.Pipeline.new(None)
        src = Gst.ElementFactory.make(launch.element, "src")
        if src is None:
            raise StreamLost(f"GStreamer has no {launch.element} element")
        self.pipeline.add(src)
        self._src = src
        for name, value in launch.props:
            spec = src.find_property(name)
            if spec is None:
                raise StreamLost(f"{launch.element} has no property {name}")
            try:
                if _named_values(spec):  # tcp, udp: GStreamer's own parser for the names
                    Gst.util_set_object_arg(src, name, str(value))
                else:
                    src.set_property(name, value)
            except (TypeError, ValueError, OverflowError) as exc:
                raise StreamLost(f"could not set {launch.element}'s {name}: {exc}") from None
        if launch.rest:
            head = self.pipeline.get_by_name("head")
            if head is None or not src.link(head):
                raise StreamLost(
                    f"GStreamer cannot link {launch.element} to {launch.rest.split()[0]}"
                )
            self.sink = self.pipeline.get_by_name("sink")
            self.decoder = "decodebin" if "decodebin" in launch.rest else launch.element
            self._watch_fit(self.pipeline)
        else:  # RTSP: the chain is chosen by the stream's codec
            self.sink = Gst.parse_launch(appsink(self.live))
            self.pipeline.add(self.sink)
            self._handler = src.connect("pad-added", self._pad_added)
        self.sink.set_property("caps", Gst.Caps.from_string(SINK_CAPS))

    def _pad_added(self, _src, pad) -> None:
        Gst = self.Gst
        pipeline = self.pipeline
        if pipeline is None:  # closed meanwhile
            return
        caps = pad.get_current_caps() or pad.query_caps(None)
        s = caps.get_structure(0)
        media = s.get_string("media") if s.has_field("media") else ""
        if self._linked or (media and media != "video"):
            sink = Gst.ElementFactory.make("fakesink")
            pipeline.add(sink)
            sink.sync_state_with_parent()
            pad.link(sink.get_static_pad("sink"))
            return
        codec = s.get_string("encoding-name") if s.has_field("encoding-name") else ""
        chain, self.decoder = decode_chain(codec or "", self.have, self.tap is not None, self.fit)
        log.debug("RTSP %s stream: %s", codec, chain)
        try:
            bin_ = Gst.parse_bin_from_description(chain, True)
        except Exception as exc:  # noqa: BLE001 - GLib.Error: reported by read()
            self._error = f"cannot build the decoder for {codec}: {exc}"
            return
        packets = bin_.get_by_name("packets")
        if packets is not None:
            self.tap.codec = codec.lower()
            self.tap.connection += 1
            self._connection = self.tap.connection
            self._tap_size = None
            self._tapped = (packets, packets.connect("new-sample", self._packet))
        self._watch_fit(bin_)
        pipeline.add(bin_)
        bin_.link(self.sink)
        bin_.sync_state_with_parent()
        pad.link(bin_.get_static_pad("sink"))
        self._linked = True

    def _watch_fit(self, where) -> None:
        """With a ``fit``: when the decoded size is known (a CAPS event reaching the scaler) the
        capsfilter ``fit`` after it is given the model's size for it, before the scaler asks what
        it may output; again when a camera changes resolution."""
        if self.fit is None:
            return
        scale, fit = where.get_by_name("scale"), where.get_by_name("fit")
        if scale is None or fit is None:
            return
        Gst = self.Gst
        base = fit.get_property("caps").to_string()  # video/x-raw[,format=BGRx]
        pad = scale.get_static_pad("sink")

        def on_event(_pad, info):
            event = info.get_event()
            if event is not None and event.type == Gst.EventType.CAPS:
                self._fit_caps(event.parse_caps(), fit, base)
            return Gst.PadProbeReturn.OK

        self._probe = (pad, pad.add_probe(Gst.PadProbeType.EVENT_DOWNSTREAM, on_event))

    def _fit_caps(self, caps, fit, base: str) -> None:
        size = _caps_size(caps)
        if size is None:
            return
        w, h = size
        target = self.fit.size(w, h)
        with self._fit_lock:
            # only the current size's: a camera that switches to a mode of the model's size sends
            # its frames unscaled, and they must not read as scaled from the mode before. Kept
            # while full frames are let through: a frame is scaled when it has the model's size
            self._fitted = None if target is None else (tuple(target), (h, w))
            self._fit_el = (fit, base)
            self._set_fit()

    def _set_fit(self) -> None:
        """The capsfilter's caps: the model's size, or none (full frames) while the demand is
        held; videoscale and nvvidconv renegotiate with the next frame (under ``_fit_lock``)."""
        fit, base = self._fit_el
        text = base
        if self._fitted is not None and not self._full:
            (tw, th), _ = self._fitted
            text = f"{base},width={tw},height={th},pixel-aspect-ratio=1/1"
        log.debug("decoder scale: %s", text)
        fit.set_property("caps", self.Gst.Caps.from_string(text))

    def _follow_demand(self) -> None:
        """Full frames while the fit's demand is held, the model's size again when it is not:
        checked with every frame read (the change reaches the appsink a few frames later)."""
        demand = self.fit.demand if self.fit is not None else None
        if demand is None or demand.wanted == self._full:
            return
        with self._fit_lock:
            self._full = demand.wanted
            if self._fit_el is not None:
                self._set_fit()

    def _packet(self, sink):
        """One access unit for the tap (GStreamer's streaming thread)."""
        Gst = self.Gst
        sample = sink.emit("pull-sample")
        if sample is not None and self.tap is not None:
            buf = sample.get_buffer()
            pts = self._stamp(buf.pts)
            dts = pts if buf.dts == Gst.CLOCK_TIME_NONE else self._stamp(buf.dts)
            key = not buf.has_flags(Gst.BufferFlags.DELTA_UNIT)
            data = buf.extract_dup(0, buf.get_size())
            size = _caps_size(sample.get_caps())
            if None not in (size, self._tap_size) and size != self._tap_size:
                self.tap.connection += 1  # the picture's size changed within the stream: a new
                self._connection = self.tap.connection  # segment (one size per clip)
            self._tap_size = size or self._tap_size
            self.tap.put((pts, dts, key, data, self._connection))
        return Gst.FlowReturn.OK

    def _stamp(self, pts: int) -> float:
        """A live buffer's time on CLOCK_MONOTONIC (running time + base time on the pipeline's
        system clock), as our capture times; now where that cannot be known."""
        now = time.monotonic()
        if pts == self.Gst.CLOCK_TIME_NONE:
            return now
        clock = self.pipeline.get_clock() if self.pipeline is not None else None
        if clock is not None and isinstance(clock, self.Gst.SystemClock):
            stamped = (self.pipeline.get_base_time() + pts) / 1e9
            if now - 10.0 < stamped <= now:
                return stamped
        return now

    def _bus_problem(self) -> StreamLost | None:
        """The first error or end of stream on the bus. Every message is taken off it (no main
        loop drains this bus: left there, messages would pile up over a long run)."""
        Gst = self.Gst
        while self._problem is None:
            msg = self.bus.pop()
            if msg is None:
                break
            if msg.type == Gst.MessageType.EOS:
                self._problem = StreamLost("the stream ended (end of stream)")
            elif msg.type == Gst.MessageType.ERROR:
                err, _debug = msg.parse_error()
                self._problem = StreamLost(err.message.rstrip("."))
        if self._error:
            return StreamLost(self._error)
        return self._problem

    def read(self, timeout_s: float, cancel: threading.Event, connecting: bool = False):
        """The next (frame, capture time); None at the end of a file; StreamLost when the stream ends,
        fails, or sends nothing for ``timeout_s`` (a stall)."""
        Gst = self.Gst
        deadline = time.monotonic() + timeout_s
        while True:
            sample = self.sink.try_pull_sample(Gst.SECOND // 10)
            if sample is not None:
                if time.monotonic() - self._drained > 1.0:  # keep the bus empty while frames flow
                    self._drained = time.monotonic()
                    self._bus_problem()
                return self._frame(sample)
            problem = self._bus_problem()
            if problem is not None:
                if not self.live and str(problem).endswith("(end of stream)"):
                    return None
                raise problem
            if self.sink.is_eos():
                if not self.live:
                    return None
                raise StreamLost("the stream ended (end of stream)")
            if cancel.is_set():
                raise StreamLost("stopped")
            if time.monotonic() >= deadline:
                if connecting:
                    raise StreamLost("no frame yet")
                raise StreamLost(f"stalled: no frame for {timeout_s:g} s", stalled=True)

    def _frame(self, sample):
        Gst = self.Gst
        buf = sample.get_buffer()
        s = sample.get_caps().get_structure(0)
        w, h = s.get_value("width"), s.get_value("height")
        ok, info = buf.map(Gst.MapFlags.READ)
        if not ok:
            raise StreamLost("a frame could not be read from GStreamer's memory")
        try:
            frame = bgr_copy(info.data, w, h, s.get_value("format"))
        finally:
            buf.unmap(info)
        fitted = self._fitted
        self.scaled_from = fitted[1] if fitted is not None and fitted[0] == (w, h) else None
        self._follow_demand()
        if not self.live:
            if buf.pts != Gst.CLOCK_TIME_NONE:
                self.media_time = buf.pts / 1e9
            return frame, time.monotonic()
        return frame, self._stamp(buf.pts)

    def fps(self) -> float | None:
        pad = self.sink.get_static_pad("sink")
        caps = pad.get_current_caps() if pad is not None else None
        if caps is None:
            return None
        ok, num, den = caps.get_structure(0).get_fraction("framerate")
        return num / den if ok and num > 0 and den > 0 else None

    def rewind(self) -> bool:
        Gst = self.Gst
        return self.pipeline.seek_simple(
            Gst.Format.TIME, Gst.SeekFlags.FLUSH | Gst.SeekFlags.KEY_UNIT, 0
        )

    def close(self) -> None:
        """NULL, then every reference dropped: the pipeline, its bus, sockets and threads go."""
        pipeline, self.pipeline = self.pipeline, None
        if pipeline is None:
            return
        if self._handler is not None and self._src is not None:
            self._src.disconnect(self._handler)
        self._handler = None
        if self._tapped is not None:
            self._tapped[0].disconnect(self._tapped[1])
            self._tapped = None
        if self._probe is not None:  # its closure holds this object
            self._probe[0].remove_probe(self._probe[1])
            self._probe = None
        self._fit_el = None
        pipeline.set_state(self.Gst.State.NULL)
        pipeline.get_state(self.Gst.CLOCK_TIME_NONE)  # the state change done (threads joined)
        self._src = self.sink = self.bus = None


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
