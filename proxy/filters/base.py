"""The filter contract and the chain that routes each frame only to the filters that asked for it.

A filter is one concern. It declares which API keys it wants to see (Kroxylicious calls this a decode
predicate); every other frame is forwarded as the same bytes without any filter running.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol

from protocol.headers import RequestHeader

Frame = memoryview | bytes


class InFlight(NamedTuple):
    """A forwarded request waiting for its response."""

    header: RequestHeader
    # The throttle a filter put on this request as it was forwarded (a Produce charged on the way in);
    # its response must carry it, and the connection stays muted until that response has been sent.
    throttle_ms: int = 0


class ConnectionInfo(Protocol):
    """What a filter may know about, and ask of, the client connection it works for."""

    peer: str
    listener: str
    user: str  # the authenticated principal, ANONYMOUS until proven otherwise

    def now_ms(self) -> int: ...

    def take_cpu_ns(self) -> int: ...

    def mute_for(self, throttle_ms: int) -> None: ...

    def throttle_request(self, throttle_ms: int) -> None: ...

    def mute_remaining_ms(self) -> int: ...

    def delay_response(self, delay_ms: int) -> None: ...


class Filter:
    """Base class: override the hooks for the API keys named in the class variables."""

    request_api_keys: frozenset[int] = frozenset()
    response_api_keys: frozenset[int] = frozenset()

    def on_request(self, conn: ConnectionInfo, header: RequestHeader, frame: Frame) -> Frame:
        """Return the request frame to forward (the same object when nothing changes)."""
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

    def on_request(self, conn: ConnectionInfo, header: RequestHeader, frame: Frame) -> Frame:
        for f in self.request_filters(header.api_key):
            frame = f.on_request(conn, header, frame)
        return frame

    def on_response(self, conn: ConnectionInfo, request: InFlight, frame: Frame) -> Frame:
        for f in self.response_filters(request.header.api_key):
            frame = f.on_response(conn, request, frame)
        return frame
