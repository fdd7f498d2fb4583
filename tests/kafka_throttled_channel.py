"""When a throttled connection may read again: Kafka's ``ThrottledChannel`` and reaper queue, sans-IO.

Kafka mutes a throttled channel and puts a ``ThrottledChannel`` (deadline = now + throttle) into a
``DelayQueue``; a reaper thread takes expired channels out one ``poll`` at a time and unmutes them
(spec §2.8, V18). The proxy's throttle gate keeps its own timers, so this model is test code: it pins
Kafka's ordering rules to the millisecond for the V18 golden vector.
"""

from __future__ import annotations

import heapq
from itertools import count


class ThrottledChannel:
    """A throttle that started at ``start_ms`` and lasts ``throttle_ms``; ``key`` names the connection."""

    __slots__ = ("deadline_ms", "key", "start_ms", "throttle_ms")

    def __init__(self, start_ms: int, throttle_ms: int, key: object = None) -> None:
        self.start_ms = start_ms
        self.throttle_ms = throttle_ms
        self.deadline_ms = start_ms + throttle_ms
        self.key = key

    def remaining_ms(self, now_ms: int) -> int:
        """Kafka's ``getDelay``: time left until the deadline; negative once it has passed."""
        return self.deadline_ms - now_ms

    def __repr__(self) -> str:
        return f"ThrottledChannel(key={self.key!r}, deadline_ms={self.deadline_ms})"


class ThrottleQueue:
    """Channels ordered by deadline (first in, first out on equal deadlines)."""

    __slots__ = ("_heap", "_order")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, ThrottledChannel]] = []
        self._order = count()

    def add(self, channel: ThrottledChannel) -> None:
        heapq.heappush(self._heap, (channel.deadline_ms, next(self._order), channel))

    def poll(self, now_ms: int) -> ThrottledChannel | None:
        """Take out the earliest channel whose deadline is <= now, or None: one per call, as the reaper."""
        heap = self._heap
        if heap and heap[0][0] <= now_ms:
            return heapq.heappop(heap)[2]
        return None

    def next_deadline_ms(self) -> int | None:
        """When the earliest channel expires, or None if the queue is empty."""
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        """Kafka's ``queue-size`` metric."""
        return len(self._heap)
