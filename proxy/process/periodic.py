"""A service that calls a function every so often on the loop (the throttle-episode sweep, for one)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..observability.log import get_logger

_log = get_logger("sluice.services")


class Periodic:
    """Calls `tick(now_ms)` every `interval_s` from start until stop (`now_ms` on the loop's clock).

    The ticks fall on whole multiples of the interval on the wall clock, as the usage publisher's intervals
    do: every periodic service of the process then wakes the idle event loop at the same instants, once a
    second rather than once per service and phase (a wake-up of an idle loop costs more CPU than most
    ticks do)."""

    def __init__(
        self,
        name: str,
        interval_s: float,
        tick: Callable[[int], object],
        wall_s: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self._wall_s = wall_s
        self._interval_s = interval_s
        self._tick = tick
        self._timer: asyncio.TimerHandle | None = None
        self._boundary = 0.0  # the wall-clock time (s) the next tick is for

    async def start(self) -> None:
        self._schedule(asyncio.get_running_loop())

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        interval, now = self._interval_s, self._wall_s()
        # The next multiple after the one this tick was for: a timer may fire a little before its boundary
        # by the wall clock, and that boundary is not ticked twice.
        self._boundary = max((now // interval + 1) * interval, self._boundary + interval)
        self._timer = loop.call_later(self._boundary - now, self._run, loop)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self._tick(int(loop.time() * 1000))
        except Exception:
            # A tick that fails is logged and the next one still comes: a service that stopped at its first
            # error (the broker shield's control loop, the memory return) would leave nothing running and
            # nothing to show it.
            _log.exception("periodic_tick_failed", service=self.name)
        self._schedule(loop)
