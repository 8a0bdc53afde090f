"""``/metrics``, ``/live`` and ``/ready`` over HTTP: their own small server (``--metrics``,
``--edgert-metrics-port``), and the same answers on the web viewer's port.

- ``/live``: 200 while the process runs its loop (a load balancer or Kubernetes restarts it when
  this fails); loading a model or connecting a camera is still live.
- ``/ready``: 200 only when the work can be done (every model loaded and answering, a camera with
  at least one stream delivering), else 503; the body says why, as JSON.
- ``/metrics``: the Prometheus exposition.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from edgert.runtime.errors import OutputError

log = logging.getLogger(__name__)


class Probes:
    """What the three paths answer. ``metrics()`` -> (body, content type); ``live()`` and
    ``ready()`` -> (ok, reasons)."""

    def __init__(self, metrics=None, live=None, ready=None) -> None:
        self.metrics = metrics
        self.live = live or (lambda: (True, {}))
        self.ready = ready or (lambda: (False, {"reason": "starting"}))

    PATHS = ("/metrics", "/live", "/ready", "/healthz", "/readyz")

    def answer(self, path: str) -> tuple[int, bytes, str] | None:
        """(status, body, content type) for ``path``; None for a path that is not a probe's."""
        path = urlparse(path).path
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
            return None
        body = json.dumps({"status": "ok" if ok else "unavailable", **why}, default=str).encode()
        return (200 if ok else 503), body + b"\n", "application/json"


def send(handler: BaseHTTPRequestHandler, code: int, body: bytes, ctype: str) -> None:
    """One whole answer, never cached (the probes', the metrics', the web viewer's)."""
    handler.send_response(code)
    handler.send_header("Content-Type", ctype)
    handler.send_header("Content-Length", str(len(body)))
    handler.send_header("Cache-Control", "no-store")
    handler.end_headers()
    handler.wfile.write(body)


class QuietServer(ThreadingHTTPServer):
    """A client that resets its connection or goes away mid-response is a normal disconnect,
    not a traceback on the terminal (a burst of browsers closing tabs makes hundreds). At most
    ``MAX_CLIENTS`` connections at once (more are answered 503 and closed), and a connection
    idle for ``IDLE_S`` is closed: idle clients cannot hold a thread each forever."""

    daemon_threads = True
    MAX_CLIENTS = 64
    IDLE_S = 30.0

    def __init__(self, address, handler, what: str = "web viewer") -> None:
        self.what = what  # named in the warning of a request that failed
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
        log.warning("%s: request from %s failed: %s", self.what, client_address[0], exc)


class ProbeServer:
    """The probes on ``host:port`` (port 0: a free one), in a thread, until :meth:`close`."""

    def __init__(self, host: str, port: int, probes: Probes, option: str = "--metrics") -> None:
        self.probes = probes

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = QuietServer.IDLE_S  # an idle keep-alive connection is closed

            def log_message(self, fmt, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                got = probes.answer(self.path)
                send(self, *(got if got is not None else (404, b"not found\n", "text/plain")))

        try:
            self.server = QuietServer((host, port), Handler, "telemetry")
        except OSError as exc:
            raise OutputError(f"{option}: cannot listen on {host}:{port}: {exc.strerror}") from None
        self.port = self.server.server_address[1]
        self.url = f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="telemetry",
                                       daemon=True)  # fmt: skip
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def parse_address(text: str, option: str = "--metrics") -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[V6]:PORT`` -> (host, port); 127.0.0.1 when no host is
    given. OutputError (one sentence) otherwise."""
    text = text.strip()
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise OutputError(f"{option} {text!r}: give PORT or HOST:PORT with a port from 0 to 65535")
    return host, int(port)
