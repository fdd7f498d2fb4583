"""A periodic service survives a tick that raises: the error is logged with the service's name, and the
next tick comes as if nothing had happened (before, the first error ended the service silently)."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from sluice.proxy.process.periodic import Periodic


async def test_a_tick_that_raises_is_logged_and_the_next_tick_still_comes() -> None:
    ticks: list[int] = []
    second = asyncio.get_running_loop().create_future()

    def tick(now_ms: int) -> None:
        ticks.append(now_ms)
        if len(ticks) == 1:
            raise RuntimeError("the first tick fails")
        if not second.done():
            second.set_result(None)

    service = Periodic("flaky", 0.01, tick)
    with structlog.testing.capture_logs() as logs:
        await service.start()
        try:
            await asyncio.wait_for(second, timeout=30)  # the event: a tick after the failed one
        finally:
            await service.stop()
    assert len(ticks) >= 2
    failed = [entry for entry in logs if entry["event"] == "periodic_tick_failed"]
    assert len(failed) == 1 and failed[0]["service"] == "flaky"
    assert failed[0]["log_level"] == "error"


class _Timers:
    """A loop's timer as Periodic uses it: the delays asked for, and the callback to fire by hand."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.due: tuple[object, ...] = ()

    def call_later(self, delay: float, callback, *args):  # type: ignore[no-untyped-def]
        self.delays.append(delay)
        self.due = (callback, *args)

    def time(self) -> float:
        return 0.0

    def fire(self) -> None:
        callback, *args = self.due
        callback(*args)  # type: ignore[operator]


def test_ticks_fall_on_whole_seconds_of_the_wall_clock_and_an_early_timer_does_not_tick_twice() -> None:
    wall = [1000.3]
    timers = _Timers()
    ticks: list[int] = []
    service = Periodic("aligned", 1.0, ticks.append, wall_s=lambda: wall[0])
    service._schedule(timers)  # type: ignore[arg-type]
    assert timers.delays[-1] == pytest.approx(0.7)  # to 1001.0, shared with every other service's tick
    wall[0] = 1000.9995  # the loop's timer fired half a millisecond early by the wall clock
    timers.fire()
    assert timers.delays[-1] == pytest.approx(1.0005)  # to 1002.0, not to 1001.0 again
    wall[0] = 1004.25  # the loop was busy past two boundaries: the next one to come, not the missed ones
    timers.fire()
    assert timers.delays[-1] == pytest.approx(0.75)
    assert len(ticks) == 2
