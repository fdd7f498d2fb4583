"""Stand-ins for asyncio's loop and transport, driven by hand so every instant is exact (for the throttle
gate and the request pipeline, which are tested with the real gate on this clock)."""

from __future__ import annotations

import heapq
import itertools


class ManualLoop:
    """Just enough of an event loop: a clock that moves only when told, and call_at."""

    def __init__(self) -> None:
        self.now = 100.0
        self._timers: list[tuple[float, int, ManualTimer]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback) -> ManualTimer:
        timer = ManualTimer(callback)
        heapq.heappush(self._timers, (when, next(self._order), timer))
        return timer

    def advance(self, seconds: float) -> None:
        target = self.now + seconds
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            self.now = max(self.now, when)
            if not timer.cancelled:
                timer.callback()
        self.now = target


class ManualTimer:
    def __init__(self, callback) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class RecordingTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.reading = True
        self.buffered = 0

    def writelines(self, frames) -> None:
        self.written.extend(bytes(f) for f in frames)

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return False
