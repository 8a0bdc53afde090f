"""edgert's own listener in front of gst-rtsp-server, which takes request headers of any size on
its few client threads: a handful of clients sending megabytes of headers kept every viewer out
(fault battery 5, F8: the first request; battery 6, G3: any later one on the same connection).

Every byte a client sends passes through :func:`next_message` here, for the whole life of the
connection: each request (its line, headers and body) must come whole within ``REQUEST_S`` of its
first byte, in at most ``MAX_HEAD`` bytes of head and ``MAX_BODY`` of body, else the client is
answered 431, 413 or 400 (408 for one too slow) and the connection closed; interleaved RTP/RTCP
frames (``$``, a channel, a 16-bit length) are bounded by their own format. Whole messages go on
to the server over a TCP pair made on the address the client reached (so the server sees that
local address, and the client's own for UDP), handed over with ``transfer_connection``; what the
server sends comes back the same way. Both directions are buffered within bounds (a client that
does not read stops us reading the server, whose own backlog limit then drops its data). At most
``MAX_CONNECTIONS`` connections are held; past that the one idle longest is closed. RTSP over HTTP
tunnels (a body that never ends) is answered 501.
"""

from __future__ import annotations

import contextlib
import re
import selectors
import socket
import time

from edgert.apps.telemetry.listen import SelectorThread, receive

MAX_HEAD = 16384
MAX_BODY = 65536
REQUEST_S = 5.0  # a request, whole, from its first byte; and the first one from the connect
MAX_CONNECTIONS = 256
MAX_UP = 256 * 1024  # client -> server bytes held before the client is no longer read
MAX_DOWN = 4 * 1024 * 1024  # server -> client bytes held before the server is no longer read
CHUNK = 65536
_LENGTH = re.compile(rb"^content-length[ \t]*:[ \t]*([0-9]{1,12})[ \t]*\r?$", re.I | re.M)
STATUS = {
    400: b"400 Bad Request",
    408: b"408 Request Timeout",
    413: b"413 Request Entity Too Large",
    431: b"431 Request Header Fields Too Large",
    501: b"501 Not Implemented",
}


class Refused(Exception):
    """A request the front will not pass on: its RTSP status code."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def next_message(buf) -> int:
    """The length of the first whole message at the start of BUF (0: not whole yet); Refused
    where it can never be one edgert passes on."""
    if not buf:
        return 0
    if buf[:2] == b"\r\n":  # a bare line between requests (some clients send them)
        return 2
    if buf[:1] == b"$":  # interleaved RTP/RTCP: "$", channel, 16-bit length, data
        if len(buf) < 4:
            return 0
        size = 4 + int.from_bytes(bytes(buf[2:4]), "big")
        return size if len(buf) >= size else 0
    end = bytes(buf[: MAX_HEAD + 4]).find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > MAX_HEAD:
            raise Refused(431)
        return 0
    head = bytes(buf[:end])
    if b"\0" in head:
        raise Refused(400)
    if head.split(b"\r\n", 1)[0].rstrip().endswith((b"HTTP/1.0", b"HTTP/1.1")):
        raise Refused(501)  # RTSP over HTTP: its POST body is a stream with no end
    lengths = _LENGTH.findall(head)
    if len(set(lengths)) > 1:
        raise Refused(400)
    body = int(lengths[0]) if lengths else 0
    if body > MAX_BODY:
        raise Refused(413)
    size = end + 4 + body
    return size if len(buf) >= size else 0


class _Conn:
    """One client's connection and, once its first request came whole, its pair to the server."""

    def __init__(self, client: socket.socket, address, now: float) -> None:
        self.client, self.address = client, address
        self.server = None  # our end of the pair to the server
        self.up = bytearray()  # from the client, not yet a whole message
        self.ready = bytearray()  # whole messages for the server, not yet sent
        self.down = bytearray()  # from the server, not yet sent to the client
        self.begun = now  # when the message being read began (the connect, for the first)
        self.active = now
        self.server_done = False  # the server closed: what it sent is flushed, then the end

    def masks(self) -> tuple:
        client = 0
        if not self.server_done and len(self.up) + len(self.ready) < MAX_UP:
            client |= selectors.EVENT_READ
        if self.down:
            client |= selectors.EVENT_WRITE
        server = 0
        if self.server is not None:
            if not self.server_done and len(self.down) < MAX_DOWN:
                server |= selectors.EVENT_READ
            if self.ready:
                server |= selectors.EVENT_WRITE
        return client, server


class Front:
    """The listener and every connection's relay, on one thread of its own. ``hand(socket,
    address)`` gives the server its end of a new pair (it closes the socket if it cannot)."""

    def __init__(self, host: str, port: int, hand) -> None:
        self.hand = hand
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
            self.sock.listen(128)
        except OSError:
            self.sock.close()
            raise
        self.port = self.sock.getsockname()[1]
        self.sock.setblocking(False)
        self.conns: dict = {}  # client socket -> _Conn
        self.refused = 0
        self.loop = SelectorThread("rtsp-front", self._ready, self._turn)
        self.loop.watch(self.sock, selectors.EVENT_READ, None)

    def _ready(self, _sock, data, events: int) -> None:
        if data is None:
            self._accept()
            return
        conn, side = data
        if conn.client in self.conns:
            try:
                self._event(conn, side, events)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:  # either end went away under us
                self._drop(conn)

    def _turn(self, now: float) -> None:
        for conn in list(self.conns.values()):
            late = (conn.up or conn.server is None) and now - conn.begun > REQUEST_S
            if (late and conn.server is None and not conn.up) or (
                conn.server_done and now - conn.active > REQUEST_S
            ):
                self._drop(conn)  # never asked anything; or the server ended, unread
            elif late:
                self._refuse(conn, 408)
            elif conn.client in self.conns:
                self._interest(conn)

    def _accept(self) -> None:
        try:
            client, address = self.sock.accept()
        except OSError:
            return
        if len(self.conns) >= MAX_CONNECTIONS:
            self._drop(min(self.conns.values(), key=lambda c: c.active))
        client.setblocking(False)
        conn = _Conn(client, address, time.monotonic())
        self.conns[client] = conn
        self._interest(conn)

    def _event(self, conn: _Conn, side: str, events: int) -> None:
        if side == "client" and events & selectors.EVENT_READ:
            self._from_client(conn)
        if side == "client" and events & selectors.EVENT_WRITE and conn.client in self.conns:
            del conn.down[: conn.client.send(conn.down)]
            conn.active = time.monotonic()
            if conn.server_done and not conn.down:
                self._drop(conn)
        if side == "server" and events & selectors.EVENT_READ and conn.client in self.conns:
            chunk = conn.server.recv(CHUNK)
            conn.down += chunk
            conn.server_done = not chunk
            if conn.server_done and not conn.down:
                self._drop(conn)
        if side == "server" and events & selectors.EVENT_WRITE and conn.client in self.conns:
            del conn.ready[: conn.server.send(conn.ready)]

    def _from_client(self, conn: _Conn) -> None:
        chunk = receive(conn.client, CHUNK)
        if chunk is None:
            return
        if not chunk:  # the client went: what it asked for goes on, then the server sees the end
            with contextlib.suppress(OSError):
                if conn.server is not None and conn.ready:
                    conn.server.send(conn.ready)
            self._drop(conn)
            return
        now = time.monotonic()
        if not conn.up and conn.server is not None:
            conn.begun = now  # a new message begins
        conn.up += chunk
        conn.active = now
        try:
            while True:
                size = next_message(conn.up)
                if not size:
                    break
                conn.ready += conn.up[:size]
                del conn.up[:size]
                conn.begun = now
        except Refused as refused:
            self._refuse(conn, refused.status)
            return
        if conn.ready and conn.server is None:
            self._connect(conn)

    def _connect(self, conn: _Conn) -> None:
        """The pair to the server, on the local address the client reached."""
        local = conn.client.getsockname()
        listener = socket.socket(conn.client.family, socket.SOCK_STREAM)
        try:
            listener.bind((local[0], 0, *local[2:]))
            listener.listen(1)
            ours = socket.socket(conn.client.family, socket.SOCK_STREAM)
            ours.settimeout(2.0)
            ours.connect(listener.getsockname())
            theirs, _ = listener.accept()
        except OSError:
            self._drop(conn)
            return
        finally:
            listener.close()
        ours.setblocking(False)
        for s in (ours, theirs, conn.client):
            with contextlib.suppress(OSError):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.server = ours
        try:
            self.hand(theirs, conn.address)
        except Exception:  # noqa: BLE001 - a connection the server would not take
            theirs.close()
            self._drop(conn)

    def _interest(self, conn: _Conn) -> None:
        client, server = conn.masks()
        self.loop.watch(conn.client, client, (conn, "client"))
        if conn.server is not None:
            self.loop.watch(conn.server, server, (conn, "server"))

    def _refuse(self, conn: _Conn, status: int) -> None:
        self.refused += 1
        with contextlib.suppress(OSError):
            conn.client.send(b"RTSP/1.0 " + STATUS[status] + b"\r\nContent-Length: 0\r\n\r\n")
        self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        self.conns.pop(conn.client, None)
        for sock in (conn.client, conn.server):
            if sock is not None:
                self.loop.forget(sock)

    def close(self) -> None:
        self.loop.close()  # the thread stopped; the listener and every socket it held closed
        for conn in list(self.conns.values()):
            self._drop(conn)  # a pair made in the last turn, not yet watched
