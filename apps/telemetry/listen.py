"""What edgert's two bounded listeners share: the overflow lane of the HTTP servers
(:class:`~.http.QuietServer`: a probe answered while every slot is held) and the RTSP re-stream's
front (``camera/sinks/rtsp_front.py``: every request whole within its bounds before the server
sees it). Each reads its clients' requests on one thread, without blocking, within its own bounds
(request size, time, connections); :class:`SelectorThread` is that thread, its selector and the
sockets it watches, and :func:`receive` one read that cannot block."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time


def receive(sock, size: int) -> bytes | None:
    """What ``sock`` has, at most ``size`` bytes: None when nothing came yet (a non-blocking
    socket), ``b""`` at its end or on an error (the client went)."""
    try:
        return sock.recv(size)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""


def close_quietly(sock) -> None:
    with contextlib.suppress(OSError):
        sock.close()


class SelectorThread:
    """One thread and a selector. ``watch(sock, mask, data)`` sets the events a socket is
    watched for (0: not watched, still held) from any thread; ``forget(sock)`` stops watching it
    and closes it. Each turn, at most ``TURN_S`` apart, calls ``ready(sock, data, events)`` for
    each socket ready, then ``turn(now)`` (where the deadlines are kept), until :meth:`close`."""

    TURN_S = 0.2

    def __init__(self, name: str, ready, turn) -> None:
        self.ready, self.turn = ready, turn
        self.selector = selectors.DefaultSelector()
        self.masks: dict = {}  # socket -> the events it is watched for
        self.lock = threading.Lock()
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def watch(self, sock, mask: int, data=None) -> None:
        with self.lock:
            had = self.masks.get(sock)
            if mask == had:
                return
            with contextlib.suppress(KeyError, ValueError, OSError):
                if had and mask:
                    self.selector.modify(sock, mask, data)
                elif mask:
                    self.selector.register(sock, mask, data)
                elif had:
                    self.selector.unregister(sock)
            self.masks[sock] = mask  # held (closed by close()) even while not watched
        if threading.current_thread() is not self.thread:
            with contextlib.suppress(OSError):
                self.wake_w.send(b"x")  # the loop sees it now, not after its turn

    def forget(self, sock) -> None:
        with self.lock:
            if self.masks.pop(sock, 0):
                with contextlib.suppress(KeyError, ValueError, OSError):
                    self.selector.unregister(sock)
        close_quietly(sock)

    def _run(self) -> None:
        while not self.stopped.is_set():
            for key, events in self.selector.select(self.TURN_S):
                if key.fileobj is self.wake_r:
                    receive(self.wake_r, 4096)
                    continue
                self.ready(key.fileobj, key.data, events)
            self.turn(time.monotonic())

    def close(self) -> None:
        """The thread stopped (within a turn), then every socket still held closed."""
        self.stopped.set()
        with contextlib.suppress(OSError):
            self.wake_w.send(b"x")
        if self.thread is not threading.current_thread():
            self.thread.join(2.0)
        for sock in list(self.masks):
            self.forget(sock)
        for s in (self.wake_r, self.wake_w):
            s.close()
        self.selector.close()
