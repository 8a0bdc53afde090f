"""Outputs, several at once: a display window, an MJPEG web viewer, a video file, a JSONL log.

The web viewer serves only three things: the page (``/``), the MJPEG stream (``/stream.mjpg``) and
the live statistics (``/stats.json``, which the page polls). It binds 127.0.0.1 unless told
otherwise. The pipeline only replaces the latest JPEG under a lock, so a slow or stalled client
never stalls it: each client is sent the newest frame when it is ready for one and skips the rest.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

from edgert.runtime import atomic
from edgert.runtime.errors import OutputError, SourceError

log = logging.getLogger(__name__)

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>edgert camera</title>
<style>body{font-family:sans-serif;background:#111;color:#eee;margin:1em}
img{max-width:70vw;border:1px solid #444}#stats{font-family:monospace;white-space:pre-wrap;margin-left:1em;max-width:26em}
.row{display:flex;align-items:flex-start}</style></head>
<body><h3>edgert camera</h3><div class="row"><img id="video" src="/stream.mjpg" alt="live video">
<div id="stats">waiting for statistics...</div></div>
<script>
async function poll(){
  try{const r=await fetch('/stats.json',{cache:'no-store'});const s=await r.json();
    const lat=s.latency_ms||{};const e2e=lat.end_to_end||{};const inf=lat.infer||{};
    let t='frames   '+s.frames_processed+' (dropped '+s.frames_dropped+')\\n'+
          'fps      '+(s.fps||0).toFixed(1)+'\\n'+
          'infer    p50 '+(inf.p50||0).toFixed(1)+' ms\\n'+
          'e2e      p50 '+(e2e.p50||0).toFixed(1)+' ms  p99 '+(e2e.p99||0).toFixed(1)+' ms\\n';
    if(s.power_w!=null){t+='power    '+s.power_w.toFixed(2)+' W, '+(s.mj_per_frame||0).toFixed(1)+' mJ/frame\\n';}
    else{t+='power    '+(s.power_reason||'unavailable')+'\\n';}
    if(s.last&&s.last.results){t+='\\nlast:\\n'+s.last.results.slice(0,5).map(r=>'  '+r.label+' '+r.score.toFixed(3)).join('\\n');}
    document.getElementById('stats').textContent=t;}catch(e){}
  setTimeout(poll,500);}
poll();
</script></body></html>
"""


class Output:
    def write(self, frame, overlay_image, record: dict) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class JsonlOutput(Output):
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fh = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror}") from exc

    def write(self, frame, overlay_image, record: dict) -> None:
        try:
            self.fh.write(json.dumps(record) + "\n")
            self.fh.flush()
        except OSError as exc:
            raise OutputError(f"cannot write {self.path}: {exc.strerror}") from exc

    def close(self) -> None:
        self.fh.close()


class VideoFileOutput(Output):
    def __init__(self, path: str, fps: float = 30.0) -> None:
        self.path, self.fps = Path(path), fps
        self.writer = None
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

    def write(self, frame, overlay_image, record: dict) -> None:
        import cv2

        if self.writer is None:
            h, w = overlay_image.shape[:2]
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = cv2.VideoWriter(
                str(self.path), cv2.VideoWriter_fourcc(*"mp4v"), self.fps, (w, h)
            )
            if not self.writer.isOpened():
                raise OutputError(
                    f"cannot write video {self.path} (no mp4v encoder in this OpenCV?)"
                )
        self.writer.write(overlay_image)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.release()


class DisplayOutput(Output):
    def __init__(self, name: str = "edgert") -> None:
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

    def write(self, frame, overlay_image, record: dict) -> None:
        import cv2

        cv2.imshow(self.name, overlay_image)
        cv2.waitKey(1)

    def close(self) -> None:
        import cv2

        cv2.destroyAllWindows()


class _QuietServer(ThreadingHTTPServer):
    """A client that resets its connection or goes away mid-response is a normal disconnect,
    not a traceback on the terminal (a burst of browsers closing tabs makes hundreds)."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        log.warning("web viewer: request from %s failed: %s", client_address[0], exc)


class HttpOutput(Output):
    """The MJPEG web viewer."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8080, quality: int = 80) -> None:
        self.quality = quality
        self._jpeg: bytes | None = None
        self._seq = 0
        self._cond = threading.Condition()
        self.stats: dict = {}
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
        self.url = f"http://{host}:{self.port}/"
        self.thread = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)
        self.thread.start()

    def write(self, frame, overlay_image, record: dict) -> None:
        import cv2

        ok, buf = cv2.imencode(".jpg", overlay_image, [cv2.IMWRITE_JPEG_QUALITY, self.quality])
        if ok:
            with self._cond:
                self._jpeg = buf.tobytes()
                self._seq += 1
                self._cond.notify_all()

    def set_stats(self, stats: dict) -> None:
        with self._cond:
            self.stats = stats

    def _next_frame(self, last_seq: int, timeout: float = 1.0) -> tuple[int, bytes | None]:
        with self._cond:
            self._cond.wait_for(lambda: self._seq != last_seq or self._closed, timeout)
            return self._seq, self._jpeg

    def _handler(self):
        output = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

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
                if path == "/":
                    self._send(200, PAGE.encode(), "text/html; charset=utf-8")
                elif path == "/stats.json":
                    with output._cond:
                        body = json.dumps(output.stats, default=str).encode()
                    self._send(200, body, "application/json")
                elif path == "/stream.mjpg":
                    self._stream()
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _stream(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
                self.send_header("Cache-Control", "no-store")
                self.send_header("Connection", "close")
                self.end_headers()
                seq = -1
                try:
                    while not output._closed:
                        seq, jpeg = output._next_frame(seq)
                        if jpeg is None:
                            continue
                        self.wfile.write(
                            b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: "
                            + str(len(jpeg)).encode()
                            + b"\r\n\r\n"
                            + jpeg
                            + b"\r\n"
                        )
                except (BrokenPipeError, ConnectionResetError, TimeoutError):
                    pass
                self.close_connection = True

        return Handler

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.server.shutdown()
        self.server.server_close()


def open_output(uri: str, fps: float = 30.0) -> Output:
    if uri.startswith("display://"):
        return DisplayOutput()
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
        return HttpOutput(parsed.hostname or "127.0.0.1", 8080 if port is None else port)
    if uri.startswith("file://") or uri.endswith((".mp4", ".avi", ".mkv")):
        return VideoFileOutput(uri[len("file://") :] if uri.startswith("file://") else uri, fps)
    raise SourceError(
        f"unsupported output {uri!r}; supported: display://0, http://HOST:PORT, file://out.mp4"
    )


def frame_record(frame, t0: float) -> dict:
    return {
        "frame": frame.index,
        "t": round(frame.t_capture - t0, 4),
        "results": frame.results,
        "latency_ms": {k: round(v, 3) for k, v in frame.timings.items()},
    }


def now() -> float:
    return time.monotonic()
