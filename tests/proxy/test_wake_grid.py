"""proxy/wake_grid.py: the background's wake-ups end on multiples of their period on the wall clock, and the
services time theirs by it: the periodic ticks, the quota store follower's long polls in `sluice run`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from sluice.config import load_config
from sluice.proxy.control_plane.quota_store_service import FOLLOW_MIN_WAIT_MS, FOLLOW_WAIT_MS
from sluice.proxy.process.periodic import Periodic
from sluice.proxy.process.server import SluiceServer
from sluice.proxy.wake_grid import ms_to_boundary, next_boundary, wall_clock_ms


@pytest.mark.parametrize(
    ("now", "period", "at_least", "wait"),
    [
        (1_000_123, 250, 1, 127),  # up to the next quarter second (a period of 250 ms)
        (1_000_250, 250, 1, 250),  # on an instant: the next one, never 0
        (1_000_249, 250, 1, 1),
        (1_000_249, 250, 50, 251),  # too close: the instant after it
        (1_000_200, 250, 50, 50),  # exactly the shortest wait allowed
        (1_000_201, 250, 50, 299),
        (1_000_999, 1000, 500, 1001),
        (1_000_499, 1000, 500, 501),
    ],
)
def test_a_wait_ends_on_the_grid_and_is_never_shorter_than_asked(
    now: int, period: int, at_least: int, wait: int
) -> None:
    assert ms_to_boundary(now, period, at_least) == wait
    assert (now + wait) % period == 0 and wait >= at_least
    assert ms_to_boundary(now, period, at_least) - period < at_least  # and the first such instant


def test_the_next_boundary_is_after_now() -> None:
    assert next_boundary(1_000_123, 1000) == 1_001_000
    assert next_boundary(1_001_000, 1000) == 1_002_000


class _Timers:
    """The loop as Periodic asks it: which delay each timer was set for (no time passes)."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.callbacks: list[Callable[[], object]] = []

    def call_later(self, delay: float, callback: Callable[..., object], *args: object) -> object:
        self.delays.append(delay)
        self.callbacks.append(lambda: callback(*args))
        return object()  # the handle: never cancelled here

    def time(self) -> float:
        return 5.0


def test_a_periodic_tick_comes_on_the_multiples_of_its_interval_on_the_wall_clock() -> None:
    wall = [1_000_300]
    ticks: list[int] = []
    service = Periodic("tick", 1.0, ticks.append, wall_ms=lambda: wall[0])
    timers = _Timers()
    service._schedule(timers, 1)  # type: ignore[arg-type]  # as start() schedules the first (below)
    assert timers.delays == [0.7]  # the first: the next whole second, within one interval of the start
    wall[0] = 1_001_000
    timers.callbacks[-1]()  # it fires on time: the next whole second after it
    assert ticks == [5000] and timers.delays[-1] == 1.0
    wall[0] = 1_001_999  # a timer that fired a millisecond early by the wall clock
    timers.callbacks[-1]()
    assert timers.delays[-1] == 1.001  # the instant after, not the one it fired for (1 ms on)
    wall[0] = 1_003_400  # a tick that ran late: back on the grid at once, none made up
    timers.callbacks[-1]()
    assert timers.delays[-1] == 0.6 and len(ticks) == 3


def test_sluice_run_ends_the_quota_store_followers_long_polls_on_the_grid() -> None:
    config = load_config(overrides={"listen": "127.0.0.1:9092", "upstream.bootstrap": ["127.0.0.1:19092"]})
    server = SluiceServer(config)
    assert server.quota_store is not None
    for _ in range(20):
        before = wall_clock_ms()
        wait = server.quota_store._follow_wait_ms()
        after = wall_clock_ms()
        assert FOLLOW_MIN_WAIT_MS <= wait < FOLLOW_MIN_WAIT_MS + FOLLOW_WAIT_MS
        # The poll's end, from the moment asked (somewhere between the two readings), is on the grid.
        assert any((now + wait) % FOLLOW_WAIT_MS == 0 for now in range(before, after + 1))


def test_the_first_tick_comes_at_the_next_instant_however_close() -> None:
    # Started 100 ms before a whole second, a 1 s service ticks at it: within one interval of the start.
    async def first_delay() -> float:
        service = Periodic("tick", 1.0, lambda _ms: None, wall_ms=lambda: 1_000_900)
        loop = asyncio.get_running_loop()
        await service.start()
        try:
            assert service._timer is not None
            return service._timer.when() - loop.time()
        finally:
            await service.stop()

    assert 0.05 < asyncio.run(first_delay()) <= 0.1
