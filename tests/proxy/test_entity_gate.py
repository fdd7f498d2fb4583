"""EntityGates on a manual clock: a throttled entity's gate lets waiting requests in one at a time, in
arrival order, each after the throttle the one before it earned; forgotten once open and unused."""

from __future__ import annotations

import asyncio

from sluice.proxy.filters.entity_gate import TIMED_OUT, EntityGates


class ManualTimers:
    """A loop stand-in: real futures, timers fired by hand."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.now_ms = 0
        self.timers: list[tuple[float, object, tuple]] = []

    def create_future(self) -> asyncio.Future:
        return self._loop.create_future()

    def call_later(self, delay_s: float, callback, *args):  # type: ignore[no-untyped-def]
        entry = [self.now_ms + delay_s * 1000, callback, args, False]

        class Handle:
            def cancel(self) -> None:
                entry[3] = True

        self.timers.append(entry)  # type: ignore[arg-type]
        return Handle()

    def time(self) -> float:
        return self.now_ms / 1000

    def advance(self, ms: int) -> None:
        self.now_ms += ms
        due = [t for t in self.timers if t[0] <= self.now_ms and not t[3]]
        self.timers = [t for t in self.timers if t not in due]
        for _at, callback, args, _cancelled in sorted(due, key=lambda t: t[0]):
            callback(*args)


async def test_waiters_are_let_in_one_at_a_time_in_order() -> None:
    timers = ManualTimers(asyncio.get_running_loop())
    gates = EntityGates(timers, lambda: timers.now_ms)  # type: ignore[arg-type]
    key = ("produce", "many")
    assert gates.wait(key, 0) is None  # no throttle yet: go on
    gates.admitted(key, 100, 0)  # that request earned 100 ms
    timers.advance(10)
    first, second = gates.wait(key, 10), gates.wait(key, 10)
    assert first is not None and second is not None
    timers.advance(89)
    assert not first.done()
    timers.advance(1)
    assert first.done() and not second.done()  # one at a time
    gates.admitted(key, 50, 100)  # the first, charged, earned 50 ms more
    timers.advance(49)
    assert not second.done()
    timers.advance(1)
    assert second.done()
    gates.admitted(key, 0, 150)  # under quota now, nobody waits: the gate is forgotten
    assert len(gates) == 0
    assert gates.wait(key, 150) is None


async def test_a_cancelled_waiter_is_skipped() -> None:
    timers = ManualTimers(asyncio.get_running_loop())
    gates = EntityGates(timers, lambda: timers.now_ms)  # type: ignore[arg-type]
    key = ("produce", "c")
    gates.admitted(key, 100, 0)
    gone, stays = gates.wait(key, 0), gates.wait(key, 0)
    assert gone is not None and stays is not None
    gone.cancel()  # its connection closed
    timers.advance(100)
    assert stays.done()


async def test_a_woken_waiter_that_never_comes_back_does_not_stall_the_rest() -> None:
    timers = ManualTimers(asyncio.get_running_loop())
    gates = EntityGates(timers, lambda: timers.now_ms)  # type: ignore[arg-type]
    key = ("produce", "c")
    gates.admitted(key, 10, 0)
    woken, behind = gates.wait(key, 0), gates.wait(key, 0)
    timers.advance(10)
    assert woken is not None and woken.done() and behind is not None and not behind.done()
    timers.advance(1000)  # `admitted` never came for the woken one (its connection closed meanwhile)
    assert behind.done()


async def test_a_waiter_past_its_deadline_leaves_the_queue_timed_out_and_the_next_gets_the_turn() -> None:
    timers = ManualTimers(asyncio.get_running_loop())
    gates = EntityGates(timers, lambda: timers.now_ms)  # type: ignore[arg-type]
    key = ("produce", "tight")
    gates.admitted(key, 3000, 0)  # shut for 3 s
    given_up = gates.wait(key, 0, deadline_ms=1000)  # its client waits 1 s
    patient = gates.wait(key, 500, deadline_ms=30_500)
    assert given_up is not None and patient is not None
    assert gates.shut_for_ms(key, 900) == 2100
    timers.advance(999)
    assert not given_up.done()
    timers.advance(1)
    assert given_up.done() and given_up.result() is TIMED_OUT  # left without its turn
    assert not patient.done()
    timers.advance(2000)  # the gate opens: the turn goes to the one still waiting
    assert patient.done() and patient.result() is None


async def test_a_waiter_let_in_before_its_deadline_is_not_timed_out_later() -> None:
    timers = ManualTimers(asyncio.get_running_loop())
    gates = EntityGates(timers, lambda: timers.now_ms)  # type: ignore[arg-type]
    key = ("produce", "c")
    gates.admitted(key, 100, 0)
    turn = gates.wait(key, 0, deadline_ms=1000)
    assert turn is not None
    timers.advance(100)
    assert turn.result() is None
    await asyncio.sleep(0)  # the done callback that cancels its expiry runs
    expiries = [t for t in timers.timers if t[1].__name__ == "_time_out"]  # type: ignore[attr-defined]
    assert expiries and all(cancelled for *_, cancelled in expiries)  # no timer left to fire for it
    timers.advance(5000)
    assert turn.result() is None
    assert gates.shut_for_ms(key, 5100) == 0
