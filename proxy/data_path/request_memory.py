"""The proxy-wide budget for request bytes still arriving (Kafka's queued.max.request.bytes): many slow
senders of large frames cannot together take the memory the others need.

A frame that does not arrive in one read is buffered until it is whole. As soon as its length prefix is
read, the connection reserves the frame's whole size here; when that does not fit, the connection stops
being read until enough is released, and waiting connections are served in turn. Reserving the whole
frame up front (as Kafka's memory pool does) means a connection that holds a reservation can always
finish its frame, so the budget cannot deadlock; a connection waiting holds at most the one read it
already had.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable


class RequestMemory:
    """Bytes reserved by frames being assembled, across every connection of one proxy."""

    __slots__ = ("_waiting", "limit", "used", "waits")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.waits = 0  # how many times a connection had to wait (a metric)
        self._waiting: OrderedDict[object, tuple[int, Callable[[], None]]] = OrderedDict()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def reserve(self, size: int) -> bool:
        """Take `size` bytes if they fit (nobody waits before us); False means wait()."""
        if self._waiting or self.used + size > self.limit:
            return False
        self.used += size
        return True

    def wait(self, key: object, size: int, granted: Callable[[], None]) -> None:
        """Queue `key` for `size` bytes; `granted()` is called once they are reserved for it."""
        self.waits += 1
        self._waiting[key] = (size, granted)

    def cancel(self, key: object) -> None:
        self._waiting.pop(key, None)

    def release(self, size: int) -> None:
        self.used -= size
        while self._waiting:
            key, (wanted, granted) = next(iter(self._waiting.items()))
            if self.used + wanted > self.limit:
                return  # in turn: a large frame is not overtaken for ever by small ones
            del self._waiting[key]
            self.used += wanted
            granted()
