"""One quota however many connections: an entity-wide gate.

A broker charges a request, then mutes the connection that sent it. N connections of one entity therefore
each get a request through before their own mute: 2,000 connections under one 50 kB/s quota reached
115 kB/s. With `quota.mute_scope: entity` (the default) a throttle holds the entity instead: while its
gate is shut, a request of the same entity on any connection waits (the filter defers it) and is charged
only when the gate lets it in. Waiting requests are let in one at a time: the first after the deadline,
the next after the throttle that one earned (or at once when it earned none). So the entity is admitted
at its quota whatever the number of connections, and each admission costs one timer, not a wake-up of
every waiting connection.

Whose turn: the connection let in least recently (its `rank`: when it was last let in, or opened), then
arrival order. The entity's connections are served in turn, one request each per round, and a
connection whose request timed out keeps its place for the copy it sends again. In arrival order alone,
a request was let in only if its wait happened to be short enough: with 2,000 connections under one
50 kB/s quota, a third of the requests timed out and 69 connections got no answer in the whole run
while others got one every round.

A waiter may bring a deadline (its client's `timeout_ms`): past it, it leaves the queue with `TIMED_OUT`
rather than its turn. Its client has given up on it and sent it again, and a queue that kept every copy
would spend the quota on requests nobody waits for: under a tight quota with short client timeouts, the
copies outnumbered the live requests and delivery all but stopped.

`quota.mute_scope: connection` keeps Kafka's exact per-connection mute (no gate).
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Hashable
from itertools import count

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.headers import RequestHeader, encode_response
from sluice.protocol.produce import REQUEST_TIMED_OUT, produce_acks_and_timeout, produce_error_body
from sluice.protocol.produce_topics import produce_partitions

from ..filter_api.contract import Answer, Frame

# A request let in comes back through `admitted` at once; if it never does (its connection closed as it
# was woken), the next waiter is let in after this long rather than never.
_RESUME_GRACE_S = 1.0


class _TimedOut:
    """What a waiter's future holds when its deadline passed before its turn came."""

    def __repr__(self) -> str:
        return "TIMED_OUT"


TIMED_OUT = _TimedOut()


class _Gate:
    __slots__ = ("open_at_ms", "timer", "waiters")

    def __init__(self) -> None:
        self.open_at_ms = 0
        # A heap of (rank, arrival number, turn): the least recently served connection first.
        self.waiters: list[tuple[int, int, asyncio.Future[object]]] = []
        self.timer: asyncio.TimerHandle | None = None


class EntityGates:
    """The gates of every throttled entity (keyed by quota key and metric tags), shared by connections."""

    __slots__ = ("_arrivals", "_loop", "_now_ms", "shut", "waiting")

    def __init__(
        self, loop: asyncio.AbstractEventLoop | None = None, now_ms: Callable[[], int] | None = None
    ) -> None:
        """`loop`: the running loop when first needed (a timer or a future), unless given."""
        self._loop = loop
        self._now_ms = now_ms
        # The gates of the entities throttled now (or with requests still waiting), by key; read only outside
        # this class: its len() is how many, which every Produce of a throttled client's proxy asks (a
        # dict's len, where len(self) is a Python call).
        self.shut: dict[Hashable, _Gate] = {}
        self._arrivals = count()
        # Requests waiting for their turn now, at every gate (a metric: nothing waits unseen).
        self.waiting = 0

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def __len__(self) -> int:
        return len(self.shut)

    def wait(
        self, key: Hashable, now_ms: int, deadline_ms: int | None = None, rank: int | None = None
    ) -> asyncio.Future[object] | None:
        """None: go on now. Otherwise a future done when this request's turn comes (result None: call
        `admitted` once it is charged) or, given a deadline, when that passes first (result TIMED_OUT: it
        left the queue); cancel it to leave the queue. `rank`: when the request's connection was last let
        in (or opened); lower ranks go first, equal ones in arrival order (without one, `now_ms`)."""
        gate = self.shut.get(key)
        if gate is None:
            return None
        waiters = gate.waiters
        while waiters and waiters[0][2].done():
            heapq.heappop(waiters)  # timed out or cancelled: no longer in the way
        if not waiters and now_ms >= gate.open_at_ms:
            return None
        loop = self._event_loop()
        turn: asyncio.Future[object] = loop.create_future()
        heapq.heappush(waiters, (now_ms if rank is None else rank, next(self._arrivals), turn))
        self.waiting += 1
        turn.add_done_callback(self._left)
        if deadline_ms is not None:
            expiry = loop.call_later(max(0, deadline_ms - now_ms) / 1000, _time_out, turn)
            turn.add_done_callback(lambda _turn: expiry.cancel())
        self._schedule(key, gate, now_ms)
        return turn

    def _left(self, _turn: asyncio.Future[object]) -> None:
        self.waiting -= 1  # let in, timed out, or its connection closed

    def shut_for_ms(self, key: Hashable, now_ms: int) -> int:
        """How long the gate of `key` stays shut from now (0 when open)."""
        gate = self.shut.get(key)
        return 0 if gate is None else max(0, gate.open_at_ms - now_ms)

    def admitted(self, key: Hashable, throttle_ms: int, now_ms: int) -> None:
        """A request of `key` was charged and earned `throttle_ms`: shut the gate that long, and let the next
        waiter in when it opens."""
        gate = self.shut.get(key)
        if throttle_ms > 0:
            if gate is None:
                gate = self.shut[key] = _Gate()
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
                del self.shut[key]  # open and nobody waits: forget the entity
            return
        delay_s = max(0, gate.open_at_ms - now_ms) / 1000
        gate.timer = self._event_loop().call_later(delay_s, self._open, key, gate)

    def _open(self, key: Hashable, gate: _Gate) -> None:
        gate.timer = None
        while gate.waiters:
            turn = heapq.heappop(gate.waiters)[2]
            if not turn.done():  # done already: its connection closed (cancelled), or it timed out
                turn.set_result(None)
                # Its request comes back through `admitted`, which schedules the next one.
                gate.timer = self._event_loop().call_later(_RESUME_GRACE_S, self._open, key, gate)
                return
        loop = self._event_loop()
        now_ms = self._now_ms() if self._now_ms is not None else int(loop.time() * 1000)
        if self.shut.get(key) is gate and now_ms >= gate.open_at_ms:
            del self.shut[key]


def _time_out(turn: asyncio.Future[object]) -> None:
    # Left in the queue, done: the gate skips it when it comes to it.
    if not turn.done():
        turn.set_result(TIMED_OUT)


def produce_deadline_ms(header: RequestHeader, frame: Frame, read_ms: int) -> int | None:
    """When the client of a Produce read at `read_ms` stops waiting for it: `timeout_ms` later. None for
    acks=0 (nobody waits for an answer) or a timeout of 0 or less (no limit given)."""
    acks, timeout_ms = produce_acks_and_timeout(frame, header)
    if acks == 0 or timeout_ms <= 0:
        return None
    return read_ms + timeout_ms


def timed_out_answer(header: RequestHeader, frame: Frame, throttle_ms: int) -> Answer:
    """The answer to a Produce whose client's timeout passed while it waited: REQUEST_TIMED_OUT for every
    partition, as a broker answers a request it could not complete within `timeout_ms`. Nothing was
    written, so the client sends it again (it is retriable); `throttle_ms` (in the body only) tells a
    KIP-219 client how long the gate stays shut."""
    body = produce_error_body(
        header.api_version, produce_partitions(frame, header), REQUEST_TIMED_OUT, throttle_ms
    )
    return Answer(encode_response(ApiKey.PRODUCE, header.api_version, header.correlation_id, body))
