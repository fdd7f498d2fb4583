"""The idle-sensor sweep as a service: Kafka drops quota sensors idle for an hour, checking every 30 s
(spec 1.5), so memory follows the clients that are active, not every client ever seen."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

SENSOR_SWEEP_S = 30.0


class _Expiring(Protocol):
    def expire_idle_sensors(self, now_ms: int) -> object: ...


class _Handle(Protocol):
    def cancel(self) -> None: ...


Scheduler = Callable[[float, Callable[[], None]], _Handle]


class SensorSweep:
    """Calls `managers.expire_idle_sensors(now_ms())` at start and every `interval_s` until stopped.

    `now_ms` and `call_later` default to the running loop's clock and timer; tests inject their own.
    """

    name = "sensor_sweep"

    def __init__(
        self,
        managers: _Expiring,
        now_ms: Callable[[], int] | None = None,
        *,
        interval_s: float = SENSOR_SWEEP_S,
        call_later: Scheduler | None = None,
    ) -> None:
        self._managers = managers
        self._now_ms = now_ms
        self._interval_s = interval_s
        self._call_later = call_later
        self._timer: _Handle | None = None
        self._running = False

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._now_ms is None:
            self._now_ms = lambda: int(loop.time() * 1000)
        if self._call_later is None:
            self._call_later = loop.call_later
        self._running = True
        self._sweep()

    async def stop(self) -> None:
        self._running = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _sweep(self) -> None:
        if not self._running:
            return
        assert self._now_ms is not None and self._call_later is not None
        self._managers.expire_idle_sensors(self._now_ms())
        self._timer = self._call_later(self._interval_s, self._sweep)
