"""``rtsp://[USER:PASS@][HOST][:PORT]/PATH``: the annotated stream served over RTSP from edgert's own
process, by GStreamer's RTSP server (gst-rtsp-server through PyGObject), for a video wall, an NVR
or VLC. One mount per stream (``PATH/0``, ``PATH/1``, ...; a single stream at ``PATH``), or the
streams tiled into one picture at ``PATH`` with ``--mosaic``.

H.264, encoded where the machine can: NVENC through ``nvv4l2h264enc`` on a Jetson that has the
encoder (AGX/NX Orin, Xavier, Nano; not the Orin Nano, which has none), else x264 tuned for low
latency (``zerolatency``, ``ultrafast``, no B-frames), else OpenH264 (:func:`choose_encoder`,
shown by ``edgert info``). Each mount's media is shared: one encoder however many clients watch,
and none while nobody does (frames are not encoded for an empty room). A frame is handed to the
encoder without waiting: when the encoder or the network falls behind, the oldest frame queued
is dropped (a leaky queue), so a slow or vanished client never stalls the pipeline; the server
itself drops a TCP client's backlog past its limit.

Bound to 127.0.0.1 unless a host is given (``0.0.0.0`` for every interface); 8554 unless a port
is. ``USER:PASS@`` turns on the server's basic authentication for every mount (write the
password as ``${EDGERT_NAME}``, an environment variable, to keep it out of the command line).
Query options: ``bitrate=KBPS`` (default 4000), ``keyframe=S`` (a key frame every S seconds, default 1: a
client that joins starts within a second), ``clean=1`` (frames without the overlay).
"""

from __future__ import annotations

import re
import threading
from urllib.parse import parse_qs

from edgert.apps.camera.media import INSTALL_ENCODER, choose_encoder, elements, encode_chain
from edgert.apps.uris import credentials, redact, show_host, split, warn_if_open
from edgert.runtime.errors import OutputError

from .base import Sink, SinkContext, stream_of
from .rtsp_front import Front

DEFAULT_PORT = 8554
CLIENT_THREADS = 4  # the server's threads for its clients (one client never holds up another)
INSTALL_SERVER = (
    "install GStreamer's RTSP server and its Python bindings: on Debian, Ubuntu or JetPack "
    "`apt install python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-rtsp`"
)


_MOUNT = re.compile(r"(/[A-Za-z0-9_-]+)+")


def options(uri: str) -> dict:
    """The URI's parts: host, port, path, user, password, kbps, keyframe_s, clean; OutputError in
    one sentence for what cannot be. The credentials end at the last "@" and are percent-decoded
    (RFC 3986): a password may hold "#", "/", "?" or "@" as it is, or percent-encoded."""
    try:
        parts = split(uri, need_host=False)
        user, password = credentials(parts)
    except ValueError as exc:
        raise OutputError(f"rtsp:// output: {exc}") from None
    where, _, query_text = parts.path.partition("?")
    for mark, what in (("#", "a '#' fragment"), (";", "';' parameters")):
        if mark in where or mark in query_text:
            raise OutputError(
                f"{redact(uri)}: {what} cannot be part of the mount (a password holding it "
                "goes before the '@')"
            )
    path = where.rstrip("/") or "/live"
    if not _MOUNT.fullmatch(path):
        raise OutputError(
            f"{redact(uri)}: the path must be ASCII letters, digits, '-' and '_' (e.g. /live)"
        )
    given = parse_qs(query_text)
    twice = [k for k, v in given.items() if len(v) > 1]
    if twice:
        raise OutputError(f"{redact(uri)}: {twice[0]}= is given twice; give it once")
    query = {k: v[-1] for k, v in given.items()}
    unknown = set(query) - {"bitrate", "keyframe", "clean"}
    if unknown:
        raise OutputError(
            f"{redact(uri)}: unknown option {sorted(unknown)[0]!r} (bitrate, keyframe, clean)"
        )
    try:
        kbps = int(query.get("bitrate", 4000))
        keyframe = float(query.get("keyframe", 1.0))
    except ValueError:
        raise OutputError(
            f"{redact(uri)}: bitrate is kilobits a second and keyframe seconds, both numbers"
        ) from None
    if not (100 <= kbps <= 100_000 and 0.1 <= keyframe <= 60):
        raise OutputError(
            f"{redact(uri)}: bitrate must be 100 to 100000 kbit/s and keyframe 0.1 to 60 s"
        )
    if user is not None and not password:
        raise OutputError(f"{redact(uri)}: give a password with the user (USER:PASS@)")
    return {
        "host": parts.host or "127.0.0.1",
        "port": DEFAULT_PORT if parts.port is None else parts.port,
        "path": path,
        "user": user,
        "password": password,
        "kbps": kbps,
        "keyframe_s": keyframe,
        "clean": query.get("clean", "0") in ("1", "true", "yes"),
    }


def address(uri: str) -> tuple[str, int]:
    """(host, port) the re-stream ``uri`` listens on (the table's ``listens``)."""
    o = options(uri)
    return o["host"], o["port"]


def _rtsp_server():
    from edgert.apps.camera.media import gst

    try:
        Gst = gst()
        import gi

        gi.require_version("GstRtspServer", "1.0")
        from gi.repository import GLib, GstRtspServer
    except (ImportError, ValueError) as exc:
        raise OutputError(
            f"the rtsp:// output needs GStreamer's RTSP server: {INSTALL_SERVER}"
        ) from exc
    return Gst, GLib, GstRtspServer


def check(uri: str, _options=None) -> None:
    options(uri)
    _rtsp_server()
    if choose_encoder(elements())[0] is None:
        raise OutputError(f"the rtsp:// output needs an H.264 encoder: {INSTALL_ENCODER}")


class _Mount:
    """One mount's media: its appsrc while a client watches, the frame size it was given."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.appsrc = None
        self.size: tuple | None = None
        self.sent = 0
        self.dropped = 0


def _launch(encoder, kbps, gop: int) -> str:
    """A mount's pipeline: the frames pushed into appsrc (the newest kept), encoded, payloaded."""
    return (
        "( appsrc name=src is-live=true format=time do-timestamp=true block=false "
        "max-bytes=0 ! queue leaky=downstream max-size-buffers=1 "
        f"max-size-bytes=0 max-size-time=0 ! {encode_chain(encoder, kbps, gop)} ! "
        "rtph264pay name=pay0 pt=96 config-interval=-1 )"
    )


def _basic_auth(RS, server, o: dict):
    """With a user in the URI: basic authentication on ``server`` and the permissions a mount's
    factory needs for it (a viewer may access and construct the media); else None."""
    if o["user"] is None:
        return None
    auth = RS.RTSPAuth()
    token = RS.RTSPToken()
    token.set_string("media.factory.role", "viewer")
    auth.add_basic(RS.RTSPAuth.make_basic(o["user"], o["password"]), token)
    server.set_auth(auth)
    permissions = RS.RTSPPermissions()
    permissions.add_permission_for_role("viewer", "media.factory.access", True)
    permissions.add_permission_for_role("viewer", "media.factory.construct", True)
    return permissions


class RtspOutput(Sink):
    takes_frames = True

    def __init__(self, uri: str, ctx: SinkContext) -> None:
        self.uri = uri
        o = options(uri)
        self.o = o
        self.draws = not o["clean"]
        self.Gst, _, RS = _rtsp_server()
        self.encoder, self.encoder_why = choose_encoder(elements())
        if self.encoder is None:
            raise OutputError(f"the rtsp:// output needs an H.264 encoder: {INSTALL_ENCODER}")
        self.fps = ctx.fps or 30.0
        streams = len(ctx.streams)
        mosaic = bool(getattr(ctx.options, "mosaic", False)) and streams > 1
        self.mosaic = None
        if mosaic:
            from .mosaic import MosaicOutput

            self.mosaic = MosaicOutput(_Forward(self), streams)
        paths = (
            [o["path"]] if streams == 1 or mosaic else [f"{o['path']}/{i}" for i in range(streams)]
        )
        self.mounts = [_Mount(p) for p in paths]
        self._lock = threading.Lock()
        server = RS.RTSPServer()
        server.get_thread_pool().set_max_threads(CLIENT_THREADS)
        gop = max(1, round(o["keyframe_s"] * self.fps))
        launch = _launch(self.encoder, o["kbps"], gop)
        permissions = _basic_auth(RS, server, o)
        table = server.get_mount_points()
        for mount in self.mounts:
            factory = RS.RTSPMediaFactory()
            factory.set_launch(launch)
            factory.set_shared(True)  # one encoder for every client of the mount
            if permissions is not None:
                factory.set_permissions(permissions)
            factory.connect("media-configure", self._configure, mount)
            table.add_factory(mount.path, factory)
        server.connect("client-connected", self._client)
        self._medias: dict = {}  # mount path -> its shared media's payloader, while prepared
        self.server = server
        try:
            self.front = Front(o["host"], o["port"], self._take)
        except OSError as exc:
            raise OutputError(
                f"rtsp:// output: cannot listen on {show_host(o['host'], o['port'])} "
                f"({exc.strerror or exc}: in use, or not an address of this machine)"
            ) from None
        warn_if_open("--output rtsp://", o["host"], self.front.port, o["user"] is not None)
        self.clients_served = 0
        host = o["host"] if o["host"] not in ("0.0.0.0", "::") else "HOST"
        self.urls = [f"rtsp://{host}:{o['port']}{m.path}" for m in self.mounts]
        ctx.say(
            f"rtsp re-stream: {', '.join(self.urls)} ({self.encoder_why}, {o['kbps']} kbit/s, "
            f"a key frame every {o['keyframe_s']:g} s"
            + (", basic authentication" if o["user"] else "")
            + ")"
        )

    def _take(self, conn, address) -> None:
        """The server's end of a client's pair (rtsp_front.py): the server serves it from here,
        as the client at ADDRESS, every request checked on its way through the front."""
        from gi.repository import Gio

        gsock = Gio.Socket.new_from_fd(conn.detach())
        if not self.server.transfer_connection(gsock, address[0], address[1], None):
            gsock.close()

    # the server's thread: a client, a media made for a mount (its first client), its end
    def _client(self, _server, client) -> None:
        with self._lock:
            self.clients_served += 1
        client.connect("play-request", self._play)

    def _play(self, _client, _ctx) -> None:
        """A client starts playing: the encoders send a key frame now, so it starts clean at
        once instead of decoding broken frames until the next one (as NVRs and cameras do)."""
        Gst = self.Gst
        with self._lock:
            pays = list(self._medias.values())
        for pay in pays:
            event = Gst.Event.new_custom(
                Gst.EventType.CUSTOM_UPSTREAM,
                Gst.Structure.new_from_string("GstForceKeyUnit, all-headers=(boolean)true"),
            )
            pad = pay.get_static_pad("sink")
            if pad is not None:
                pad.push_event(event)

    def _configure(self, _factory, media, mount: _Mount) -> None:
        appsrc = media.get_element().get_by_name("src")

        media.connect("unprepared", lambda _m: self._gone(mount, appsrc))
        pay = media.get_element().get_by_name("pay0")
        with self._lock:
            self._medias[mount.path] = pay
            if mount.size is not None:
                appsrc.set_property("caps", self._caps(*mount.size))
            mount.appsrc = appsrc

    def _gone(self, mount: _Mount, appsrc) -> None:
        with self._lock:
            if mount.appsrc is appsrc:
                mount.appsrc = None
                self._medias.pop(mount.path, None)

    def _caps(self, width: int, height: int):
        num = max(1, round(self.fps * 1000))
        return self.Gst.Caps.from_string(
            f"video/x-raw,format=BGR,width={width},height={height},framerate={num}/1000"
        )

    def write(self, frame, image, record: dict) -> None:
        if self.mosaic is not None:
            self.mosaic.write(frame, image, record)
            return
        self._push(self.mounts[stream_of(frame) if len(self.mounts) > 1 else 0], image)

    def _push(self, mount: _Mount, image) -> None:
        h, w = image.shape[:2]
        with self._lock:
            appsrc = mount.appsrc
            if mount.size != (w, h):
                mount.size = (w, h)
                if appsrc is not None:
                    appsrc.set_property("caps", self._caps(w, h))
            if appsrc is None:
                return  # nobody watches: nothing is encoded
        data = image.tobytes()
        buf = self.Gst.Buffer.new_wrapped(data)
        if appsrc.emit("push-buffer", buf) == self.Gst.FlowReturn.OK:
            mount.sent += 1
        else:
            mount.dropped += 1

    def close(self) -> None:
        if self.mosaic is not None:
            self.mosaic.target = _Forward(self)  # flush the last round here, not recursively
        self.front.close()  # no new clients
        with self._lock:
            for m in self.mounts:
                m.appsrc = None
        self._end_clients()

    def _end_clients(self) -> None:
        """Every client ended the way a client that hangs up is: its socket shut down, so that
        its own thread sees the end and closes it (removing a client from here while its thread
        reads a request left GLib asserting on a freed stream, thousands of lines on stderr);
        those still there after a moment are removed."""
        import contextlib
        import time

        _, _, RS = _rtsp_server()

        def shut(_server, client):
            conn = client.get_connection()
            with contextlib.suppress(Exception):  # noqa: BLE001 - one already gone
                conn.get_read_socket().shutdown(True, True)
            return RS.RTSPFilterResult.KEEP

        self.server.client_filter(shut)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and self.server.client_filter(
            lambda _s, _c: RS.RTSPFilterResult.REF
        ):
            time.sleep(0.05)
        self.server.client_filter(lambda _s, _c: self._remove())

    def _remove(self):
        _, _, RS = _rtsp_server()
        return RS.RTSPFilterResult.REMOVE

    def report(self):
        return {
            "uri": redact(self.uri),
            "urls": self.urls,
            "encoder": self.encoder,
            "encoder_why": self.encoder_why,
            "clients_served": self.clients_served,
            "frames_sent": sum(m.sent for m in self.mounts),
            "frames_dropped": sum(m.dropped for m in self.mounts),
        }


class _Forward(Sink):
    """The mosaic's target: its tiled picture goes to the one mount."""

    def __init__(self, out: RtspOutput) -> None:
        self.out = out

    def write(self, frame, image, record: dict) -> None:
        self.out._push(self.out.mounts[0], image)


def open_uri(uri: str, ctx: SinkContext) -> RtspOutput:
    return RtspOutput(uri, ctx)
