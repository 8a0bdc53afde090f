"""Pipeline descriptions: pure functions of the elements a machine has (:func:`.load.elements`),
so a Jetson's (NVDEC, the VIC's ``nvvidconv``) are tested on any machine. Where the camera's URI,
path or device goes, it is a property value of the first element (:class:`Launch`), never
pipeline syntax."""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

from .load import hardware_decoder

BGR = "videoconvert ! capsfilter caps=video/x-raw,format=BGR"
BGRX = "capsfilter caps=video/x-raw,format=BGRx"  # what nvvidconv writes (see _to_bgr)
SINK_CAPS = "video/x-raw,format={ BGR, BGRx }"  # what the appsink takes; _frame gives BGR


class Demand:
    """Full pictures on demand, per stream: a sink that shows the camera's pixels only while
    someone watches (the web viewer's video streams) holds a stream's demand while one does;
    while it is held, that stream's full-picture branch gives the camera's frames at up to
    ``fps`` a second beside the frames at the model's size, and none while it is not. Any
    thread."""

    def __init__(self, fps: int = 10) -> None:
        self.fps = fps
        self._lock = threading.Lock()
        self._holders: dict[int, int] = {}

    def wanted(self, stream: int = 0) -> bool:
        return self._holders.get(stream, 0) > 0

    def hold(self, stream: int = 0) -> None:
        with self._lock:
            self._holders[stream] = self._holders.get(stream, 0) + 1

    def release(self, stream: int = 0) -> None:
        with self._lock:
            self._holders[stream] = max(0, self._holders.get(stream, 0) - 1)


class Views:
    """The full pictures a stream's branch gave, by PTS, until the next frame read takes them
    (the branch's streaming thread puts, the reader takes): only pictures ahead of the reader
    are kept, so GStreamer's own buffering bounds them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: collections.deque = collections.deque(maxlen=16)

    def put(self, pts: int, picture) -> None:
        with self._lock:
            self._kept.append((pts, picture))

    def take(self, pts: int):
        """The newest picture of ``pts`` or before, older ones let go: the frame's own when it
        came in time, else the one whose frame went by first (the model's branch is faster);
        None when there is none."""
        got = None
        with self._lock:
            while self._kept and self._kept[0][0] <= pts:
                got = self._kept.popleft()[1]
        return got

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()


def paced(due: float | None, t: float, period: float) -> tuple[bool, float | None]:
    """One step of a rate grid (the picture branch's, the web viewer's): (whether the frame of
    time ``t`` is taken, the next due time). Taken when nothing is due yet, from a quarter
    period before ``due`` (a camera's jitter, or a 25 fps camera's 0.08/0.12 s spacing at 10
    fps, does not lower the rate), or when time jumped back (a rewind); the grid then advances
    by one period, or starts again at ``t`` when ``t`` is off it (a late frame, a gap)."""
    if due is not None and due - period / 4 > t >= due - 2 * period:
        return False, due
    on_grid = due is not None and due - period / 4 <= t < due + 3 * period / 4
    return True, (due + period if on_grid else t + period)


@dataclass(frozen=True)
class Fit:
    """Frames scaled in the decoder to the size the model's preprocessing resizes them to (a
    camera run where no sink needs full frames): ``size(w, h)`` of a decoded frame -> (W, H), or
    None to keep it (it would not shrink); ``interpolation``: the preprocessing's; ``demand``: a
    :class:`Demand` whose holders get the full pictures of stream ``stream`` while they hold it
    (None: never)."""

    size: object  # Callable[[int, int], tuple[int, int] | None]
    interpolation: str = "bilinear"
    demand: Demand | None = None
    stream: int = 0  # the stream whose demand this source follows


# the preprocessing's interpolation -> the scaler's closest method (videoscale's GstVideoScale
# method enum; nvvidconv's interpolation-method: 0 nearest, 1 bilinear, 2 5-tap, 4 smart)
_VIDEOSCALE = {"nearest": 0, "bilinear": 1, "linear": 4, "area": 4, "cubic": 8}
_NVVIDCONV = {"nearest": 0, "bilinear": 1, "linear": 4, "area": 4, "cubic": 2}


VIEW_ELEMENTS = {"tee", "queue"}  # the full-picture branch's


def _to_bgr(have: set[str], fit: Fit | None = None) -> tuple[str, str]:
    """(the end of a decode chain, the full-picture branch to write after the description's
    last element, or ""). The end: BGR (or BGRx) frames, scaled when ``fit`` says so (the scaler
    named ``scale``; its output caps, the capsfilter ``fit``, are set once the decoded size is
    known: :meth:`GstConnection._fit_caps`); with a demand, the decoded frames are split first
    and the branch (:func:`_view`) takes the other side."""
    branch = _view(have, fit)
    split = "tee name=split ! queue max-size-buffers=2 ! " if branch else ""
    return split + _scaled(have, fit), branch


def _view(have: set[str], fit: Fit | None) -> str:
    """The full-picture branch from the ``split`` tee, for a :class:`Demand`: a queue named
    ``view`` whose input a probe thins to the viewer's rate by PTS, and drops whole while
    nobody watches (:meth:`GstConnection._thin`: nothing of the branch converts a frame then),
    the conversion to BGR (BGRx from the VIC), an appsink named ``full`` that never holds the
    decoder back (leaky queue, one buffer, no preroll). "" when there is no demand or no scaler
    (the frames come whole then)."""
    if fit is None or fit.demand is None or not VIEW_ELEMENTS.issubset(have):
        return ""
    if hardware_decoder(have):
        convert = f"nvvidconv ! {BGRX}"
    elif "videoscale" in have:
        convert = BGR
    else:
        return ""
    return (
        f" split. ! queue name=view leaky=downstream max-size-buffers=1 ! {convert} ! "
        "appsink name=full sync=false async=false max-buffers=1 drop=true emit-signals=true"
    )


def _scaled(have: set[str], fit: Fit | None) -> str:
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
    end = "".join(_to_bgr(have, fit))  # the bin's last element feeds the appsink outside it
    if codec in ("h264", "h265") and {f"rtp{codec}depay", f"{codec}parse"} <= have:
        head = f"rtp{codec}depay ! {codec}parse ! "
        if tap:  # SPS/PPS (VPS) before every key frame: a clip may start at any of them
            head = (
                f"rtp{codec}depay ! {codec}parse config-interval=-1 ! "
                f"video/x-{codec},stream-format=byte-stream,alignment=au ! tee name=t ! "
                "queue ! appsink name=packets sync=false emit-signals=true t. ! queue ! "
            )
        if hardware_decoder(have):
            return head + f"nvv4l2decoder ! {end}", "nvv4l2decoder"
        if f"avdec_{codec}" in have:  # frame threading would hold frames back: slices only
            return head + f"avdec_{codec} thread-type=slice ! {end}", f"avdec_{codec}"
    return f"decodebin ! {end}", "decodebin"


def appsink(live: bool) -> str:
    """A file loses none. A live source's appsink holds two frames at most (the oldest dropped
    beyond): the capture thread takes each at once, and one that arrives while it is busy (a
    decoder's burst after a key frame, a thread waiting for its turn) reaches the stream's own
    queue, whose drops are counted, instead of being dropped unseen here (measured: 8 streams of
    1080p on 2 cores lost 2-3 % of their frames at an appsink of one, none at two)."""
    if live:
        return "appsink name=sink sync=false max-buffers=2 drop=true"
    return "appsink name=sink sync=false max-buffers=4 drop=false"


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
    end, branch = _to_bgr(have, fit)
    return Launch(
        "filesrc",
        (("location", path),),
        f"decodebin name=head ! {end} ! {appsink(False)}{branch}",
    )


def csi_pipeline(
    sensor: int, width: int, height: int, fps: int, fit: Fit | None = None, have: set = frozenset()
) -> Launch:
    """A Jetson CSI sensor: its NVMM frames through the VIC (``nvvidconv``), which also scales
    them to the model's size when ``fit`` says so."""
    vic = {"nvv4l2decoder", "nvvidconv"} | set(have)  # a CSI sensor implies JetPack's elements
    end, branch = _to_bgr(vic, fit)
    return Launch(
        "nvarguscamerasrc",
        (("sensor-id", int(sensor)),),
        f'capsfilter name=head caps="video/x-raw(memory:NVMM),width={int(width)},'
        f'height={int(height)},framerate={int(fps)}/1" ! '
        f"{end} ! {appsink(True)}{branch}",
    )


def v4l2_pipeline(
    device: str, width, height, fps, codec, fit: Fit | None = None, have: set = frozenset()
) -> Launch:
    """A V4L2 (USB) camera: raw (YUY2) or MJPEG frames converted to BGR, and scaled to the
    model's size when ``fit`` says so (``videoscale`` before the conversion; ``nvvidconv`` on a
    Jetson)."""
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
    end, branch = _to_bgr(set(have), fit)
    return Launch("v4l2src", (("device", device),), f"{head} ! {end} ! {appsink(True)}{branch}")


def describe(kind: str, have: set[str], latency_ms: int = 100, transport: str = "auto") -> str:
    """The pipeline edgert would run here for ``kind`` (rtsp-h264, rtsp-h265, file), for
    ``edgert info``."""
    if kind.startswith("rtsp"):
        chain, _ = decode_chain(kind.split("-")[1], have)
        head = rtsp_source("rtsp://…", latency_ms, transport, 5.0).text()
        return f"{head} ! {chain} ! {appsink(True)}"
    return file_pipeline("…", have).text()
