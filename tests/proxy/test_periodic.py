"""A periodic service survives a tick that raises: the error is logged with the service's name, and the
next tick comes as if nothing had happened (before, the first error ended the service silently)."""

from __future__ import annotations

import asyncio

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
