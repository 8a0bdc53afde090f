"""``/metrics``, ``/live`` and ``/ready`` over HTTP: their own small server (``--metrics``,
``--edgert-metrics-port``), and the same answers on the web viewer's port.

- ``/live``: 200 while the process runs its loop (a load balancer or Kubernetes restarts it when
  this fails); loading a model or connecting a camera is still live.
- ``/ready``: 200 only when the work can be done (every model loaded and answering, a camera with
  at least one stream delivering), else 503; the body says why, as JSON.
- ``/metrics``: the Prometheus exposition.
"""

from __future__ import annotations

import json
import logging
import socket
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, handler) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler)

    def handle_error(self, request, client_address) -> None:  # a client gone mid-answer
        log.debug("telemetry: request from %s failed", client_address[0])


class ProbeServer:
    """The probes on ``host:port`` (port 0: a free one), in a thread, until :meth:`close`."""

    def __init__(self, host: str, port: int, probes: Probes, option: str = "--metrics") -> None:
        self.probes = probes

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30.0

            def log_message(self, fmt, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                got = probes.answer(self.path)
                send(self, *(got if got is not None else (404, b"not found\n", "text/plain")))

        try:
            self.server = _Server((host, port), Handler)
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
