"""The filter contract and the chain that routes each frame only to the filters that asked for it.

A filter is one concern. It declares which API keys it wants to see (Kroxylicious calls this a decode
predicate); every other frame is forwarded as the same bytes without any filter running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol

from sluice.protocol.headers import RequestHeader

Frame = memoryview | bytes


class InFlight(NamedTuple):
    """A request waiting for its response, in the order responses must reach the client."""

    header: RequestHeader
    # The throttle a filter put on this request as it was forwarded (a Produce charged on the way in);
    # its response must carry it, and the connection stays muted until that response has been sent.
    throttle_ms: int = 0
    # What a filter attached with `note_request` while forwarding, for its own on_response.
    note: object = None
    # A response a filter made itself (`Answer`): nothing was forwarded, it leaves in its turn.
    answer: Frame | None = None
    # The proxy's own request (`send_upstream`): the response body goes here, never to the client.
    reply: asyncio.Future[bytes] | None = None


class Answer(NamedTuple):
    """on_request's verdict when a filter answers the request itself (a whole response frame): nothing is
    forwarded, and the answer leaves in its turn among the responses."""

    response: bytes


class Defer(NamedTuple):
    """on_request's verdict when a filter needs something first (its own request upstream): the request and
    every one behind it wait until `ready` is done, then pass through the filters again (so filters before
    the deferring one must not count a request twice)."""

    ready: asyncio.Future[object]


class RawExchange(Protocol):
    """An authentication exchange in SaslHandshake v0's legacy framing: bare length-prefixed tokens with no
    Kafka headers, one server token per client token, until the exchange says it is over."""

    def client_token(self, token: bytes) -> None: ...

    def server_token(self, token: bytes) -> bool:
        """Take the broker's token; True when the exchange is over and Kafka framing resumes."""
        ...


class ConnectionInfo(Protocol):
    """What a filter may know about, and ask of, the client connection it works for."""

    peer: str
    upstream_peer: str  # host:port of the broker this connection is forwarded to
    listener: str  # "bootstrap", or "broker-<node id>"
    user: str  # the authenticated principal, ANONYMOUS until proven otherwise

    def now_ms(self) -> int: ...

    def take_cpu_ns(self) -> int: ...

    def mute_for(self, throttle_ms: int) -> None: ...

    def throttle_request(self, throttle_ms: int) -> None: ...

    def mute_remaining_ms(self) -> int: ...

    def delay_response(self, delay_ms: int) -> None: ...

    def note_request(self, note: object) -> None: ...

    def send_upstream(self, api_key: int, api_version: int, body: bytes) -> asyncio.Future[bytes]: ...

    def begin_raw_exchange(self, exchange: RawExchange) -> None: ...


class Filter:
    """Base class: override the hooks for the API keys named in the class variables."""

    request_api_keys: frozenset[int] = frozenset()
    response_api_keys: frozenset[int] = frozenset()

    def on_request(self, conn: ConnectionInfo, header: RequestHeader, frame: Frame) -> Frame | Answer | Defer:
        """Return the request frame to forward (the same object when nothing changes), an `Answer` to
        answer it without forwarding, or `Defer` to run it again once something has arrived."""
        return frame

    def on_response(self, conn: ConnectionInfo, request: InFlight, frame: Frame) -> Frame:
        """Return the response frame to send to the client (the same object when nothing changes)."""
        return frame


# API keys are small integers; a list indexed by key is the cheapest lookup on the hot path.
_TABLE_SIZE = 128
_NO_FILTERS: tuple[Filter, ...] = ()


class FilterChain:
    __slots__ = ("_by_request_key", "_by_response_key", "filters")

    def __init__(self, filters: Iterable[Filter]) -> None:
        self.filters: tuple[Filter, ...] = tuple(filters)
        self._by_request_key = self._index(lambda f: f.request_api_keys)
        self._by_response_key = self._index(lambda f: f.response_api_keys)

    def _index(self, keys_of) -> Sequence[tuple[Filter, ...]]:
        table: list[tuple[Filter, ...]] = [_NO_FILTERS] * _TABLE_SIZE
        for key in range(_TABLE_SIZE):
            table[key] = tuple(f for f in self.filters if key in keys_of(f))
        return table

    def request_filters(self, api_key: int) -> tuple[Filter, ...]:
        return self._by_request_key[api_key] if 0 <= api_key < _TABLE_SIZE else _NO_FILTERS

    def response_filters(self, api_key: int) -> tuple[Filter, ...]:
        return self._by_response_key[api_key] if 0 <= api_key < _TABLE_SIZE else _NO_FILTERS

    def on_request(self, conn: ConnectionInfo, header: RequestHeader, frame: Frame) -> Frame | Answer | Defer:
        for f in self.request_filters(header.api_key):
            verdict = f.on_request(conn, header, frame)
            if isinstance(verdict, Answer | Defer):
                return verdict  # the filters after it never see a request that is not forwarded now
            frame = verdict
        return frame

    def on_response(self, conn: ConnectionInfo, request: InFlight, frame: Frame) -> Frame:
        for f in self.response_filters(request.header.api_key):
            frame = f.on_response(conn, request, frame)
        return frame
