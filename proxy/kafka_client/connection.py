"""One connection of the proxy's own Kafka client to one broker: an asyncio Protocol, requests pipelined.

`open_broker_connection` connects (TLS if given), asks ApiVersions and authenticates (SASL if given), then
hands back a `BrokerConnection` whose `request()` sends a body and awaits the answer's body. A broker
answers a connection's requests in order, so answers are matched to a FIFO of waiting futures and a
correlation id out of turn is a protocol error that closes the connection.

Work per callback stays small: `data_received` only splits frames and resolves futures; decoding happens
in the coroutine that awaits the answer. A request that times out closes its connection, as Kafka's
clients do: its answer could still come and would be matched to the wrong request.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from sluice.config.client_settings import ClientSasl
from sluice.protocol.client_requests import (
    API_VERSIONS,
    API_VERSIONS_VERSION,
    choose_version,
    decode_api_versions,
    encode_api_versions_request,
)
from sluice.protocol.errors import ProtocolError
from sluice.protocol.frames import FrameSplitter
from sluice.protocol.headers import encode_request, read_correlation_id, response_header_size

from ..outbound.broker_connect import connect_broker
from .authenticate import authenticate
from .errors import AuthenticationFailed, BrokerUnavailable, KafkaErrorCode, UnsupportedByBroker

if TYPE_CHECKING:
    from sluice.proxy.listeners.tls import UpstreamTlsTarget

# Answers to the proxy's own requests are small except Fetch, which the caller bounds with max_bytes.
MAX_ANSWER_BYTES = 64 << 20
_HIGH_WATER = 1 << 20


class _Pending:
    __slots__ = ("api_key", "correlation_id", "future", "version")

    def __init__(self, correlation_id: int, api_key: int, version: int, future: asyncio.Future[memoryview]):
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.version = version
        self.future = future


class BrokerConnection(asyncio.Protocol):
    """A connected, authenticated broker connection. `versions` holds the broker's ApiVersions answer."""

    def __init__(self, label: str, client_id: str) -> None:
        self.label = label  # "host:port" (node id when known): for errors and logs
        self.client_id = client_id
        self.versions: Mapping[int, tuple[int, int]] = {}
        self.expires_at: float | None = None  # loop time; set when the broker gives the session a lifetime
        self._transport: asyncio.Transport | None = None
        self._splitter = FrameSplitter(MAX_ANSWER_BYTES)
        self._pending: collections.deque[_Pending] = collections.deque()
        self._next_id = 1
        self._lost: BrokerUnavailable | None = None
        self._writable: asyncio.Event = asyncio.Event()
        self._writable.set()

    # ---- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, hence the cast, not an isinstance check.
        self._transport = cast(asyncio.Transport, transport)
        self._transport.set_write_buffer_limits(high=_HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._splitter.feed(data)
            for frame in frames:
                self._answer(frame)
        except ProtocolError as exc:
            self._fail(BrokerUnavailable(f"{self.label}: malformed answer ({exc.reason})"))

    def eof_received(self) -> bool | None:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"connection lost ({type(exc).__name__})" if exc is not None else "connection closed"
        self._fail(BrokerUnavailable(f"{self.label}: {reason}"))
        self._writable.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # ---- requests -------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._lost is None and self._transport is not None and not self._transport.is_closing()

    def usable(self, now: float) -> bool:
        return self.is_open and (self.expires_at is None or now < self.expires_at)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def version_for(self, api_key: int, what: str) -> int:
        version = choose_version(api_key, self.versions)
        if version is None:
            raise UnsupportedByBroker(f"{self.label}: no version of API {api_key} ({what}) both sides speak")
        return version

    async def request(self, api_key: int, version: int, body: bytes, timeout_s: float) -> memoryview:
        """Send one request and wait for its answer's body (after the response header)."""
        if self._lost is not None:
            raise self._lost
        assert self._transport is not None
        if not self._writable.is_set():
            # A big Produce still in the kernel: wait rather than pile more bytes into memory.
            try:
                await asyncio.wait_for(self._writable.wait(), timeout_s)
            except TimeoutError:
                self._fail(BrokerUnavailable(f"{self.label}: write blocked for {timeout_s:g} s"))
                raise self._lost or BrokerUnavailable(self.label) from None
            if self._lost is not None:
                raise self._lost
        correlation_id = self._next_id
        self._next_id = self._next_id + 1 if self._next_id < 2**31 - 1 else 1
        loop = asyncio.get_running_loop()
        future: asyncio.Future[memoryview] = loop.create_future()
        self._pending.append(_Pending(correlation_id, api_key, version, future))
        self._transport.write(encode_request(api_key, version, correlation_id, self.client_id, body))
        # The answer's future is awaited itself, its timeout a timer: wait_for(shield(...)) took two more
        # turns of the loop to bring an answer to its caller (and the retry's wait_for two more), on an idle
        # proxy's every long poll. A caller cancelled meanwhile (its budget spent) cancels the future,
        # which stays in the queue: its answer is matched and dropped (_answer).
        timer = loop.call_later(timeout_s, self._no_answer, api_key, timeout_s)
        try:
            return await future
        finally:
            timer.cancel()

    def _no_answer(self, api_key: int, timeout_s: float) -> None:
        # Fails every request waiting on the connection, this one included, and closes it.
        self._fail(BrokerUnavailable(f"{self.label}: no answer to API {api_key} within {timeout_s:g} s"))

    def close(self) -> None:
        self._fail(BrokerUnavailable(f"{self.label}: connection closed by the client"))

    def _answer(self, frame: memoryview) -> None:
        if not self._pending:
            raise ProtocolError("unexpected_answer", "an answer to no request")
        head = self._pending.popleft()
        if read_correlation_id(frame) != head.correlation_id:
            raise ProtocolError("correlation_mismatch", f"expected {head.correlation_id}")
        size = response_header_size(head.api_key, head.version, frame)
        if not head.future.done():
            head.future.set_result(frame[4 + size :])

    def _fail(self, error: BrokerUnavailable) -> None:
        if self._lost is None:
            self._lost = error
        while self._pending:
            future = self._pending.popleft().future
            if not future.done():
                future.set_exception(self._lost)
                future.exception()  # retrieved here, should its caller be gone (a cancelled one's is done)
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()


def _tls_failure(name: str, exc: ssl.SSLError) -> AuthenticationFailed | BrokerUnavailable:
    """A certificate that does not verify, or a TLS alert from the broker (it refused our certificate or
    our protocol), fails the same way on the next try: AuthenticationFailed, not retried, as Kafka's
    SslAuthenticationException. A handshake the broker cut short (EOF, reset: a broker restarting, a load
    balancer) is a lost connection like any other: BrokerUnavailable, retried."""
    reason = getattr(exc, "reason", None) or ""
    cut_short = isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError | ssl.SSLSyscallError)
    if not cut_short and (
        isinstance(exc, ssl.SSLCertVerificationError) or "CERTIFICATE" in reason or "ALERT" in reason
    ):
        return AuthenticationFailed(f"{name}: TLS handshake failed: {reason or exc}")
    return BrokerUnavailable(f"{name}: TLS handshake cut short: {reason or type(exc).__name__}")


async def open_broker_connection(
    host: str,
    port: int,
    *,
    client_id: str,
    tls: UpstreamTlsTarget | None,
    sasl: ClientSasl | None,
    timeout_s: float,
    label: str | None = None,
    bind_address: str | None = None,
) -> BrokerConnection:
    """Connect (from `bind_address` when given), learn the broker's API versions, authenticate; raises
    BrokerUnavailable, AuthenticationFailed or UnsupportedByBroker."""
    loop = asyncio.get_running_loop()
    name = label or f"{host}:{port}"
    connection = BrokerConnection(name, client_id)
    try:
        await asyncio.wait_for(
            connect_broker(loop, lambda: connection, host, port, tls, bind_address), timeout_s
        )
    except TimeoutError:
        connection.close()
        raise BrokerUnavailable(f"{name}: no connection within {timeout_s:g} s") from None
    except ssl.SSLError as exc:
        raise _tls_failure(name, exc) from None
    except OSError as exc:
        # str(exc) of a socket error names the host and the reason, never a credential.
        raise BrokerUnavailable(f"{name}: cannot connect: {exc.strerror or exc}") from None
    try:
        answer = await connection.request(
            API_VERSIONS, API_VERSIONS_VERSION, encode_api_versions_request(), timeout_s
        )
        error, versions = decode_api_versions(answer)
        if error:
            raise KafkaErrorCode(error, f"{name}: ApiVersions")
        connection.versions = versions
        if sasl is not None:
            await authenticate(connection, sasl, timeout_s)
    except ProtocolError as exc:
        connection.close()
        raise BrokerUnavailable(f"{name}: malformed answer during connection set-up ({exc.reason})") from None
    except BaseException:
        connection.close()
        raise
    return connection
