"""Outputs, several at once: a display window, an MJPEG web viewer, a video file, a JSONL log;
each knows the camera's streams (``frame.stream``).

The web viewer serves only these: the page (``/``, a grid of the streams with their numbers), one
MJPEG stream per camera stream (``/stream/<i>.mjpg``; ``/stream.mjpg`` is stream 0) and the live
statistics (``/stats.json``, which the page polls). It binds 127.0.0.1 unless told otherwise. The
pipeline only replaces the latest JPEG of a stream under a lock, so a slow or stalled client never
stalls it: each client is sent the newest frame when it is ready for one and skips the rest.

Video files: one stream writes ``out.mp4``; several write ``out_<i>.mp4`` each, or one mosaic
(``--mosaic``) with a tile per stream. JSONL: a header line ``{"streams": [...]}`` naming each
stream's source, then one line per frame with its ``"stream"``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import re
import socket
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from edgert.runtime import atomic
from edgert.runtime.errors import OutputError, SourceError

log = logging.getLogger(__name__)

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>edgert camera</title>
<style>body{font-family:sans-serif;background:#111;color:#eee;margin:1em}
.grid{display:grid;grid-template-columns:repeat(%(cols)d,minmax(0,1fr));gap:6px;width:70vw;flex:none}
figure{margin:0}img{width:100%%;border:1px solid #444;display:block}
figcaption{font-family:monospace;font-size:12px;white-space:pre;color:#ccc}
#stats{font-family:monospace;white-space:pre-wrap;margin-left:1em;max-width:26em;min-width:0}
.row{display:flex;align-items:flex-start}</style></head>
<body><h3>edgert camera</h3><div class="row"><div class="grid">%(tiles)s</div>
<div id="stats">waiting for statistics...</div></div>
<script>
const f1=v=>(v||0).toFixed(1);
function countsLine(counts){
  if(!counts)return '';
  return Object.entries(counts).map(([n,c])=>c.type=='line'?n+': in '+c.in+' out '+c.out:
    n+': '+c.occupancy+' now, '+c.entries+' in, '+c.exits+' out').join('  ');}
function lastLine(last){
  if(!last||!last.results)return '';
  const rs=Array.isArray(last.results)?last.results:[];
  return rs.slice(0,3).map(r=>r.label+' '+(r.score||0).toFixed(2)).join(', ');}
async function poll(){
  try{const r=await fetch('/stats.json',{cache:'no-store'});const s=await r.json();
    const lat=s.latency_ms||{};const e2e=lat.end_to_end||{};const inf=lat.infer||{};
    let t='frames   '+s.frames_processed+' (dropped '+s.frames_dropped+')\\n'+
          'fps      '+f1(s.fps)+'\\n'+
          'infer    p50 '+f1(inf.p50)+' ms\\n'+
          'e2e      p50 '+f1(e2e.p50)+' ms  p99 '+f1(e2e.p99)+' ms\\n';
    if(s.batch){t+='batch    mean '+(s.batch.mean||0).toFixed(2)+' of '+s.batch.max+'\\n';}
    if(s.power_w!=null){t+='power    '+s.power_w.toFixed(2)+' W, '+f1(s.mj_per_frame)+' mJ/frame\\n';}
    else{t+='power    '+(s.power_reason||'unavailable')+'\\n';}
    const streams=s.streams||[];
    if(streams.length==1&&streams[0].last){t+='\\nlast:\\n'+lastLine(streams[0].last).split(', ').map(x=>'  '+x).join('\\n');}
    document.getElementById('stats').textContent=t;
    streams.forEach((st,i)=>{const c=document.getElementById('cap'+i);if(!c)return;
      const se=(st.latency_ms||{}).end_to_end||{};
      c.textContent='['+i+'] '+st.source+'\\nframes '+st.frames_processed+'  '+f1(st.fps)+' fps  e2e p99 '+
        f1(se.p99)+' ms  dropped '+st.frames_dropped+'  '+st.status+'\\n'+lastLine(st.last)+
        (st.counts?'\\n'+countsLine(st.counts):'');});
  }catch(e){}
  setTimeout(poll,500);}
poll();
</script></body></html>
"""
TILE = '<figure><img id="video%(i)d" src="/stream/%(i)d.mjpg" alt="stream %(i)d"><figcaption id="cap%(i)d">[%(i)d]</figcaption></figure>'


def grid_columns(streams: int) -> int:
    """Columns of the streams' grid (the web page's and the mosaic's): as square as it gets."""
    return max(1, math.ceil(math.sqrt(streams)))


def page(streams: int) -> str:
    """The viewer page: one tile per stream (video and its numbers) and the overall numbers."""
    cols = grid_columns(streams)
    tiles = "".join(TILE % {"i": i} for i in range(streams))
    return PAGE % {"cols": cols, "tiles": tiles}


class Output:
    def write(self, frame, overlay_image, record: dict) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class JsonlOutput(Output):
    def __init__(self, path: str, header: dict | None = None) -> None:
        self.path = Path(path)
        self.failed = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fh = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise OutputError(atomic.describe_os_error(exc, self.path)) from exc
        if header is not None:
            self.write(None, None, header)

    def write(self, frame, overlay_image, record: dict) -> None:
        try:
            self.fh.write(json.dumps(record) + "\n")
            self.fh.flush()
        except OSError as exc:
            self.failed = True
            raise OutputError(atomic.describe_os_error(exc, self.path)) from exc

    def close(self) -> None:
        try:
            self.fh.close()
        except OSError as exc:  # what was still buffered: said once, not over the first error
            if not self.failed:
                self.failed = True
                raise OutputError(atomic.describe_os_error(exc, self.path)) from exc


class VideoFileOutput(Output):
    """A video file. Every frame goes in at the size of the first: others are letterboxed into it
    (and counted). A write that fails (a full disk) raises OutputError, and the finished file is
    opened again and its frames counted: a file that cannot be played, or holds fewer frames than
    were written, is an error, not a success."""

    CHECK_SPACE_S = 1.0

    def __init__(self, path: str, fps: float = 30.0) -> None:
        self.path, self.fps = Path(path), fps
        self.writer = None
        self.size: tuple[int, int] | None = None
        self.frames = 0
        self.letterboxed = 0
        self.failed = False
        self._space_checked = 0.0
        blocker = next((p for p in self.path.parents if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            raise OutputError(f"cannot write video {self.path}: {blocker} is a file, not a folder")
        try:  # fail now, in one sentence, rather than from the output thread mid-run
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.is_dir():
                raise OutputError(f"cannot write video {self.path}: it is a folder")
            with tempfile.TemporaryFile(dir=self.path.parent):
                pass
        except OSError as exc:
            raise OutputError(
                f"cannot write video {self.path}: "
                + atomic.describe_os_error(exc, self.path.parent).split(": ", 1)[-1]
            ) from exc

    def _fail(self, why: str) -> OutputError:
        self.failed = True
        return OutputError(f"video {self.path}: {why}")

    def write(self, frame, overlay_image, record: dict) -> None:
        import cv2

        from .sources import quiet_opencv

        if self.writer is None:
            h, w = overlay_image.shape[:2]
            self.size = (w, h)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = cv2.VideoWriter(
                str(self.path), cv2.VideoWriter_fourcc(*"mp4v"), self.fps, (w, h)
            )
            if not self.writer.isOpened():
                raise OutputError(
                    f"cannot write video {self.path} (no mp4v encoder in this OpenCV?)"
                )
        if overlay_image.shape[1::-1] != self.size:  # a stream whose size changed mid-run
            overlay_image = _letterbox(overlay_image, self.size)
            self.letterboxed += 1
        with quiet_opencv():
            ok = self.writer.write(overlay_image)
        if ok is False:  # OpenCV 5 says; 4.x returns None and the file is checked on close
            raise self._fail(f"writing frame {self.frames + 1} failed ({self._why()})")
        self.frames += 1
        now = time.monotonic()
        if now - self._space_checked >= self.CHECK_SPACE_S:
            self._space_checked = now
            if self._free_bytes() == 0:
                raise self._fail("no space left on the device")

    def _free_bytes(self) -> int | None:
        try:
            st = os.statvfs(self.path.parent)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def _why(self) -> str:
        return "no space left on the device" if self._free_bytes() == 0 else "the disk may be full"

    def close(self) -> None:
        if self.writer is None:
            return
        import cv2

        from .sources import quiet_opencv

        self.writer.release()
        self.writer = None
        if self.failed:
            return
        with quiet_opencv():
            cap = cv2.VideoCapture(str(self.path))
            opened = cap.isOpened()
            count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) if opened else 0
            cap.release()
        if not opened:
            raise self._fail(
                f"the file cannot be played after {self.frames} frames ({self._why()})"
            )
        if 0 < count < self.frames:
            raise self._fail(
                f"the file holds {count} of the {self.frames} frames written ({self._why()})"
            )

    def report(self) -> dict:
        return {"output": str(self.path), "frames": self.frames, "letterboxed": self.letterboxed}


def stream_of(frame) -> int:
    return getattr(frame, "stream", 0)


def per_stream_path(path: Path, i: int) -> Path:
    """out.mp4 -> out_<i>.mp4"""
    return path.with_name(f"{path.stem}_{i}{path.suffix}")


class StreamFilesOutput(Output):
    """One video file per stream: ``out_<i>.mp4``."""

    def __init__(self, path: str, fps: float, streams: int) -> None:
        self.files = [
            VideoFileOutput(str(per_stream_path(Path(path), i)), fps) for i in range(streams)
        ]

    def write(self, frame, overlay_image, record: dict) -> None:
        self.files[stream_of(frame)].write(frame, overlay_image, record)

    def close(self) -> None:
        errors = []
        for f in self.files:
            try:
                f.close()
            except OutputError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def report(self) -> list:
        return [f.report() for f in self.files]


class MosaicOutput(Output):
    """The streams tiled into one picture (letterboxed, at most 1920 pixels wide), one picture
    per round of the streams: written when a stream's tile is about to be replaced a second time,
    so a dead stream (its tile stays black, or its last frame) never holds the others up."""

    MAX_WIDTH = 1920

    def __init__(self, target: Output, streams: int) -> None:
        self.target = target
        self.cols = grid_columns(streams)
        self.rows = math.ceil(streams / self.cols)
        self.tiles: list = [None] * streams
        self.fresh: set[int] = set()
        self.tile_size: tuple[int, int] | None = None

    def write(self, frame, overlay_image, record: dict) -> None:
        i = stream_of(frame)
        if i in self.fresh:
            self._emit()
        if self.tile_size is None:
            h, w = overlay_image.shape[:2]
            scale = min(1.0, self.MAX_WIDTH / (w * self.cols))
            self.tile_size = (max(2, int(w * scale)) // 2 * 2, max(2, int(h * scale)) // 2 * 2)
        self.tiles[i] = _letterbox(overlay_image, self.tile_size)
        self.fresh.add(i)

    def _emit(self) -> None:
        tw, th = self.tile_size
        mosaic = np.zeros((th * self.rows, tw * self.cols, 3), np.uint8)
        for i, tile in enumerate(self.tiles):
            if tile is not None:
                r, c = divmod(i, self.cols)
                mosaic[r * th : (r + 1) * th, c * tw : (c + 1) * tw] = tile
        self.target.write(None, mosaic, {})
        self.fresh.clear()

    def close(self) -> None:
        try:
            if self.fresh:
                self._emit()
        finally:
            self.target.close()

    def report(self):
        return getattr(self.target, "report", dict)()


def _letterbox(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    import cv2

    tw, th = size
    h, w = image.shape[:2]
    scale = min(tw / w, th / h)
    nw, nh = max(1, int(w * scale)), max(1, int(h * scale))
    out = np.zeros((th, tw, 3), np.uint8)
    y, x = (th - nh) // 2, (tw - nw) // 2
    out[y : y + nh, x : x + nw] = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_AREA)
    return out


class DisplayOutput(Output):
    """A window (one per stream when there are several: "edgert [i]")."""

    def __init__(self, name: str = "edgert", streams: int = 1) -> None:
        import cv2

        if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
            raise OutputError(
                "display:// needs a display (DISPLAY is not set); use --output http://127.0.0.1:8080 or --headless"
            )
        try:
            cv2.namedWindow(name, cv2.WINDOW_NORMAL)
        except cv2.error as exc:
            raise OutputError(
                "this OpenCV has no GUI support (opencv-python-headless); use --output http://127.0.0.1:8080"
            ) from exc
        self.name = name
        self.streams = streams

    def write(self, frame, overlay_image, record: dict) -> None:
        import cv2

        name = (
            self.name
            if frame is None or not stream_of(frame)
            else f"{self.name} [{stream_of(frame)}]"
        )
        cv2.imshow(name, overlay_image)
        cv2.waitKey(1)

    def close(self) -> None:
        import cv2

        cv2.destroyAllWindows()


class _QuietServer(ThreadingHTTPServer):
    """A client that resets its connection or goes away mid-response is a normal disconnect,
    not a traceback on the terminal (a burst of browsers closing tabs makes hundreds). At most
    ``MAX_CLIENTS`` connections at once (more are answered 503 and closed), and a connection
    idle for ``IDLE_S`` is closed: idle clients cannot hold a thread each forever."""

    daemon_threads = True
    MAX_CLIENTS = 64
    IDLE_S = 30.0

    def __init__(self, address, handler) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._clients = threading.BoundedSemaphore(self.MAX_CLIENTS)
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        if not self._clients.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                b"Connection: close\r\n\r\n")  # fmt: skip
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._clients.release()

    def handle_error(self, request, client_address) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout)):
            return
        log.warning("web viewer: request from %s failed: %s", client_address[0], exc)


class HttpOutput(Output):
    """The MJPEG web viewer."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 8080, quality: int = 80, streams: int = 1
    ) -> None:
        self.quality = quality
        self.streams = max(1, streams)
        self._jpeg: list[bytes | None] = [None] * self.streams
        self._seq = [0] * self.streams
        self._cond = threading.Condition()
        self.stats: dict = {}
        self.probes = None  # telemetry's /metrics, /live and /ready, when the run has them
        self._closed = False
        handler = self._handler()
        try:
            self.server = _QuietServer((host, port), handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise OutputError(
                    f"port {port} on {host} is already in use; pick another with --output http://{host}:PORT"
                ) from exc
            raise OutputError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://[{host}]:{self.port}/" if ":" in host else f"http://{host}:{self.port}/"
        self.thread = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)
        self.thread.start()

    def write(self, frame, overlay_image, record: dict) -> None:
        import cv2

        ok, buf = cv2.imencode(".jpg", overlay_image, [cv2.IMWRITE_JPEG_QUALITY, self.quality])
        if ok:
            i = stream_of(frame)
            with self._cond:
                self._jpeg[i] = buf.tobytes()
                self._seq[i] += 1
                self._cond.notify_all()

    def set_stats(self, stats: dict) -> None:
        with self._cond:
            self.stats = stats

    def _next_frame(self, i: int, last_seq: int, timeout: float = 1.0) -> tuple[int, bytes | None]:
        with self._cond:
            self._cond.wait_for(lambda: self._seq[i] != last_seq or self._closed, timeout)
            return self._seq[i], self._jpeg[i]

    def _handler(self):
        output = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            timeout = _QuietServer.IDLE_S  # an idle keep-alive connection is closed

            def log_message(self, fmt, *args) -> None:  # quiet
                pass

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = urlparse(self.path).path
                stream = _STREAM_PATH.fullmatch(path)
                if path == "/":
                    self._send(200, page(output.streams).encode(), "text/html; charset=utf-8")
                elif path == "/stats.json":
                    with output._cond:
                        body = json.dumps(output.stats, default=str).encode()
                    self._send(200, body, "application/json")
                elif path == "/stream.mjpg":
                    self._stream(0)
                elif stream and int(stream.group(1)) < output.streams:
                    self._stream(int(stream.group(1)))
                elif output.probes is not None and (got := output.probes.answer(path)):
                    self._send(*got)  # /metrics, /live, /ready
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _stream(self, i: int) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
                self.send_header("Cache-Control", "no-store")
                self.send_header("Connection", "close")
                self.end_headers()
                seq = -1
                try:
                    while not output._closed:
                        seq, jpeg = output._next_frame(i, seq)
                        if jpeg is None:
                            continue
                        self.wfile.write(
                            b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: "
                            + str(len(jpeg)).encode()
                            + b"\r\n\r\n"
                            + jpeg
                            + b"\r\n"
                        )
                except (BrokenPipeError, ConnectionResetError, TimeoutError, socket.timeout):
                    pass
                self.close_connection = True

        return Handler

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.server.shutdown()
        self.server.server_close()


_STREAM_PATH = re.compile(r"/stream/(\d{1,4})\.mjpg")


def _file_output(uri: str) -> str | None:
    if uri.startswith("file://") or uri.endswith((".mp4", ".avi", ".mkv")):
        return uri[len("file://") :] if uri.startswith("file://") else uri
    return None


def output_paths(uris: list[str], streams: int = 1, mosaic: bool = False) -> list[tuple[str, Path]]:
    """(what, path) of every file the outputs ``uris`` write (a file per stream when there are
    several streams and no mosaic)."""
    found = []
    for uri in uris:
        path = _file_output(uri)
        if path is None:
            continue
        if streams > 1 and not mosaic:
            found += [
                (f"--output {uri} (stream {i})", per_stream_path(Path(path), i))
                for i in range(streams)
            ]
        else:
            found.append((f"--output {uri}", Path(path)))
    return found


def open_output(uri: str, fps: float = 30.0, streams: int = 1, mosaic: bool = False) -> Output:
    """The output for ``uri``; ``streams``: how many camera streams it shows (a video file is
    written per stream, or one mosaic of all)."""
    if uri.startswith("display://"):
        if mosaic and streams > 1:
            return MosaicOutput(DisplayOutput(), streams)
        return DisplayOutput(streams=streams)
    if uri.startswith("http://"):
        parsed = urlparse(uri)
        try:
            port = parsed.port
        except ValueError:
            port = -1
        if port is not None and not 0 <= port <= 65535:
            raise OutputError(
                f"{uri}: the port must be a number from 0 to 65535 (0 picks a free one)"
            )
        return HttpOutput(parsed.hostname or "127.0.0.1", 8080 if port is None else port,
                          streams=streams)  # fmt: skip
    path = _file_output(uri)
    if path is not None:
        if streams > 1 and mosaic:
            return MosaicOutput(VideoFileOutput(path, fps), streams)
        if streams > 1:
            return StreamFilesOutput(path, fps, streams)
        return VideoFileOutput(path, fps)
    raise SourceError(
        f"unsupported output {uri!r}; supported: display://0, http://HOST:PORT, file://out.mp4"
    )


def frame_record(frame, t0: float) -> dict:
    return {
        "stream": frame.stream,
        "frame": frame.index,
        "t": round(frame.t_capture - t0, 4),
        "results": frame.results,
        "latency_ms": {k: round(v, 3) for k, v in frame.timings.items()},
    }


def now() -> float:
    return time.monotonic()
