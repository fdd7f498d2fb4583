"""One quota however many connections (issue 14 item 4): an entity-wide gate.

A broker charges a request, then mutes the connection that sent it. N connections of one entity therefore
each get a request through before their own mute: 2,000 connections under one 50 kB/s quota reached
115 kB/s. With `quota.mute_scope: entity` (opt-in) a throttle holds the entity instead: while its
gate is shut, a request of the same entity on any connection waits (the filter defers it) and is charged
only when the gate lets it in. Waiting requests are let in one at a time, in arrival order: the first
after the deadline, the next after the throttle that one earned (or at once when it earned none). So
the entity is admitted at its quota whatever the number of connections, and each admission costs one
timer, not a wake-up of every waiting connection.

`quota.mute_scope: connection` keeps Kafka's exact per-connection mute (no gate).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable

# A request let in comes back through `admitted` at once; if it never does (its connection closed as it
# was woken), the next waiter is let in after this long rather than never.
_RESUME_GRACE_S = 1.0


class _Gate:
    __slots__ = ("open_at_ms", "timer", "waiters")

    def __init__(self) -> None:
        self.open_at_ms = 0
        self.waiters: deque[asyncio.Future[object]] = deque()
        self.timer: asyncio.TimerHandle | None = None


class EntityGates:
    """The gates of every throttled entity (keyed by quota key and metric tags), shared by connections."""

    __slots__ = ("_gates", "_loop", "_now_ms")

    def __init__(
        self, loop: asyncio.AbstractEventLoop | None = None, now_ms: Callable[[], int] | None = None
    ) -> None:
        """`loop`: the running loop when first needed (a timer or a future), unless given."""
        self._loop = loop
        self._now_ms = now_ms
        self._gates: dict[Hashable, _Gate] = {}

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def __len__(self) -> int:
        return len(self._gates)

    def wait(self, key: Hashable, now_ms: int) -> asyncio.Future[object] | None:
        """None: go on now. Otherwise a future done when this request's turn comes (then call `admitted`
        once it is charged); cancel it to leave the queue."""
        gate = self._gates.get(key)
        if gate is None or (not gate.waiters and now_ms >= gate.open_at_ms):
            return None
        turn: asyncio.Future[object] = self._event_loop().create_future()
        gate.waiters.append(turn)
        self._schedule(key, gate, now_ms)
        return turn

    def admitted(self, key: Hashable, throttle_ms: int, now_ms: int) -> None:
        """A request of `key` was charged and earned `throttle_ms`: shut the gate that long, and let the next
        waiter in when it opens."""
        gate = self._gates.get(key)
        if throttle_ms > 0:
            if gate is None:
                gate = self._gates[key] = _Gate()
            gate.open_at_ms = max(gate.open_at_ms, now_ms + throttle_ms)
        if gate is None:
            return
        if gate.timer is not None:
            gate.timer.cancel()
            gate.timer = None
        self._schedule(key, gate, now_ms)

    def _schedule(self, key: Hashable, gate: _Gate, now_ms: int) -> None:
        if gate.timer is not None or not gate.waiters:
            if not gate.waiters and now_ms >= gate.open_at_ms and gate.timer is None:
                del self._gates[key]  # open and nobody waits: forget the entity
            return
        delay_s = max(0, gate.open_at_ms - now_ms) / 1000
        gate.timer = self._event_loop().call_later(delay_s, self._open, key, gate)

    def _open(self, key: Hashable, gate: _Gate) -> None:
        gate.timer = None
        while gate.waiters:
            turn = gate.waiters.popleft()
            if not turn.done():  # a waiter whose connection closed was cancelled
                turn.set_result(None)
                # Its request comes back through `admitted`, which schedules the next one.
                gate.timer = self._event_loop().call_later(_RESUME_GRACE_S, self._open, key, gate)
                return
        loop = self._event_loop()
        now_ms = self._now_ms() if self._now_ms is not None else int(loop.time() * 1000)
        if self._gates.get(key) is gate and now_ms >= gate.open_at_ms:
            del self._gates[key]
