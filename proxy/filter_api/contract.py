"""The filter contract: filters made per connection, whose hooks return their effects.

A `FilterFactory` is shared by every connection of a proxy and holds what they share (quota managers,
caches, settings); it makes one `Filter` per connection, so a filter's own attributes are that
connection's state. Each filter class declares the API keys it wants (Kroxylicious calls this a decode
predicate) and the highest version of each API it can handle; every other frame passes without any filter
running, and the ApiVersions clamp is computed from what the chain declares.

Hooks return what they want done, rather than calling back into the connection:

* `on_request` returns the frame to forward (the same object when nothing changes), `Forward(frame,
  throttle_ms)` when the request earned a throttle, `Answer(...)` to answer it without forwarding,
  `Close(reason)` to close the connection, or `Defer(ready)` to wait for something first: the request then
  resumes AT THE FILTER THAT DEFERRED once `ready` is done (the filters before it do not see it twice).
* `on_response` returns the frame for the client, or `Respond(frame, delay_ms, mute_ms)` to hold it
  (pre-KIP-219) or mute the connection after it (KIP-219).

Returning the bare frame in the common case keeps the hot path free of allocations. The effects are a closed
set: `RequestEffect` and `ResponseEffect` name every value a hook may return, and the chain and the pipeline
dispatch on exactly those types.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, ClassVar, NamedTuple, Protocol, Self

from sluice.protocol.frames import FrameHead
from sluice.protocol.headers import RequestHeader

Frame = memoryview | bytes
# What on_request is handed: the whole frame, or, for a request forwarded as it arrives, its FrameHead (the
# first bytes and the size), which only a filter that declared it reads no more gets
# (`Filter.head_only_api_keys`, `FilterFactory.reads_body_now`); such a filter passes it on as it is.
RequestFrame = Frame | FrameHead


# ---- what the sans-IO pipeline holds for the connection ------------------------------------------


class Pending(Protocol):
    """Something a request waits for (`Defer.ready`, room at its broker): an asyncio future or task, which
    the pipeline only keeps and hands back; the connection waits on it and cancels it at close."""

    def done(self) -> bool: ...

    def cancelled(self) -> bool: ...

    def exception(self) -> BaseException | None: ...

    def cancel(self, msg: Any | None = None) -> bool: ...

    def add_done_callback(self, fn: Callable[[Self], object], /) -> None: ...


class Reply(Protocol):
    """Where the body of the answer to the proxy's own request goes (an asyncio future of bytes)."""

    def done(self) -> bool: ...

    def cancel(self, msg: Any | None = None) -> bool: ...

    def set_result(self, result: bytes, /) -> None: ...


# ---- effects ------------------------------------------------------------------------------------


class Forward(NamedTuple):
    """on_request: forward `frame`; the connection is muted for `throttle_ms` at once (so requests behind
    it wait, as behind a broker), and its response carries the throttle and ends the mute no earlier than
    it has been sent. Return the bare frame when there is no throttle."""

    frame: RequestFrame
    throttle_ms: int = 0


class Answer(NamedTuple):
    """on_request: answer the request with `response` (a whole response frame) instead of forwarding it.
    The answer leaves in its turn among the responses, through the response filters; `throttle_ms` works
    as Forward's, `delay_ms` holds the answer (pre-KIP-219)."""

    response: bytes
    throttle_ms: int = 0
    delay_ms: int = 0


class Close(NamedTuple):
    """on_request: close the connection (logged with `reason`); nothing more is forwarded."""

    reason: str


class Defer(NamedTuple):
    """on_request: the request and every one behind it wait until `ready` is done; the request then goes
    on from the filter that deferred (which runs again), with the frame as the filters before it left it."""

    ready: Pending


class Respond(NamedTuple):
    """on_response: send `frame` to the client, held back `delay_ms` (pre-KIP-219), and mute the connection
    for `mute_ms` (KIP-219: until that long has passed and the response has left). Return the bare frame
    when neither applies."""

    frame: Frame
    delay_ms: int = 0
    mute_ms: int = 0


# Everything on_request may return: the frame itself (forwarded untouched, or as a filter rewrote it), or one
# of the four effects.
RequestEffect = RequestFrame | Forward | Answer | Close | Defer
# Everything on_response may return.
ResponseEffect = Frame | Respond

# The reason of the ProtocolError a filter raises for a request of an API or version the proxy never offered.
# It is the client's doing wherever it is found, so the connection logs it as the client's even when a
# response filter is the one that finds it (an answer newer than the filter can read).
UNOFFERED_VERSION = "unadvertised_api_version"


# ---- what a response hook is told about its request ----------------------------------------------


class EntryKind(Enum):
    """What a request in flight is, which decides where its response goes."""

    FORWARDED = "forwarded"  # a client's request, forwarded: the broker's response goes to the client
    ANSWERED = "answered"  # a filter answered it (Answer): the answer leaves in its turn
    OWN = "own"  # the proxy's own request (send_upstream): the response body goes to its reply
    RAW_TOKEN = "raw_token"  # a bare SASL token (SaslHandshake v0's framing): relayed untouched


class InFlight(NamedTuple):
    """A request waiting for its response, in the order responses must reach the client."""

    header: RequestHeader
    kind: EntryKind = EntryKind.FORWARDED
    # The throttle the request earned as it was forwarded (Forward/Answer.throttle_ms): its response must
    # carry it, and the connection stays muted until that response has been sent.
    throttle_ms: int = 0
    # ANSWERED: the response a filter made, and how long to hold it.
    answer: Frame | None = None
    answer_delay_ms: int = 0
    # OWN: where the response body goes (an asyncio future the connection resolves).
    reply: Reply | None = None
    # FORWARDED: the bytes it counts toward its broker's load until answered (proxy/data_path/broker_load.py).
    load: int = 0


def whole(frame: RequestFrame) -> Frame:
    """The frame of a request whose body a filter reads: the proxy hands a FrameHead only to the filters
    that said they would not read it, so one here is a bug, raised as such."""
    if isinstance(frame, FrameHead):
        raise TypeError("a filter that reads request bodies was handed a FrameHead")
    return frame


# ---- the connection, as a filter sees it ---------------------------------------------------------


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

    def read_ms(self) -> int:
        """When the request being filtered was read, at the latest: the time of the connection's last read
        from the client. A request held behind a mute or a deferral was read no later than that (reading
        pauses while either lasts)."""
        ...

    def take_cpu_ns(self) -> int:
        """CPU time spent on this connection since the last call, as Kafka times a handler's work: the
        wall time of the proxy's passes over its reads, on the monotonic clock (measured only while a
        filter's factory says it needs it)."""
        ...

    def mute_remaining_ms(self) -> int: ...

    def send_upstream(self, api_key: int, api_version: int, body: bytes) -> asyncio.Future[bytes]:
        """Send the proxy's own request on this connection (authenticated as the client); the future gets
        the response body, cancelled if the connection closes first."""
        ...

    def begin_raw_exchange(self, exchange: RawExchange) -> None:
        """SaslHandshake v0 succeeded: the frames that follow are bare SASL tokens until `exchange` ends
        (call from on_response)."""
        ...

    def sasl_authenticated(self) -> None:
        """The broker accepted the client's SASL exchange (whether or not its principal could be read):
        the limits on unauthenticated frames (sasl.required) end."""
        ...


# ---- filters and their factories -----------------------------------------------------------------

# The API keys a filter may name: the chain routes by lists indexed by key (the cheapest lookup on the hot
# path), TABLE_SIZE long since API keys are small integers.
TABLE_SIZE = 128
# The routing slot of every API key outside 0..TABLE_SIZE - 1 (an int16 may be anything).
BEYOND_TABLE = TABLE_SIZE
# Every routing slot: a filter naming these sees every frame, whatever its API key.
EVERY_API_KEY = frozenset(range(TABLE_SIZE + 1))


class Filter:
    """One concern, on one connection. Override the hooks for the API keys named in the class variables."""

    request_api_keys: ClassVar[frozenset[int]] = frozenset()
    response_api_keys: ClassVar[frozenset[int]] = frozenset()
    # The newest version of each API this filter can handle; the ApiVersions clamp keeps clients at or
    # below it. APIs it does not name are not limited by it.
    max_versions: ClassVar[Mapping[int, int]] = {}
    # Per API key, the newest response version in which this filter rewrites every broker address the
    # schemas show (from version 0 up): what the ApiVersions clamp may offer clients of an API whose
    # answers carry addresses (protocol/api_vetting.py).
    rewrites_addresses: ClassVar[Mapping[int, int]] = {}
    # Request APIs whose on_request reads only the header and len(frame), and returns the frame itself or
    # Forward(frame, throttle_ms): the proxy may then forward a large request while it arrives, handing
    # the filter a protocol.frames.FrameHead (the first bytes and the size) instead of the whole frame.
    head_only_api_keys: ClassVar[frozenset[int]] = frozenset()

    __slots__ = ("conn",)

    def __init__(self, conn: ConnectionInfo) -> None:
        self.conn = conn

    def on_request(self, header: RequestHeader, frame: RequestFrame) -> RequestEffect:
        return frame

    def on_response(self, request: InFlight, frame: Frame) -> ResponseEffect:
        return frame


class FilterFactory:
    """Shared by the connections of one proxy: makes their filters and holds what they share."""

    filter_class: ClassVar[type[Filter]] = Filter

    def create(self, conn: ConnectionInfo) -> Filter:
        return self.filter_class(conn)

    def reads_body_now(self, api_key: int) -> bool:
        """For an API its filter reads but does not declare head-only: whether it needs the whole body now
        (asked when a large request starts to arrive, so keep it cheap). True by default; a filter that
        reads a body only while something is configured says so here, so the request may be passed
        through as it arrives the rest of the time (its hook then gets a FrameHead and must return it)."""
        return True

    def needs_cpu_time(self) -> bool:
        """Whether the filters need the connection's CPU time now (asked per read, so keep it cheap). While
        True, the connection measures it and the filter sees every response, of whatever API."""
        return False

    def cpu_time_check(self) -> Callable[[], object]:
        """`needs_cpu_time` as a callable whose result is true exactly when it is True: a factory may hand
        out a cheaper one (a call into C, no Python frame), as it is asked at every pass's start and end.
        Asked only of a factory that overrides `needs_cpu_time` (the chain's test of whether it may ever
        need CPU time): overriding this alone is not enough."""
        return self.needs_cpu_time

    def chain_built(self, versions: ChainVersions) -> None:
        """Called once the chain that holds this factory is complete, with what its filters declare
        together (what the ApiVersions clamp advertises)."""


class ChainVersions(NamedTuple):
    """What a complete chain declares about API versions, computed once (FilterChain) for every factory."""

    # Per API key, the newest version every filter of the chain can handle (Filter.max_versions).
    max_versions: Mapping[int, int]
    # Per API key, the newest response version in which a filter rewrites every broker address.
    address_rewrites: Mapping[int, int]
    # Per API key, the newest vetted version (protocol/api_vetting.py); a key missing has none.
    vetted: Mapping[int, int]

    def newest_vetted_offer(self, api_key: int) -> int:
        """The newest version of `api_key` the clamp offers while it hides unvetted APIs; -1: none."""
        return min(self.vetted.get(api_key, -1), self.max_versions.get(api_key, _INT16_MAX))


_INT16_MAX = 0x7FFF
