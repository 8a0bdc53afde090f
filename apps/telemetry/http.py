"""``/metrics``, ``/live`` and ``/ready`` over HTTP: their own small server (``--metrics``,
``--edgert-metrics-port``), and the same answers on the web viewer's port.

- ``/live``: 200 while the process runs its loop (a load balancer or Kubernetes restarts it when
  this fails); loading a model or connecting a camera is still live.
- ``/ready``: 200 only when the work can be done (every model loaded and answering, a camera with
  at least one stream delivering), else 503; the body says why, as JSON.
- ``/metrics``: the Prometheus exposition.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from edgert.apps.uris import is_loopback, show_host, warn_if_open
from edgert.runtime import json_text
from edgert.runtime.errors import OutputError

from .listen import SelectorThread, close_quietly, receive

log = logging.getLogger(__name__)
__all__ = [
    "Probes",
    "ProbeServer",
    "QuietServer",
    "is_loopback",
    "parse_address",
    "request_peer",
    "send",
]
_request = threading.local()  # the request a handler thread answers now (its client's address)


def request_peer() -> str | None:
    """The address of the client whose POST the calling route answers (None elsewhere): what
    an endpoint taken only from this machine checks."""
    return getattr(_request, "peer", None)


class Probes:
    """What the three paths answer. ``metrics()`` -> (body, content type); ``live()`` and
    ``ready()`` -> (ok, reasons)."""

    def __init__(self, metrics=None, live=None, ready=None) -> None:
        self.metrics = metrics
        self.live = live or (lambda: (True, {}))
        self.ready = ready or (lambda: (False, {"reason": "starting"}))
        # more of the run's own: (method, path) -> handler(body) -> (status, body, content type)
        # (a camera's GET / POST /model)
        self.routes: dict = {}
        # (method, path prefix) -> handler(target, body): routes that read the request's target
        # (its query, the rest of its path: the store's /api/events?..., /api/tracks/ID)
        self.targets: dict = {}
        # path prefix -> handler(target) -> a Path to stream (the web viewer sends it, with Range,
        # within its download slots) or (status, body, content type): the store's /api/media/
        self.files: dict = {}
        # model name -> image (BGR) -> unit vector: the camera's embedders (POST /api/search)
        self.embedders: dict = {}
        # model name -> an embedder (.has_text, .embed_text(text) -> unit vector): ?text=
        self.text_embedders: dict = {}

    def command(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes, str] | None:
        """A route's answer to ``method path``; None when no route takes it."""
        route = self.routes.get((method, urlparse(path).path))
        if route is not None:
            return route(body)
        for (m, prefix), target in self.targets.items():
            if m == method and urlparse(path).path.startswith(prefix):
                return target(path, body)
        return None

    PATHS = ("/metrics", "/live", "/ready", "/healthz", "/readyz")

    def answer(self, path: str) -> tuple[int, bytes, str] | None:
        """(status, body, content type) for ``path``; None for a path that is not a probe's."""
        target, path = path, urlparse(path).path
        if path == "/metrics":
            if self.metrics is None:
                return 404, b"metrics are off\n", "text/plain"
            body, ctype = self.metrics()
            return 200, body, ctype
        if path in ("/live", "/healthz"):
            ok, why = self.live()
        elif path in ("/ready", "/readyz"):
            ok, why = self.ready()
        else:
            return self.command("GET", target)
        body = json_text.dumps(
            {"status": "ok" if ok else "unavailable", **why}, default=str
        ).encode()
        return (200 if ok else 503), body + b"\n", "application/json"


def send(handler: BaseHTTPRequestHandler, code: int, body: bytes, ctype: str) -> None:
    """One whole answer, never cached (the probes', the metrics', the web viewer's); the headers
    alone for HEAD."""
    handler.send_response(code)
    handler.send_header("Content-Type", ctype)
    handler.send_header("Content-Length", str(len(body)))
    handler.send_header("Cache-Control", "no-store")
    handler.end_headers()
    if not getattr(handler, "head_only", False):
        handler.wfile.write(body)


def byte_range(header: str | None, size: int) -> tuple[int, int] | None | bool:
    """The one range ``Range: bytes=A-B`` (``A-``, ``-N``) asks of ``size`` bytes, as (first,
    last) inclusive; None to send the whole (no header, or several ranges: RFC 9110 lets a
    server answer those whole); False when it cannot be satisfied (416)."""
    if not header or not header.strip().lower().startswith("bytes="):
        return None
    spec = header.strip()[6:].strip()
    if "," in spec:
        return None
    first, dash, last = spec.partition("-")
    if not dash or not (first.strip() or last.strip()):
        return False
    try:
        if not first.strip():  # the last N bytes
            n = int(last)
            return (max(0, size - n), size - 1) if n > 0 and size > 0 else False
        a = int(first)
        b = int(last) if last.strip() else size - 1
    except ValueError:
        return False
    if a < 0 or b < a or a >= size:
        return False
    return a, min(b, size - 1)


def send_file(
    handler: BaseHTTPRequestHandler,
    fh,
    size: int,
    ctype: str,
    min_rate: float | None = None,
    grace_s: float = 10.0,
) -> None:
    """A file streamed from disk (``os.sendfile``: never read whole into memory), the one
    range a ``Range`` header asks for as 206, 416 when it cannot be had; headers alone for
    HEAD. With ``min_rate`` (bytes a second), a client that takes less than that on average
    over a stretch of ``grace_s`` seconds is dropped (``TimeoutError``): it would hold one of
    the server's few download slots for as long as it liked."""
    got = byte_range(handler.headers.get("Range"), size)
    if got is False:
        handler.send_response(416)
        handler.send_header("Content-Range", f"bytes */{size}")
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return
    first, last = got if got else (0, size - 1)
    count = max(0, last - first + 1)
    handler.send_response(206 if got else 200)
    handler.send_header("Content-Type", ctype)
    handler.send_header("Content-Length", str(count))
    handler.send_header("Accept-Ranges", "bytes")
    if got:
        handler.send_header("Content-Range", f"bytes {first}-{last}/{size}")
    handler.send_header("Cache-Control", "no-store")
    handler.end_headers()
    if not count or getattr(handler, "head_only", False):
        return
    if min_rate is None:
        handler.connection.sendfile(fh, first, count)
    else:
        _send_at_least(handler.connection, fh.fileno(), first, count, min_rate, grace_s)


def _send_at_least(sock, fd: int, offset: int, count: int, rate: float, every_s: float) -> None:
    """``count`` bytes of ``fd`` from ``offset`` to ``sock``; every ``every_s`` seconds the
    bytes taken since the last check must average ``rate`` a second (what the kernel's buffers
    took at the start counts only in the first stretch), and no wait for room may pass the
    socket's timeout: TimeoutError otherwise (the caller's connection is closed)."""
    import os
    import selectors

    sent, mark_t, mark_sent = 0, time.monotonic(), 0
    check, moved = mark_t + every_s, mark_t  # the next check; the last time bytes went
    idle = sock.gettimeout() or QuietServer.IDLE_S
    with selectors.DefaultSelector() as sel:
        sel.register(sock, selectors.EVENT_WRITE)
        while sent < count:
            now = time.monotonic()
            if now - moved >= idle:
                raise TimeoutError("the client took nothing for the socket's timeout")
            if now >= check:
                if sent - mark_sent < rate * (now - mark_t):
                    raise TimeoutError(f"the client took under {int(rate)} bytes a second")
                mark_t, mark_sent, check = now, sent, now + every_s
            if not sel.select(min(moved + idle, check) - now):
                continue
            try:
                n = os.sendfile(sock.fileno(), fd, offset + sent, min(count - sent, 1 << 20))
            except BlockingIOError:
                continue
            if n == 0:  # the file is shorter than it was (truncated meanwhile)
                raise ConnectionAbortedError("the file shrank while it was sent")
            sent, moved = sent + n, time.monotonic()


class QuietServer(ThreadingHTTPServer):
    """A small threaded HTTP server that a client cannot silence:

    - at most ``MAX_CLIENTS`` connections get a thread each; a connection must send a whole
      request (line and headers) within ``IDLE_S`` of waiting for one, an absolute deadline
      that a trickle of bytes cannot push back (slowloris), else it is closed; an idle
      keep-alive connection likewise;
    - long-lived answers (the web viewer's MJPEG streams) take one of ``MAX_STREAMS`` slots, so
      viewers cannot take every thread;
    - connections beyond ``MAX_CLIENTS`` go to the overflow lane: one thread reads their requests
      without blocking (each within ``LANE_S``), answers the probes (``/live``, ``/ready``,
      ``/metrics``) and says 503 to anything else. A probe is answered while every slot is held.

    A client that resets its connection or goes away mid-response is a normal disconnect, not a
    traceback on the terminal (a burst of browsers closing tabs makes hundreds)."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog (socketserver's 5 drops a burst's SYNs)
    MAX_CLIENTS = 64
    MAX_STREAMS = 32
    IDLE_S = 10.0
    LANE_S = 2.0
    LANE_MAX = 256

    def __init__(self, address, handler, what: str = "web viewer", probe=None) -> None:
        self.what = what  # named in the warning of a request that failed
        self.probe = probe  # path -> (status, body, ctype) or None: what the lane answers
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._clients = threading.BoundedSemaphore(self.MAX_CLIENTS)
        self.streams = threading.BoundedSemaphore(self.MAX_STREAMS)
        self._deadlines: dict = {}  # socket -> when its request must be complete
        self._watch = threading.Lock()
        self._stopping = threading.Event()
        super().__init__(address, handler)
        self._lane = _Lane(self)
        threading.Thread(target=self._reap, name=f"{what}-reaper", daemon=True).start()

    def process_request(self, request, client_address) -> None:
        if not self._clients.acquire(blocking=False):
            self._lane.take(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._clients.release()

    def watch(self, conn, seconds: float) -> None:
        with self._watch:
            self._deadlines[conn] = time.monotonic() + seconds

    def unwatch(self, conn) -> None:
        with self._watch:
            self._deadlines.pop(conn, None)

    def _reap(self) -> None:
        """Close, every 0.2 s, the connections whose request did not come whole in time."""
        while not self._stopping.wait(0.2):
            now = time.monotonic()
            with self._watch:
                late = [c for c, t in self._deadlines.items() if t <= now]
                for c in late:
                    del self._deadlines[c]
            for c in late:
                with contextlib.suppress(OSError):
                    c.shutdown(socket.SHUT_RDWR)

    def server_close(self) -> None:
        self._stopping.set()
        if hasattr(self, "_lane"):  # not when binding failed in __init__
            self._lane.close()
        super().server_close()

    def handle_error(self, request, client_address) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout)):
            return
        log.warning("%s: request from %s failed: %s", self.what, client_address[0], exc)


class Handler(BaseHTTPRequestHandler):
    """What both servers' handlers share: HTTP/1.1, quiet, and the request deadline of
    :class:`QuietServer` (from waiting for a request until its headers are read)."""

    protocol_version = "HTTP/1.1"
    timeout = QuietServer.IDLE_S  # no single read waits longer either
    head_only = False  # answering HEAD: the headers GET would send, no body

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self.head_only = True
        try:
            self.do_GET()
        finally:
            self.head_only = False

    def log_message(self, fmt, *args) -> None:
        pass

    def handle_one_request(self) -> None:
        self.server.watch(self.connection, self.server.IDLE_S)
        try:
            super().handle_one_request()
        finally:
            self.server.unwatch(self.connection)

    def parse_request(self) -> bool:
        ok = super().parse_request()  # the headers are read: the answer may take its time
        self.server.unwatch(self.connection)
        return ok

    MAX_BODY = 65536

    def post_to(self, probes) -> None:
        """A POST answered by ``probes``' routes, its body read first (at most MAX_BODY bytes,
        each read within the handler's timeout)."""
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if not 0 <= n <= self.MAX_BODY:
            self.close_connection = True
            send(
                self,
                413 if n > 0 else 400,
                b"a body of at most 64 KiB, with its length\n",
                "text/plain",
            )
            return
        body = self.rfile.read(n)
        _request.peer = self.client_address[0] if self.client_address else None
        try:
            got = probes.command("POST", self.path, body) if probes is not None else None
        finally:
            _request.peer = None
        send(self, *(got if got is not None else (404, b"not found\n", "text/plain")))


class _Lane:
    """The overflow lane of a :class:`QuietServer`: one thread and a selector for the
    connections that found every slot taken. Each has ``LANE_S`` to send its request; a probe
    gets its answer, anything else 503; when ``LANE_MAX`` are waiting the oldest is closed."""

    def __init__(self, server: QuietServer) -> None:
        self.server = server
        self.waiting: collections.OrderedDict = collections.OrderedDict()  # sock -> [t, data]
        self.lock = threading.Lock()
        self.closed = False
        self.loop = SelectorThread(f"{server.what}-lane", self._read, self._late)

    def take(self, sock) -> None:
        import selectors

        with self.lock:
            if self.closed:
                close_quietly(sock)
                return
            if len(self.waiting) >= self.server.LANE_MAX:
                oldest, _ = self.waiting.popitem(last=False)
                self.loop.forget(oldest)
            sock.setblocking(False)
            self.waiting[sock] = [time.monotonic() + self.server.LANE_S, b""]
            self.loop.watch(sock, selectors.EVENT_READ)

    def _late(self, now: float) -> None:
        with self.lock:
            late = [s for s, (t, _) in self.waiting.items() if t <= now]
            for s in late:
                del self.waiting[s]
                self.loop.forget(s)

    def _read(self, sock, _data, _events) -> None:
        with self.lock:
            entry = self.waiting.get(sock)
        if entry is None:
            return
        chunk = receive(sock, 8192)
        if chunk is None:
            return
        entry[1] += chunk
        done = b"\r\n\r\n" in entry[1] or b"\n\n" in entry[1]
        if chunk and not done and len(entry[1]) < 65536:
            return
        with self.lock:
            self.waiting.pop(sock, None)
            self.loop.watch(sock, 0)
        if done:
            self._answer(sock, entry[1])
        self.loop.forget(sock)

    def _answer(self, sock, request: bytes) -> None:
        line = request.split(b"\r\n", 1)[0].split(b"\n", 1)[0].decode("latin-1").split()
        got = None
        if len(line) >= 2 and line[0] in ("GET", "HEAD") and self.server.probe is not None:
            with contextlib.suppress(Exception):  # a probe that fails is a 503 here
                got = self.server.probe(line[1])
        if got is None:
            got = (503, b"busy: too many connections\n", "text/plain")
        code, body, ctype = got
        reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}.get(code, "")
        head = (
            f"HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: "
            f"{len(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
        )
        with contextlib.suppress(OSError):
            sock.settimeout(self.server.LANE_S)
            sock.sendall(head.encode() + (b"" if line and line[0] == "HEAD" else body))

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.waiting.clear()
        self.loop.close()  # the thread stopped, every connection still waiting closed


class ProbeServer:
    """The probes on ``host:port`` (port 0: a free one), in a thread, until :meth:`close`."""

    def __init__(self, host: str, port: int, probes: Probes, option: str = "--metrics") -> None:
        self.probes = probes

        class ProbeHandler(Handler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                got = probes.answer(self.path)
                send(self, *(got if got is not None else (404, b"not found\n", "text/plain")))

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.post_to(probes)

        try:
            self.server = QuietServer((host, port), ProbeHandler, "telemetry", probes.answer)
        except OSError as exc:
            raise OutputError(f"{option}: cannot listen on {host}:{port}: {exc.strerror}") from None
        self.port = self.server.server_address[1]
        self.url = f"http://{show_host(host, self.port)}"
        warn_if_open(option, host, self.port)
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="telemetry", daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def parse_address(text: str, option: str = "--metrics") -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[V6]:PORT`` -> (host, port); 127.0.0.1 when no host is
    given. OutputError (one sentence) otherwise."""
    from edgert.apps.uris import host_port, port_number

    text = text.strip()
    try:
        if text.isdigit():
            return "127.0.0.1", port_number(text, free=True)
        host, port = host_port(text, free=True)
    except ValueError as exc:
        raise OutputError(f"{option} {text!r}: give PORT or HOST:PORT; {exc}") from None
    if port is None:
        raise OutputError(f"{option} {text!r}: give PORT or HOST:PORT; no port is given")
    return host or "127.0.0.1", port


def json_answer(code: int, data: dict) -> tuple[int, bytes, str]:
    """A route's answer of JSON: (status, body, content type)."""
    return code, json_text.dumps(data, default=str).encode() + b"\n", "application/json"
