"""A service that calls a function every so often on the loop (the throttle-episode sweep, for one)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..observability.log import get_logger
from ..wake_grid import ms_to_boundary, wall_clock_ms

_log = get_logger("sluice.services")


class Periodic:
    """Calls `tick(now_ms)` (the loop's clock) every `interval_s` from start until stop, at the multiples of
    the interval on the wall clock: the background's wake-ups on one grid (proxy/wake_grid.py), so a tick
    shares its wake-up with the others due then. The first comes at the first such instant after the start
    (within one interval); a tick that ran more than half an interval late skips the instant that follows
    (none is made up)."""

    def __init__(
        self,
        name: str,
        interval_s: float,
        tick: Callable[[int], object],
        wall_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.name = name
        self._interval_ms = max(1, round(interval_s * 1000))
        self._tick = tick
        self._wall_ms = wall_ms
        self._timer: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        self._schedule(asyncio.get_running_loop(), 1)

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self, loop: asyncio.AbstractEventLoop, at_least_ms: int) -> None:
        """The next tick, at the first instant of the grid at least `at_least_ms` away."""
        wait_ms = ms_to_boundary(self._wall_ms(), self._interval_ms, at_least_ms)
        self._timer = loop.call_later(wait_ms / 1000, self._run, loop)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self._tick(int(loop.time() * 1000))
        except Exception:
            # A tick that fails is logged and the next one still comes: a service that stopped at its first
            # error (the broker shield's control loop, the memory return) would leave nothing running and
            # nothing to show it.
            _log.exception("periodic_tick_failed", service=self.name)
        # At least half an interval on: a timer that fired a little early by the wall clock must not find
        # the instant it fired for still ahead.
        self._schedule(loop, self._interval_ms // 2 or 1)
