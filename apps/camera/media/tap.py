"""A stream's encoded video as it arrives (clips keep a camera's own packets)."""

from __future__ import annotations

import collections
import threading


class PacketTap:
    """A stream's encoded video as it arrives, before decoding: H.264 or H.265 access units in
    byte-stream form, parameter sets before every key frame, each ``(t_pts, t_dts, key, bytes,
    connection)`` with its times on the frames' clock (the capture time a frame of it gets) and
    the number of the segment it came in: a connection, or a picture size within one (a camera
    that reboots may come back with other parameter sets, one set to another size may change it
    mid-stream: what was kept of the one before must not run on into it). What clips keep
    of an RTSP camera: its own packets, never decoded and encoded again, as NVRs record. Filled
    on GStreamer's streaming thread, drained by the output thread; bounded: when nobody drains,
    the oldest go (``lost`` counts them)."""

    def __init__(self, maxlen: int = 4096) -> None:
        self.codec: str | None = None  # h264, h265: set when the stream's pad appears
        self.connection = 0  # counted up by each connection that feeds it
        self.lost = 0
        self._q: collections.deque = collections.deque()
        self._maxlen = maxlen
        self._lock = threading.Lock()

    def put(self, packet: tuple) -> None:
        with self._lock:
            if len(self._q) >= self._maxlen:
                self._q.popleft()
                self.lost += 1
            self._q.append(packet)

    def drain(self) -> list:
        with self._lock:
            out = list(self._q)
            self._q.clear()
        return out
