"""The pipeline's queues: a stream's drop-oldest queue (live sources; lossless for files) and the
end marker that closes one."""

from __future__ import annotations

import collections
import queue
import threading

END = object()  # put after the last item: the reader's stream (or stage) ended


class DropOldestQueue:
    """A bounded queue whose put() never blocks: when full, the oldest item is dropped (counted).

    ``lossless=True`` (files and folders, where every frame matters and nothing is live) makes
    put() wait for room instead, until :meth:`close` (the pipeline stopping) releases it. Queues
    may share one condition (``cond``) so that one thread can wait on several of them.
    """

    def __init__(self, maxsize: int = 1, lossless: bool = False, cond=None, on_drop=None) -> None:
        self._items: collections.deque = collections.deque()
        self.maxsize = max(1, maxsize)
        self.lossless = lossless
        self.on_drop = on_drop  # told of each item dropped (a prepared frame lets go its model)
        self.dropped = 0
        self.closed = False
        self._cond = cond if cond is not None else threading.Condition()

    def put(self, item) -> None:
        with self._cond:
            if self.lossless and item is not END:
                self._cond.wait_for(lambda: len(self._items) < self.maxsize or self.closed)
                if self.closed:
                    return  # the pipeline is stopping: nobody will take it
            elif item is not END:
                while len(self._items) >= self.maxsize:
                    old = self._items.popleft()
                    if old is END:  # never drop the end marker
                        self._items.appendleft(old)
                        break
                    self.dropped += 1
                    if self.on_drop is not None:
                        self.on_drop(old)
            self._items.append(item)
            self._cond.notify_all()

    def get(self, timeout: float | None = None):
        with self._cond:
            if not self._cond.wait_for(lambda: self._items, timeout):
                raise queue.Empty
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def empty(self) -> bool:
        with self._cond:
            return not self._items

    def poll(self):
        """The next item, or None when there is none (never waits)."""
        with self._cond:
            if not self._items:
                return None
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def grow(self, more: int = 1) -> None:
        """Room for ``more`` items (a stream added to a running pipeline); a put waiting for
        room takes it at once."""
        with self._cond:
            self.maxsize += more
            self._cond.notify_all()

    def close(self) -> None:
        """Release puts waiting for room (they drop their item) and refuse later ones."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()
