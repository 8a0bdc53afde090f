"""The MJPEG web viewer: the page (``/``, a grid of the streams with their numbers, from
``viewer.html``), one MJPEG stream per camera stream (``/stream/<i>.mjpg``; ``/stream.mjpg`` is
stream 0), the live statistics (``/stats.json``, which the page polls), the last minutes of each
stream's numbers for the page's charts (``/history.json``: frame rate, latency, drops, power,
temperature, a sample a second), the recent events (``/events.json``) with the snapshots and clips
they name (``/media/NAME``: only files an event named that the folder's record says edgert wrote,
opened without following a link, streamed from the file with ``Range`` for players that seek,
at most MAX_DOWNLOADS at once, each dropped when it takes under MEDIA_MIN_RATE on average over a
stretch of MEDIA_GRACE_S), when the run has a store its history (``/history.js``, from
``viewer_history.js``, reading the store's ``/api/events``, ``/api/tracks/ID`` and the files its
rows name, ``/api/media/...``, sent the way ``/media/`` sends them), the running configuration
(``/config.js``, from ``viewer_config.js``, reading the run's ``GET /config``, which this port
answers as the --metrics port does, credentials redacted) and, when the run has telemetry,
``/metrics``, ``/live`` and ``/ready``. No framework or CDN: the page is its files here and
works offline on the device. It binds 127.0.0.1 unless told otherwise. The
pipeline only replaces the latest JPEG of a stream under a lock, so a slow or stalled client never
stalls it: each client is sent the newest frame when it is ready for one and skips the rest."""

from __future__ import annotations

import collections
import contextlib
import errno
import functools
import logging
import os
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from edgert.apps.telemetry.http import Handler as _Handler
from edgert.apps.telemetry.http import QuietServer as _QuietServer
from edgert.apps.telemetry.http import send, send_file
from edgert.apps.uris import redact, show_host, split, warn_if_open
from edgert.runtime import json_text
from edgert.runtime.errors import OutputError

from ..media import paced
from .base import Sink, SinkContext, grid_columns, stream_of
from .retention import recorded

log = logging.getLogger(__name__)
_HERE = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=None)
def _templates() -> tuple[str, str]:
    """The page and the tile, read once from the package's files."""
    return (
        (_HERE / "viewer.html").read_text(encoding="utf-8"),
        (_HERE / "viewer_tile.html").read_text(encoding="utf-8").strip(),
    )


# the page's scripts: its history (the store's /api routes) and its configuration (GET /config)
_SCRIPTS = {"/history.js": "viewer_history.js", "/config.js": "viewer_config.js"}


@functools.lru_cache(maxsize=None)
def _script(path: str) -> bytes:
    """One of the page's scripts (:data:`_SCRIPTS`), read once from the package's file."""
    return (_HERE / _SCRIPTS[path]).read_bytes()


def page(streams: int) -> str:
    """The viewer page: one tile per stream (video and its numbers) and the overall numbers."""
    template, tile = _templates()
    tiles = "".join(tile % {"i": i} for i in range(streams))
    return template % {"cols": grid_columns(streams), "tiles": tiles}


DEFAULT_FPS = 10  # a monitoring view's rate (?fps=N): each picture costs an overlay and a JPEG
HISTORY_S = 300  # the charts' span: five minutes, a sample a second
EVENTS_KEPT = 40
MEDIA_KEPT = 400  # the files events named that /media serves (the newest)
MAX_DOWNLOADS = 4  # /media answers at once (each streamed from the file, never read whole)
# a download that takes under this on average over a stretch of MEDIA_GRACE_S is dropped: its
# slot comes back
MEDIA_MIN_RATE = 64 << 10  # bytes a second (a 20 Mbit/s clip plays at 2.5 MB/s)
MEDIA_GRACE_S = 10.0
_EVENT_KEYS = (
    "event",
    "stream",
    "time",
    "t_video",
    "label",
    "track_id",
    "line",
    "direction",
    "zone",
    "reason",
    "secondary",  # a second stage's model (track_label) or each model's label so far
)
_MEDIA_TYPES = {".jpg": "image/jpeg", ".mp4": "video/mp4"}


@dataclass
class _Media:
    """A file /media serves: opened, its size, its content type."""

    fd: int
    size: int
    ctype: str


class HttpOutput(Sink):
    """The MJPEG web viewer."""

    takes_stats = True
    takes_events = True

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8080,
        quality: int = 80,
        streams: int = 1,
        probes=None,
        demand=None,
        fps: int = DEFAULT_FPS,
    ) -> None:
        self.quality = quality
        self.streams = max(1, streams)
        self.fps = fps  # pictures a second per stream, at most: the viewer's own rate
        self._jpeg: list[bytes | None] = [None] * self.streams
        self._seq = [0] * self.streams
        self._due: list[float | None] = [None] * self.streams  # the next picture's scene time
        self._watching = [0] * self.streams  # video streams open, per camera stream
        self.demand = demand  # media.Demand: held while any is open (full frames then)
        self._cond = threading.Condition()
        self.live_stats: dict = {}
        self.history = [collections.deque(maxlen=HISTORY_S) for _ in range(self.streams)]
        self._sampled = float("-inf")
        self.recent_events: collections.deque = collections.deque(maxlen=EVENTS_KEPT)
        self.media: collections.OrderedDict = collections.OrderedDict()  # name -> path
        self.downloads = threading.BoundedSemaphore(MAX_DOWNLOADS)  # /media files at once
        self._t0 = time.monotonic()
        self.probes = probes  # the run's /metrics, /live and /ready, when it has them
        self._closed = False
        handler = self._handler()
        try:
            self.server = _QuietServer((host, port), handler, probe=self._probe)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise OutputError(
                    f"port {port} on {host} is already in use; pick another with --output http://{host}:PORT"
                ) from exc
            raise OutputError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        warn_if_open("--output http://", host, self.port)
        self.url = f"http://{show_host(host, self.port)}/"
        self.thread = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)
        self.thread.start()

    @property
    def takes_frames(self) -> bool:
        """Only while a video stream is watched: no overlay drawn, no JPEG encoded for nobody."""
        return any(self._watching)

    @contextlib.contextmanager
    def _watched(self, i: int):
        with self._cond:
            self._watching[i] += 1
        if self.demand is not None:
            self.demand.hold(i)
        try:
            yield
        finally:
            if self.demand is not None:
                self.demand.release(i)
            with self._cond:
                self._watching[i] -= 1
                if not self._watching[i]:
                    self._jpeg[i] = None  # the next viewer waits for a frame of its own time

    def wants(self, frame) -> bool:
        """Frames of a watched stream that bring the camera's pixels (a frame the decoder scaled:
        with its full picture), when the stream's next picture is due: by the scene's time, on
        a grid of 1/fps (:func:`media.paced`, the picture branch's own rule)."""
        i = stream_of(frame)
        if not self._watching[i] or getattr(frame, "picture", True) is None:
            return False
        return paced(self._due[i], _scene_time(frame), 1.0 / self.fps)[0]

    def write(self, frame, overlay_image, record: dict) -> None:
        import cv2

        if not self.wants(frame):  # not watched, not due, or not the camera's pixels
            return
        i = stream_of(frame)
        _, self._due[i] = paced(self._due[i], _scene_time(frame), 1.0 / self.fps)
        ok, buf = cv2.imencode(".jpg", overlay_image, [cv2.IMWRITE_JPEG_QUALITY, self.quality])
        if ok:
            with self._cond:
                self._jpeg[i] = buf.tobytes()
                self._seq[i] += 1
                self._cond.notify_all()

    def stats(self, stats: dict) -> None:
        now = time.monotonic()
        with self._cond:
            self.live_stats = stats
            if now - self._sampled < 1.0:
                return
            self._sampled = now
            for st in stats.get("streams", []):
                i = st.get("stream", 0)
                if not 0 <= i < self.streams:
                    continue
                e2e = (st.get("latency_ms") or {}).get("end_to_end") or {}
                self.history[i].append(
                    {
                        "t": round(now - self._t0, 1),
                        "fps": st.get("fps"),
                        "e2e_p50_ms": e2e.get("p50"),
                        "dropped": st.get("frames_dropped"),
                        "power_w": stats.get("power_w"),
                        "temp_c": stats.get("temp_c"),
                    }
                )

    def events(self, events: list) -> None:
        """The recent events for the page, each snapshot and clip they name served as
        ``/media/NAME`` (the name alone: runs name their files uniquely)."""
        with self._cond:
            for e in events:
                shown = {k: e[k] for k in _EVENT_KEYS if k in e}
                for key in ("snapshot", "snapshot_crop", "clip"):
                    if e.get(key):
                        path = Path(e[key])
                        self.media[path.name] = path
                        self.media.move_to_end(path.name)
                        shown[key] = "/media/" + path.name
                while len(self.media) > MEDIA_KEPT:
                    self.media.popitem(last=False)
                self.recent_events.appendleft(shown)

    def _media_file(self, name: str):
        """``/media/NAME``: the :class:`_Media` an event named (:func:`open_media`), or (code,
        body, type) saying why not."""
        with self._cond:
            path = self.media.get(name)
        if path is None:
            return 404, b"no event names that file\n", "text/plain"
        return open_media(path)

    def _file_route(self, target: str):
        """The route of the run's probes that names the file ``target`` asks for (the store's
        ``/api/media/``), or None."""
        files = getattr(self.probes, "files", None) or {}
        path = urlparse(target).path
        return next((r for prefix, r in files.items() if path.startswith(prefix)), None)

    def _stored_file(self, target: str):
        """``/api/media/...``: the :class:`_Media` of the file a store's row names (the store's
        route says which: :class:`edgert.apps.store.routes.Routes`), or (code, body, type);
        None when no route takes the path."""
        route = self._file_route(target)
        if route is None:
            return None
        got = route(target)
        return got if isinstance(got, tuple) else open_media(got)

    def _next_frame(self, i: int, last_seq: int, timeout: float = 1.0) -> tuple[int, bytes | None]:
        with self._cond:
            self._cond.wait_for(lambda: self._seq[i] != last_seq or self._closed, timeout)
            return self._seq[i], self._jpeg[i]

    def _probe(self, path: str):
        """What the overflow lane answers for ``path``: the probes, when the run has them."""
        return self.probes.answer(path) if self.probes is not None else None

    def _handler(self):
        return type("Handler", (_ViewerHandler,), {"output": self})

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.server.shutdown()
        self.server.server_close()


class _ViewerHandler(_Handler):
    """The viewer's HTTP handler; ``output``: the HttpOutput it serves (set per server by
    :meth:`HttpOutput._handler`)."""

    output: HttpOutput

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        send(self, code, body, ctype)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = urlparse(self.path).path
        stream = _STREAM_PATH.fullmatch(path)
        if path == "/":
            self._send(200, page(self.output.streams).encode(), "text/html; charset=utf-8")
        elif path == "/stats.json":
            with self.output._cond:
                body = json_text.dumps(self.output.live_stats, default=str).encode()
            self._send(200, body, "application/json")
        elif path == "/history.json":
            with self.output._cond:
                body = json_text.dumps([list(h) for h in self.output.history]).encode()
            self._send(200, body, "application/json")
        elif path == "/events.json":
            with self.output._cond:
                body = json_text.dumps(list(self.output.recent_events), default=str).encode()
            self._send(200, body, "application/json")
        elif path.startswith("/media/"):
            self._media(lambda: self.output._media_file(path[len("/media/") :]))
        elif path in _SCRIPTS:
            self._send(200, _script(path), "text/javascript; charset=utf-8")
        elif path.startswith("/api/media/") and self.output._file_route(path) is not None:
            self._media(lambda: self.output._stored_file(self.path))
        elif path == "/stream.mjpg":
            self._stream(0)
        elif stream and int(stream.group(1)) < self.output.streams:
            self._stream(int(stream.group(1)))
        elif self.output.probes is not None and (got := self.output.probes.answer(self.path)):
            self._send(*got)  # /metrics, /live, /ready
        else:
            self._send(404, b"not found\n", "text/plain")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.post_to(self.output.probes)  # the run's routes (POST /model)

    def _media(self, opened) -> None:
        """The file ``opened()`` gives (a :class:`_Media`, or why not), in a download slot."""
        if not self.output.downloads.acquire(blocking=False):
            self.close_connection = True
            self._send(503, b"too many downloads at once; try again\n", "text/plain")
            return
        try:
            got = opened()
            if isinstance(got, tuple):
                self._send(*got)
                return
            with os.fdopen(got.fd, "rb") as fh:
                send_file(self, fh, got.size, got.ctype, MEDIA_MIN_RATE, MEDIA_GRACE_S)
        except (TimeoutError, socket.timeout, ConnectionAbortedError):
            self.close_connection = True  # too slow (or stalled): the slot is given back
        finally:
            self.output.downloads.release()

    def _stream(self, i: int) -> None:
        if self.head_only:
            self.send_response(200)
            self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            return
        if not self.server.streams.acquire(blocking=False):  # threads left for the rest
            self.close_connection = True  # and this one's slot freed at once
            self._send(503, b"too many viewers\n", "text/plain")
            return
        try:
            self._stream_to(i)
        finally:
            self.server.streams.release()

    def _stream_to(self, i: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        seq = -1
        try:
            with self.output._watched(i):
                self._frames_to(i, seq)
        except (BrokenPipeError, ConnectionResetError, TimeoutError, socket.timeout):
            pass
        self.close_connection = True

    def _frames_to(self, i: int, seq: int) -> None:
        while not self.output._closed:
            seq, jpeg = self.output._next_frame(i, seq)
            if jpeg is None:
                continue
            self.wfile.write(
                b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: "
                + str(len(jpeg)).encode()
                + b"\r\n\r\n"
                + jpeg
                + b"\r\n"
            )


def open_media(path: Path):
    """The :class:`_Media` of ``path``, opened without following a link and only when it is a
    regular file the folder's record says edgert wrote, or (code, body, type) saying why not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:  # a clip still being written (.part), or retention took it
        return 404, b"not there (still being written, or deleted by retention)\n", "text/plain"
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link put there since: never followed
            return 404, b"not a file edgert wrote\n", "text/plain"
        return 500, f"cannot read it: {exc.strerror}\n".encode(), "text/plain"
    st = os.fstat(fd)
    if not recorded(path, st):  # a folder, a device, a file put there under that name
        os.close(fd)
        return 404, b"not a file edgert wrote\n", "text/plain"
    return _Media(fd, st.st_size, _MEDIA_TYPES.get(path.suffix.lower(), "application/octet-stream"))


def _scene_time(frame) -> float:
    """A frame's time in its scene (its video's, or its capture's); now for a bare picture."""
    t = getattr(frame, "t_scene", None)
    return time.monotonic() if t is None else t


_STREAM_PATH = re.compile(r"/stream/(\d{1,4})\.mjpg")


def view_fps(uri: str) -> int:
    """The viewer's own rate from ``http://HOST:PORT?fps=N`` (pictures a second per stream, 1 to
    60; DEFAULT_FPS unless given); OutputError in one sentence for another option or value."""
    from urllib.parse import parse_qs

    try:
        query = split(uri, need_host=False, free=True).path.partition("?")[2]
        given = parse_qs(query, True, True)
    except ValueError as exc:
        raise OutputError(str(exc)) from None
    if any(len(v) > 1 for v in given.values()):
        raise OutputError(f"{redact(uri)}: fps= is given twice; give it once")
    options = {k: v[0] for k, v in given.items()}
    unknown = sorted(set(options) - {"fps"})
    if unknown:
        raise OutputError(
            f"{redact(uri)}: unknown option {unknown[0]!r} (the web viewer takes fps)"
        )
    value = options.get("fps", str(DEFAULT_FPS))
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= 60:
        raise OutputError(
            f"{redact(uri)}: fps is the viewer's pictures a second, a whole number from 1 to 60"
        )
    return int(value)


def address(uri: str) -> tuple[str, int]:
    """(host, port) of ``http://[HOST][:PORT]``: 127.0.0.1 and 8080 unless given, 0 for a free
    port; OutputError in one sentence for a port that is not one."""
    try:
        parts = split(uri, need_host=False, free=True)
    except ValueError as exc:
        raise OutputError(str(exc)) from None
    return parts.host or "127.0.0.1", 8080 if parts.port is None else parts.port


def check(uri: str, options) -> None:
    address(uri)
    view_fps(uri)


def open_uri(uri: str, ctx: SinkContext) -> HttpOutput:
    fps = view_fps(uri)
    out = HttpOutput(
        *address(uri), streams=len(ctx.streams), probes=ctx.probes, demand=ctx.demand, fps=fps
    )
    ctx.say(f"web viewer: {out.url} (pictures at up to {fps} fps while watched)")
    return out
