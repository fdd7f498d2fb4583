"""One client connection and the upstream connection that serves it.

`ClientSide` owns the session: it splits the client's stream into frames, runs the request filters,
forwards to its own upstream connection, and sends responses back in request order (a FIFO of the
requests in flight; a Produce with acks=0 gets no response and takes no place in it). `UpstreamSide` is a
thin protocol that hands the broker's bytes and flow-control events to its `ClientSide`.

Back-pressure runs both ways: when one side's write buffer passes the high-water mark, reading from the
other side pauses until it drains. A throttle mutes the client through its `ThrottleGate`: reading stops
and requests already read are held, not forwarded, until the mute ends.

Why this module is long: it still holds the request FIFO and SASL framing; the request pipeline of the
house redesign moves them out.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, cast

from sluice.protocol.apis import produce_acks
from sluice.protocol.errors import ProtocolError
from sluice.protocol.frames import MIN_FRAME_PAYLOAD_BYTES, FrameSplitter
from sluice.protocol.headers import (
    RequestHeader,
    encode_request,
    parse_request_header,
    read_correlation_id,
    response_header_size,
)
from sluice.quota import ANONYMOUS

from .filters.base import Answer, Defer, InFlight, RawExchange
from .flow import ReadPauses
from .log import get_logger
from .throttle_gate import ThrottleGate

if TYPE_CHECKING:
    from .filters import FilterChain, Frame
    from .metrics import ProxyMetrics
    from .tls import UpstreamTlsTarget

PRODUCE = 0
_ACKS0_REMEMBERED = 1024
# asyncio's default high-water mark (64 KiB) is below one typical Produce request (librdkafka batches up to
# 1 MiB), so every large request would pause the client until the broker drained it. A 1 MiB mark keeps
# large requests flowing; memory is only used while a peer is actually slower than the other.
_WRITE_HIGH_WATER = 1 << 20
# A broker address that silently drops SYNs would otherwise hold the client for the kernel's ~2 minutes.
_CONNECT_TIMEOUT_S = 10.0
_log = get_logger("sluice.connection")
_thread_time_ns = time.thread_time_ns
# The proxy's own requests on a client's connection count up from here, clear of the client's ids
# (Kafka clients count up from 0).
_FIRST_OWN_CORRELATION_ID = -(2**31)
_OWN_CLIENT_ID = "sluice"
# Stands in for the header of a token in SaslHandshake v0's legacy framing, which has none.
RAW_TOKEN = RequestHeader(-1, 0, 0, None, 0)
# _forward_request's answer when a filter deferred the request.
_DEFERRED = object()

Address = tuple[str, int]


class ConnectionRegistry:
    """The live connections of one proxy, so shutdown can drain them and metrics can count them."""

    def __init__(self, metrics: ProxyMetrics) -> None:
        self._metrics = metrics
        self._live: set[ClientSide] = set()
        self._empty = asyncio.Event()
        self._empty.set()

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Iterator[ClientSide]:
        return iter(list(self._live))

    def add(self, conn: ClientSide) -> None:
        self._live.add(conn)
        self._empty.clear()
        self._metrics.connections_total += 1
        self._metrics.connections_active = len(self._live)

    def remove(self, conn: ClientSide) -> None:
        self._live.discard(conn)
        self._metrics.connections_active = len(self._live)
        if not self._live:
            self._empty.set()

    async def wait_empty(self) -> None:
        await self._empty.wait()


class SessionSettings:
    """What every connection of one proxy shares."""

    __slots__ = (
        "chain",
        "client_principal",
        "idle_timeout_s",
        "max_frame_bytes",
        "measure_cpu",
        "metrics",
        "registry",
        "upstream_tls",
    )

    def __init__(
        self,
        chain: FilterChain,
        metrics: ProxyMetrics,
        registry: ConnectionRegistry,
        max_frame_bytes: int,
        idle_timeout_s: float,
        measure_cpu: bool = False,
        upstream_tls: UpstreamTlsTarget | None = None,
        client_principal: Callable[[object], str | None] | None = None,
    ) -> None:
        self.chain = chain
        self.metrics = metrics
        self.registry = registry
        self.max_frame_bytes = max_frame_bytes
        self.idle_timeout_s = idle_timeout_s
        # Only a request_percentage quota needs the proxy's CPU time per connection; the thread clock
        # costs a system call per read, so it is not read otherwise.
        self.measure_cpu = measure_cpu
        self.upstream_tls = upstream_tls
        # The user a client certificate proves (mTLS listeners only); SASL, when used, overrides it.
        self.client_principal = client_principal


def _format_peer(peername: object) -> str:
    if isinstance(peername, tuple) and len(peername) >= 2:
        return f"{peername[0]}:{peername[1]}"
    return str(peername)


class ClientSide(asyncio.Protocol):
    """The client's connection to the proxy, and the session state for it."""

    def __init__(
        self,
        settings: SessionSettings,
        listener: str,
        upstream_candidates: Callable[[], list[Address]],
    ) -> None:
        self._settings = settings
        self._chain = settings.chain
        self._metrics = settings.metrics
        self.listener = listener
        self._upstream_candidates = upstream_candidates
        self.peer = "?"
        self.upstream_peer = ""
        # The authenticated principal; ANONYMOUS until an identity filter proves otherwise.
        self.user = ANONYMOUS
        # CPU time spent on this connection and not yet charged to a request_percentage quota.
        self.cpu_ns = 0
        self._transport: asyncio.Transport | None = None
        self._upstream: asyncio.Transport | None = None
        self._upstream_pauses: ReadPauses | None = None
        self._pauses: ReadPauses | None = None
        self._gate: ThrottleGate | None = None
        self._requests = FrameSplitter(settings.max_frame_bytes)
        self._responses = FrameSplitter(settings.max_frame_bytes)
        self._in_flight: deque[InFlight] = deque()
        # Requests read but not forwarded yet: the upstream is still connecting, or a throttle muted us.
        self._held: list[memoryview] = []
        # Correlation ids of recent acks=0 Produce requests, to recognise a broker that answers them anyway.
        self._acks0_sent: deque[int] = deque(maxlen=_ACKS0_REMEMBERED)
        self._response_delay_ms = 0
        self._request_throttle_ms = 0
        self._request_note: object = None
        # Requests the current read forwards, written in one go (the proxy's own requests join them in order).
        self._outgoing: list[Frame] = []
        # A filter waits for something (Defer): requests stay held until it is done.
        self._deferred = False
        self._own_correlation_id = _FIRST_OWN_CORRELATION_ID
        # SaslHandshake v0's legacy framing is under way: frames are bare SASL tokens.
        self._raw_exchange: RawExchange | None = None
        self._connect_task: asyncio.Task[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_activity = 0.0
        self._draining = False
        self._closed = False
        self._loop = asyncio.get_running_loop()

    # ---- client transport callbacks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but they have its methods.
        transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        self._transport = transport
        self.peer = _format_peer(transport.get_extra_info("peername"))
        self._pauses = ReadPauses(transport)
        # Nothing can be forwarded until the upstream connection exists.
        self._pauses.add("connecting")
        self._gate = ThrottleGate(
            self._loop, transport, self._pauses, self._release_held, self._metrics.count_muted
        )
        self._settings.registry.add(self)
        if self._settings.client_principal is not None and not self._take_certificate_user(transport):
            return
        self._last_activity = self._loop.time()
        self._arm_idle_timer(self._settings.idle_timeout_s)
        self._connect_task = self._loop.create_task(self._connect_upstream())
        _log.info("connection_opened", peer=self.peer, listener=self.listener)

    def _take_certificate_user(self, transport: asyncio.Transport) -> bool:
        assert self._settings.client_principal is not None
        try:
            user = self._settings.client_principal(transport)
        except ValueError as exc:  # no principal mapping rule matches: Kafka fails the authentication
            _log.warning("tls_principal_unmapped", peer=self.peer, error=str(exc))
            self.close("authentication_failed")
            return False
        if user is not None:
            self.user = user
            _log.info("tls_authenticated", peer=self.peer, user=user)
        return True

    def data_received(self, data: bytes) -> None:
        self._last_activity = self._loop.time()
        started = _thread_time_ns() if self._settings.measure_cpu else 0
        try:
            frames = self._requests.feed(data)
        except ProtocolError as exc:
            self._protocol_error("client", exc)
            return
        if self._held:
            self._held.extend(frames)
        else:
            self._forward_or_close(frames)
        if started:
            self.cpu_ns += _thread_time_ns() - started

    def eof_received(self) -> bool:
        try:
            self._requests.eof()
        except ProtocolError as exc:
            self._protocol_error("client", exc)
            return False
        self.close("client_closed")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.close("client_closed" if exc is None else "client_error", error=str(exc) if exc else None)

    def pause_writing(self) -> None:
        # The client is slower than the broker: stop reading responses until the client catches up.
        if self._upstream_pauses is not None:
            self._upstream_pauses.add("client_backlog")

    def resume_writing(self) -> None:
        if self._upstream_pauses is not None:
            self._upstream_pauses.discard("client_backlog")

    # ---- requests -------------------------------------------------------------------------------

    def _forward_or_close(self, frames: list[memoryview]) -> None:
        try:
            self._forward(frames)
        except ProtocolError as exc:
            self._protocol_error("client", exc)
        except Exception as exc:  # a filter bug must cost one connection, never the process
            self._filter_failed(exc)

    def _forward(self, frames: list[memoryview]) -> None:
        """Forward `frames` in order, stopping (and holding the rest) the moment forwarding must wait."""
        gate = self._gate
        answered = False
        try:
            for i, frame in enumerate(frames):
                # uvloop may deliver data that arrived with the connection before our pause took effect.
                if self._upstream is None or self._deferred or (gate is not None and gate.muted):
                    self._held.extend(frames[i:])
                    break
                out = self._forward_request(frame)
                if out is None:
                    answered = True
                elif out is _DEFERRED:
                    self._held.extend(frames[i:])
                    break
                else:
                    # An attribute, not a local: send_upstream may flush it while filters run.
                    self._outgoing.append(out)
        finally:
            self._flush_outgoing()
        if answered:
            self._return_responses(())

    def _flush_outgoing(self) -> None:
        if self._outgoing and self._upstream is not None:
            # One writelines per read: pipelined requests leave in one system call, not one each.
            self._upstream.writelines(self._outgoing)
        self._outgoing = []

    def _release_held(self) -> None:
        """The upstream is ready, a mute ended or a filter's wait is over: forward what was held, in order."""
        if self._draining or self._closed:
            return  # shutting down: requests never forwarded stay unanswered, and the client retries them
        held, self._held = self._held, []
        self._forward_or_close(held)

    def _forward_request(self, frame: memoryview) -> Frame | object | None:
        """The frame to forward; None when a filter answered it; _DEFERRED when a filter must wait first."""
        if self._raw_exchange is not None:
            self._raw_exchange.client_token(bytes(frame[4:]))
            self._in_flight.append(InFlight(RAW_TOKEN))
            return frame
        header = parse_request_header(frame)
        self._request_throttle_ms = 0
        self._request_note = None
        out = self._chain.on_request(self, header, frame)
        if type(out) is Defer:
            self._wait_for(out.ready)
            return _DEFERRED
        self._metrics.count_request(header.api_key, len(frame) - 4)
        answer = out.response if type(out) is Answer else None
        if header.api_key != PRODUCE or produce_acks(frame, header) != 0:
            self._in_flight.append(InFlight(header, self._request_throttle_ms, self._request_note, answer))
            if self._request_throttle_ms > 0 and self._gate is not None:
                self._gate.expect_response()
        else:
            self._acks0_sent.append(header.correlation_id)
        return None if answer is not None else out

    def _wait_for(self, ready: asyncio.Future[object]) -> None:
        self._deferred = True
        if self._pauses is not None:
            self._pauses.add("deferred")

        def resume(done: asyncio.Future[object]) -> None:
            self._deferred = False
            if self._pauses is not None:
                self._pauses.discard("deferred")
            failure = None if done.cancelled() else done.exception()
            if failure is not None:  # a filter's wait went wrong: a bug, costing this connection only
                self._filter_failed(failure)
                return
            self._release_held()

        ready.add_done_callback(resume)

    # ---- what filters may ask of the connection --------------------------------------------------

    def now_ms(self) -> int:
        return int(self._loop.time() * 1000)

    def take_cpu_ns(self) -> int:
        """CPU time spent on this connection since the last call, for request_percentage charging."""
        spent, self.cpu_ns = self.cpu_ns, 0
        return spent

    def mute_for(self, throttle_ms: int) -> None:
        """KIP-219: stop reading and forwarding for `throttle_ms` and until the current response has left."""
        if self._gate is not None:
            self._gate.mute_for(throttle_ms)

    def throttle_request(self, throttle_ms: int) -> None:
        """Throttle the request being forwarded (call from on_request): mute now, and let its response
        carry `throttle_ms` and end the mute no earlier than that response is sent."""
        self._request_throttle_ms = max(self._request_throttle_ms, throttle_ms)
        self.mute_for(throttle_ms)

    def mute_remaining_ms(self) -> int:
        """How long the connection stays muted from now (0 when it is not muted)."""
        return self._gate.remaining_ms() if self._gate is not None else 0

    def delay_response(self, delay_ms: int) -> None:
        """Pre-KIP-219: hold the response being processed for `delay_ms` (call from on_response only)."""
        self._response_delay_ms = max(self._response_delay_ms, delay_ms)

    def note_request(self, note: object) -> None:
        """Attach `note` to the request being forwarded (call from on_request); on_response gets it back."""
        self._request_note = note

    def send_upstream(self, api_key: int, api_version: int, body: bytes) -> asyncio.Future[bytes]:
        """Send the proxy's own request on this connection, so it is authenticated as the client. The future
        gets the response body; the client never sees the response. Requests already forwarded go first."""
        reply: asyncio.Future[bytes] = self._loop.create_future()
        if self._closed or self._upstream is None:
            reply.cancel()  # nobody will answer: whoever waits on it stops
            return reply
        correlation_id = self._own_correlation_id
        self._own_correlation_id += 1
        header = RequestHeader(api_key, api_version, correlation_id, _OWN_CLIENT_ID, 0)
        self._in_flight.append(InFlight(header, reply=reply))
        self._outgoing.append(encode_request(api_key, api_version, correlation_id, _OWN_CLIENT_ID, body))
        self._flush_outgoing()
        return reply

    def begin_raw_exchange(self, exchange: RawExchange) -> None:
        """SaslHandshake v0 succeeded: the frames that follow are bare SASL tokens until `exchange` ends
        (call from on_response)."""
        self._raw_exchange = exchange
        # A SASL token may be empty (PLAIN's success answer is).
        self._requests.min_payload_bytes = self._responses.min_payload_bytes = 0

    # ---- upstream ------------------------------------------------------------------------------

    async def _connect_upstream(self) -> None:
        failures: list[str] = []
        tls = self._settings.upstream_tls
        for host, port in self._upstream_candidates():
            connecting = (
                self._loop.create_connection(lambda: UpstreamSide(self), host, port)
                if tls is None
                else self._loop.create_connection(
                    lambda: UpstreamSide(self),
                    host,
                    port,
                    ssl=tls.context,
                    server_hostname=tls.hostname_for(host),
                )
            )
            try:
                transport, _ = await asyncio.wait_for(connecting, _CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                failures.append(f"{host}:{port}: {getattr(exc, 'strerror', None) or exc or 'timed out'}")
                continue
            if self._closed:
                transport.close()
                return
            self._upstream = cast(asyncio.Transport, transport)
            self._upstream.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
            self.upstream_peer = f"{host}:{port}"
            self._upstream_pauses = ReadPauses(self._upstream)
            self._release_held()
            assert self._pauses is not None
            self._pauses.discard("connecting")
            return
        self.close("upstream_unreachable", tried=failures or ["no known address"])

    def upstream_data(self, data: bytes) -> None:
        self._last_activity = self._loop.time()
        started = _thread_time_ns() if self._settings.measure_cpu else 0
        try:
            self._return_responses(self._responses.feed(data))
        except ProtocolError as exc:
            self._protocol_error("upstream", exc)
        except Exception as exc:  # a filter bug must cost one connection, never the process
            self._filter_failed(exc)
        if started:
            self.cpu_ns += _thread_time_ns() - started
        if self._draining and not self._in_flight:
            if self._gate is not None:
                self._gate.flush_held()
            self.close("shutdown")

    def _return_responses(self, frames: Iterable[memoryview]) -> None:
        transport = self._transport
        assert transport is not None
        outgoing: list[Frame] = []
        in_flight = self._in_flight
        for frame in frames:
            self._response_delay_ms = 0
            out = self._return_response(frame)
            if out is not None:
                outgoing = self._queue_response(out, outgoing)
            if in_flight and in_flight[0].answer is not None:
                outgoing = self._queue_answers(outgoing)
        if in_flight and in_flight[0].answer is not None:
            outgoing = self._queue_answers(outgoing)
        if outgoing:
            transport.writelines(outgoing)

    def _queue_response(self, out: Frame, outgoing: list[Frame]) -> list[Frame]:
        """Add `out` to the responses this pass writes, or hand it to the gate if it must wait."""
        gate = self._gate
        assert gate is not None and self._transport is not None
        if self._response_delay_ms > 0 or gate.holding_responses:
            # Delayed (pre-KIP-219), or queued behind one that is: the gate keeps request order.
            if outgoing:
                self._transport.writelines(outgoing)
                outgoing = []
            gate.hold_response(out, self._response_delay_ms)
        else:
            outgoing.append(out)
        return outgoing

    def _queue_answers(self, outgoing: list[Frame]) -> list[Frame]:
        """Answers a filter made itself leave as soon as every response before them has."""
        in_flight = self._in_flight
        while in_flight and in_flight[0].answer is not None:
            self._response_delay_ms = 0
            request = in_flight.popleft()
            assert request.answer is not None
            outgoing = self._queue_response(self._filter_response(request, request.answer), outgoing)
        return outgoing

    def _return_response(self, frame: memoryview) -> Frame | None:
        if self._in_flight and self._in_flight[0].header is RAW_TOKEN:
            return self._return_raw_token(frame)
        correlation_id = read_correlation_id(frame)
        if not self._in_flight or correlation_id != self._in_flight[0].header.correlation_id:
            if correlation_id in self._acks0_sent:
                # Some brokers (librdkafka's mock among them) answer acks=0 Produce; Kafka clients expect
                # no answer and kafka-python drops the connection on an unknown correlation id.
                return None
            if not self._in_flight:
                raise ProtocolError("unexpected_response", f"no request is waiting for id {correlation_id}")
        request = self._in_flight.popleft()
        if correlation_id != request.header.correlation_id:
            raise ProtocolError(
                "correlation_mismatch",
                f"expected correlation id {request.header.correlation_id}, got {correlation_id}",
            )
        if request.reply is not None:
            header = request.header
            body = bytes(frame[4 + response_header_size(header.api_key, header.api_version, frame) :])
            if not request.reply.done():
                request.reply.set_result(body)
            return None
        return self._filter_response(request, frame)

    def _filter_response(self, request: InFlight, frame: Frame) -> Frame:
        out = self._chain.on_response(self, request, frame)
        self._metrics.count_response(request.header.api_key, len(out) - 4)
        if request.throttle_ms > 0 and self._gate is not None:
            self._gate.response_sent()  # written in this same pass; the gate also waits for the flush
        return out

    def _return_raw_token(self, frame: memoryview) -> Frame:
        self._in_flight.popleft()
        exchange = self._raw_exchange
        if exchange is not None and exchange.server_token(bytes(frame[4:])):
            self._raw_exchange = None
            self._requests.min_payload_bytes = self._responses.min_payload_bytes = MIN_FRAME_PAYLOAD_BYTES
        return frame

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self._closed:
            # Answers held back by a delay are the client's: send them before closing (a throttle delays,
            # it never drops; a producer that lost its ack would retry and duplicate).
            if self._gate is not None:
                self._gate.flush_held()
            self.close("upstream_closed", upstream=self.upstream_peer, error=str(exc) if exc else None)

    def upstream_pause_writing(self) -> None:
        # The broker is slower than the client: stop reading requests until it catches up.
        if self._pauses is not None:
            self._pauses.add("upstream_backlog")

    def upstream_resume_writing(self) -> None:
        if self._pauses is not None:
            self._pauses.discard("upstream_backlog")

    # ---- life cycle -----------------------------------------------------------------------------

    def _arm_idle_timer(self, delay: float) -> None:
        self._idle_timer = self._loop.call_later(delay, self._check_idle)

    def _check_idle(self) -> None:
        # One timer per connection, re-armed only when it fires: activity costs a float store, not a timer.
        timeout = self._settings.idle_timeout_s
        idle_for = self._loop.time() - self._last_activity
        # A throttle past its deadline does not count: a muted client that stopped reading is idle.
        busy = self._in_flight or (self._gate is not None and self._gate.remaining_ms() > 0)
        if busy:
            self._arm_idle_timer(timeout)
        elif idle_for < timeout:
            self._arm_idle_timer(max(timeout - idle_for, 0.05))
        else:
            self.close("idle_timeout", idle_s=round(idle_for, 3))

    def drain(self) -> None:
        """Stop taking requests; close once every request already forwarded has its response.

        Shutdown beats throttling: responses held back by a delay go out at once.
        """
        self._draining = True
        if self._pauses is not None:
            self._pauses.add("shutdown")
        if self._gate is not None:
            self._gate.flush_held()
        if not self._in_flight:
            self.close("shutdown")

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def _filter_failed(self, exc: BaseException) -> None:
        _log.error("filter_failed", peer=self.peer, upstream=self.upstream_peer, exc_info=exc)
        self.close("filter_error", error=repr(exc))

    def _protocol_error(self, side: str, exc: ProtocolError) -> None:
        self._metrics.count_protocol_error(exc.reason)
        peer = self.peer if side == "client" else self.upstream_peer
        _log.warning("protocol_error", side=side, peer=peer, reason=exc.reason, detail=exc.detail)
        self.close("protocol_error", side=side, reason=exc.reason)

    def close(self, cause: str, **detail: object) -> None:
        if self._closed:
            return
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._gate is not None:
            self._gate.close()
        if self._connect_task is not None and not self._connect_task.done():
            self._connect_task.cancel()
        for request in self._in_flight:
            if request.reply is not None and not request.reply.done():
                request.reply.cancel()
        if self._transport is not None:
            self._transport.close()
        if self._upstream is not None:
            self._upstream.close()
        self._settings.registry.remove(self)
        self._metrics.count_disconnect(cause)
        extra = {k: v for k, v in detail.items() if v is not None}
        _log.info("connection_closed", peer=self.peer, listener=self.listener, cause=cause, **extra)


class UpstreamSide(asyncio.Protocol):
    """The proxy's connection to one broker, on behalf of one client connection."""

    __slots__ = ("_client",)

    def __init__(self, client: ClientSide) -> None:
        self._client = client

    def data_received(self, data: bytes) -> None:
        self._client.upstream_data(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._client.upstream_lost(exc)

    def pause_writing(self) -> None:
        self._client.upstream_pause_writing()

    def resume_writing(self) -> None:
        self._client.upstream_resume_writing()
