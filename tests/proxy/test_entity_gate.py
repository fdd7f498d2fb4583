"""EntityGates on a manual clock: a throttled entity's gate lets waiting requests in one at a time, in
arrival order, each after the throttle the one before it earned; forgotten once open and unused."""

from __future__ import annotations

import asyncio

from sluice.proxy.data_path.entity_gate import TIMED_OUT, EntityGates


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


async def test_the_connection_let_in_least_recently_goes_first() -> None:
    timers = ManualTimers(asyncio.get_running_loop())
    gates = EntityGates(timers, lambda: timers.now_ms)  # type: ignore[arg-type]
    key = ("produce", "c")
    gates.admitted(key, 100, 0)
    served_lately = gates.wait(key, 10, rank=90)  # first to arrive, but its connection was let in at 90
    waited_long = gates.wait(key, 20, rank=5)
    also_long = gates.wait(key, 30, rank=5)  # the same rank: arrival order
    assert served_lately is not None and waited_long is not None and also_long is not None
    timers.advance(100)
    assert waited_long.done() and not also_long.done() and not served_lately.done()
    gates.admitted(key, 10, 100)
    timers.advance(10)
    assert also_long.done() and not served_lately.done()


class Crowd:
    """Many connections of one entity producing flat out through its gate, on the manual clock: each
    admission earns THROTTLE_MS (the gate's quota), the connection is muted that long and then sends its
    next request; a request not let in within its client's timeout is answered TIMED_OUT and sent again
    after a random back-off (seeded), as producers do."""

    THROTTLE_MS = 100
    TIMEOUT_MS = 2_500

    def __init__(self, timers: ManualTimers, connections: int, seed: int) -> None:
        import random

        self._timers = timers
        self._random = random.Random(seed)
        self.gates = EntityGates(timers, lambda: timers.now_ms)  # type: ignore[arg-type]
        self.admitted = [0] * connections
        self._rank = [0] * connections  # what ClientQuotas passes: when each was last let in
        for conn in range(connections):
            timers.call_later(self._random.uniform(0, 1), self._send, conn)

    def _send(self, conn: int) -> None:
        now = self._timers.now_ms
        turn = self.gates.wait("entity", now, now + self.TIMEOUT_MS, rank=self._rank[conn])
        if turn is None:
            self._admit(conn)
            return

        def settled(turn: asyncio.Future) -> None:
            if turn.result() is TIMED_OUT:
                self._timers.call_later(self._random.uniform(0, 0.8), self._send, conn)
            else:
                self._admit(conn)

        turn.add_done_callback(settled)

    def _admit(self, conn: int) -> None:
        now = self._timers.now_ms
        self.admitted[conn] += 1
        self._rank[conn] = now
        self.gates.admitted("entity", self.THROTTLE_MS, now)
        self._timers.call_later(self.THROTTLE_MS / 1000 + self._random.uniform(0, 0.05), self._send, conn)

    async def run(self, until_ms: int) -> None:
        timers = self._timers
        while timers.now_ms < until_ms:
            due = [at for at, _callback, _args, cancelled in timers.timers if not cancelled]
            timers.advance(max(1, int(min(due)) - timers.now_ms) if due else 1)
            await asyncio.sleep(0)  # the turns' done callbacks run


async def test_every_connection_of_an_entity_gets_its_turn_whatever_their_timeouts() -> None:
    # 50 connections, one admission per 100 ms: a round of the entity's connections takes 5 s, twice the
    # clients' 2.5 s timeout, so most requests time out once before their turn (as 2,000 connections under
    # one 50 kB/s quota did). In arrival order, whoever happened to wait less was let in: over 10 whole
    # rounds, connections got from 0 to 20 admissions. In turn, each gets one a round.
    connections, rounds = 50, 10
    for seed in range(3):
        timers = ManualTimers(asyncio.get_running_loop())
        crowd = Crowd(timers, connections, seed)
        await crowd.run(rounds * connections * Crowd.THROTTLE_MS + 1000)
        assert sum(crowd.admitted) >= rounds * connections  # the quota's rate, whole periods
        assert min(crowd.admitted) >= rounds - 1, sorted(crowd.admitted)
        assert max(crowd.admitted) <= rounds + 1, sorted(crowd.admitted)
