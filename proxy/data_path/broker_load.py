"""Bytes of requests in flight toward each broker, all connections together (Kafka's
`queued.max.request.bytes`, per broker).

A broker that reads a request's length allocates the whole request at once and keeps it until it has
handled it. Eight clients each sending the start of a 95 MiB request, streamed on by Sluice, took two
brokers of 512 MiB heap down with OutOfMemoryError. Sluice's own request memory protects Sluice, not the
brokers behind it: this protects them.

A request counts toward its broker from the moment its first byte is forwarded until its response
arrives (an acks=0 Produce, which gets none, until its last byte has been forwarded). Requests under
COUNTED_MIN_BYTES are not counted: a broker reads one in a single go, and counting every small request
would cost the hot path (it is the size from which Sluice forwards a request as it arrives, and from which
a broker can be left holding part of one). One that does not
fit under the broker's limit waits, after every filter has let it through (so a request waiting at a
quota gate holds nothing), and the requests behind it on its connection wait behind it (reading pauses,
as for any deferral); waiting connections are served in turn as responses release bytes. A request larger
than the whole limit goes when nothing else is in flight toward that broker, so nothing waits for ever.
Every connection to one broker address shares its load, whichever listener it came through (a bootstrap
connection counts toward the broker it reached).

`BrokerLoad` is the broker's count and queue; `LoadShare` is what one connection's RequestPipeline asks
(take room for a request, wait for it, give it back, give everything back when the connection closes).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator

# When neither the configuration nor the brokers (queued.max.request.bytes) say.
DEFAULT_MAX_IN_FLIGHT_BYTES = 256 * 1024 * 1024
COUNTED_MIN_BYTES = 64 * 1024


class BrokerLoad:
    """Bytes in flight toward one broker, and the connections waiting for room, in turn."""

    __slots__ = ("_waiting", "address", "limit", "used", "waits")

    def __init__(self, address: str, limit: int) -> None:
        self.address = address
        self.limit = limit
        self.used = 0
        self.waits = 0  # how many times a request had to wait (a metric)
        self._waiting: deque[tuple[LoadShare, int]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def fits(self, size: int) -> bool:
        """Whether `size` bytes may go now: under the limit (or nothing in flight), nobody waiting before."""
        used = self.used
        return not self._waiting and (used + size <= self.limit or used == 0)

    def release(self, size: int) -> None:
        self.used -= size
        waiting = self._waiting
        while waiting:
            share, size = waiting[0]
            if self.used + size > self.limit and self.used > 0:
                return  # in turn: a large request is not overtaken for ever by small ones
            waiting.popleft()
            if share.granted(size):  # (False: its connection went meanwhile)
                self.used += size

    def _wait(self, share: LoadShare, size: int) -> None:
        self.waits += 1
        self._waiting.append((share, size))

    def _leave(self, share: LoadShare) -> None:
        for entry in self._waiting:
            if entry[0] is share:
                self._waiting.remove(entry)
                return


class LoadShare:
    """One connection's part of its broker's load: what its RequestPipeline asks. The pipeline keeps the
    size of each counted request in flight (`InFlight.load`) and gives it back when the answer comes."""

    __slots__ = ("_grant", "_load", "_turn")

    def __init__(self, load: BrokerLoad) -> None:
        self._load = load
        self._grant = 0  # bytes reserved for the request that waited, until it goes
        self._turn: asyncio.Future[None] | None = None

    def take(self, size: int) -> bool:
        """A counted request of `size` bytes is about to be forwarded: True when it may go (its bytes count
        until `give`), False when it must wait (`wait`)."""
        load = self._load
        if self._grant:
            load.used += size - self._grant  # the request that waited (its size may differ by a rewrite)
            self._grant = 0
        elif load.fits(size):
            load.used += size
        else:
            return False
        return True

    def fits(self, size: int) -> bool:
        """Whether `take(size)` would succeed now (without taking)."""
        return self._grant >= size or self._load.fits(size)

    @property
    def waiting(self) -> bool:
        return self._turn is not None

    def room_for(self, size: int) -> bool:
        """A counted request's length was read, before the rest of it: reserve its room now (kept for it
        until `take`), so that it is read only once its broker can have it. False: `wait` for it."""
        grant = self._grant
        if grant >= size:
            return True
        load = self._load
        if grant:  # a reservation left by a request that was not forwarded after all
            self._grant = 0
            load.release(grant)
        if not load.fits(size):
            return False
        load.used += size
        self._grant = size
        return True

    def give(self, size: int) -> None:
        """A counted request was answered (or, acks=0, forwarded whole)."""
        self._load.release(size)

    def wait(self, size: int) -> asyncio.Future[None]:
        """Queue for room for `size` bytes; the future is done once they are reserved for this connection
        (take them then). Cancelled, it leaves the queue."""
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._turn = turn
        self._load._wait(self, size)
        turn.add_done_callback(self._turn_over)
        return turn

    def close(self, in_flight: int) -> None:
        """The connection closed with `in_flight` counted bytes unanswered: they, and any reservation, go
        back, and it leaves the queue."""
        if self._turn is not None and not self._turn.done():
            self._turn.cancel()
            self._load._leave(self)  # now, not when the cancellation's callback runs
        give_back, self._grant = in_flight + self._grant, 0
        if give_back:
            self._load.release(give_back)

    def granted(self, size: int) -> bool:
        """Room for `size` bytes is this connection's: False if it no longer waits for it."""
        turn = self._turn
        if turn is None or turn.done():
            return False
        self._grant = size
        turn.set_result(None)
        return True

    def _turn_over(self, turn: asyncio.Future[None]) -> None:
        if turn.cancelled():
            self._load._leave(self)
        self._turn = None


class BrokerLoads:
    """The load of every broker address, and the limit each gets."""

    __slots__ = ("_configured", "_learned", "_loads")

    def __init__(self, configured: int | None) -> None:
        """`configured`: upstream.max_in_flight_bytes_per_broker, or None to use what the brokers say
        (the smallest queued.max.request.bytes any sets) or else DEFAULT_MAX_IN_FLIGHT_BYTES."""
        self._configured = configured
        self._learned: int | None = None
        self._loads: dict[str, BrokerLoad] = {}

    @property
    def limit(self) -> int:
        if self._configured is not None:
            return self._configured
        return self._learned if self._learned is not None else DEFAULT_MAX_IN_FLIGHT_BYTES

    def share(self, address: str) -> LoadShare:
        """A new connection's share of the load of the broker at `address` (the address it reached)."""
        load = self._loads.get(address)
        if load is None:
            load = self._loads[address] = BrokerLoad(address, self.limit)
        return LoadShare(load)

    def learned(self, queued_max_request_bytes: int) -> None:
        """The brokers bound what they queue (the smallest queued.max.request.bytes any sets)."""
        self._learned = queued_max_request_bytes
        for load in self._loads.values():
            load.limit = self.limit

    def __iter__(self) -> Iterator[BrokerLoad]:
        return iter(list(self._loads.values()))
