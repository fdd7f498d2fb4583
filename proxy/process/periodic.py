"""A service that calls a function every so often on the loop (the throttle-episode sweep, for one)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..observability.log import get_logger

_log = get_logger("sluice.services")


class Periodic:
    """Calls `tick(now_ms)` every `interval_s` from start until stop, on the loop's clock."""

    def __init__(self, name: str, interval_s: float, tick: Callable[[int], object]) -> None:
        self.name = name
        self._interval_s = interval_s
        self._tick = tick
        self._timer: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        self._schedule(asyncio.get_running_loop())

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(self._interval_s, self._run, loop)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self._tick(int(loop.time() * 1000))
        except Exception:
            # A tick that fails is logged and the next one still comes: a service that stopped at its first
            # error (the broker shield's control loop, the memory return) would leave nothing running and
            # nothing to show it.
            _log.exception("periodic_tick_failed", service=self.name)
        self._schedule(loop)
