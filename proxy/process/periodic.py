"""A service that calls a function every so often on the loop (the throttle-episode sweep, for one)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..observability.log import get_logger

_log = get_logger("sluice.services")


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Periodic:
    """Calls `tick(now_ms)` every `interval_s` from start until stop (`now_ms` on the loop's clock).

    The ticks fall on whole multiples of the interval on the wall clock, in whole milliseconds, as the usage
    publisher's intervals end: every periodic service of the process then wakes the idle event loop at the
    same instants, once a second rather than once per service and phase (a wake-up of an idle loop costs
    more CPU than most ticks do)."""

    def __init__(
        self,
        name: str,
        interval_s: float,
        tick: Callable[[int], object],
        wall_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self.name = name
        self._wall_ms = wall_ms
        self._interval_ms = max(1, round(interval_s * 1000))
        self._tick = tick
        self._timer: asyncio.TimerHandle | None = None
        self._boundary_ms = 0  # the wall-clock time the next tick is for

    async def start(self) -> None:
        self._schedule(asyncio.get_running_loop())

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        interval, now = self._interval_ms, self._wall_ms()
        # The next multiple after the one this tick was for: a timer may fire a little before its boundary
        # by the wall clock, and that boundary is not ticked twice. (The usage publisher's arithmetic, so
        # that both timers get the same deadline and fire in one turn of the loop.)
        self._boundary_ms = max((now // interval + 1) * interval, self._boundary_ms + interval)
        self._timer = loop.call_later((self._boundary_ms - now) / 1000, self._run, loop)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self._tick(int(loop.time() * 1000))
        except Exception:
            # A tick that fails is logged and the next one still comes: a service that stopped at its first
            # error (the broker shield's control loop, the memory return) would leave nothing running and
            # nothing to show it.
            _log.exception("periodic_tick_failed", service=self.name)
        self._schedule(loop)
