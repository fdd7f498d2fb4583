"""One client connection and the upstream connection that serves it.

`ClientSide` owns the session: it splits the client's stream into frames, runs the request filters,
forwards to its own upstream connection, and sends responses back in request order (a FIFO of the
requests in flight; a Produce with acks=0 gets no response and takes no place in it). `UpstreamSide` is a
thin protocol that hands the broker's bytes and flow-control events to its `ClientSide`.

Back-pressure runs both ways: when one side's write buffer passes the high-water mark, reading from the
other side pauses until it drains. A throttle mutes the client through its `ThrottleGate`: reading stops
and requests already read are held, not forwarded, until the mute ends.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, cast

from protocol.apis import produce_acks
from protocol.errors import ProtocolError
from protocol.frames import FrameSplitter
from protocol.headers import parse_request_header, read_correlation_id
from quota import ANONYMOUS

from .filters.base import InFlight
from .flow import ReadPauses
from .log import get_logger
from .throttle_gate import ThrottleGate

if TYPE_CHECKING:
    from .filters import FilterChain, Frame
    from .metrics import ProxyMetrics

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

    __slots__ = ("chain", "idle_timeout_s", "max_frame_bytes", "measure_cpu", "metrics", "registry")

    def __init__(
        self,
        chain: FilterChain,
        metrics: ProxyMetrics,
        registry: ConnectionRegistry,
        max_frame_bytes: int,
        idle_timeout_s: float,
        measure_cpu: bool = False,
    ) -> None:
        self.chain = chain
        self.metrics = metrics
        self.registry = registry
        self.max_frame_bytes = max_frame_bytes
        self.idle_timeout_s = idle_timeout_s
        # Only a request_percentage quota needs the proxy's CPU time per connection; the thread clock
        # costs a system call per read, so it is not read otherwise.
        self.measure_cpu = measure_cpu


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
        self._last_activity = self._loop.time()
        self._arm_idle_timer(self._settings.idle_timeout_s)
        self._connect_task = self._loop.create_task(self._connect_upstream())
        _log.info("connection_opened", peer=self.peer, listener=self.listener)

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
        outgoing: list[Frame] = []
        gate = self._gate
        for i, frame in enumerate(frames):
            # uvloop may deliver data that arrived with the connection before our pause took effect.
            if self._upstream is None or (gate is not None and gate.muted):
                self._held.extend(frames[i:])
                break
            outgoing.append(self._forward_request(frame))
        if outgoing and self._upstream is not None:
            # One writelines per read: pipelined requests leave in one system call, not one each.
            self._upstream.writelines(outgoing)

    def _release_held(self) -> None:
        """The upstream is ready or the mute ended: forward what was held, in order."""
        if self._draining:
            return  # shutting down: requests never forwarded stay unanswered, and the client retries them
        held, self._held = self._held, []
        self._forward_or_close(held)

    def _forward_request(self, frame: memoryview) -> Frame:
        header = parse_request_header(frame)
        self._metrics.count_request(header.api_key, len(frame) - 4)
        self._request_throttle_ms = 0
        out = self._chain.on_request(self, header, frame)
        if header.api_key != PRODUCE or produce_acks(frame, header) != 0:
            self._in_flight.append(InFlight(header, self._request_throttle_ms))
            if self._request_throttle_ms > 0 and self._gate is not None:
                self._gate.expect_response()
        else:
            self._acks0_sent.append(header.correlation_id)
        return out

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

    # ---- upstream ------------------------------------------------------------------------------

    async def _connect_upstream(self) -> None:
        failures: list[str] = []
        for host, port in self._upstream_candidates():
            try:
                transport, _ = await asyncio.wait_for(
                    self._loop.create_connection(lambda: UpstreamSide(self), host, port), _CONNECT_TIMEOUT_S
                )
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

    def _return_responses(self, frames: list[memoryview]) -> None:
        transport, gate = self._transport, self._gate
        assert transport is not None and gate is not None
        outgoing: list[Frame] = []
        for frame in frames:
            self._response_delay_ms = 0
            out = self._return_response(frame)
            if out is None:
                continue
            if self._response_delay_ms > 0 or gate.holding_responses:
                # Delayed (pre-KIP-219), or queued behind one that is: the gate keeps request order.
                if outgoing:
                    transport.writelines(outgoing)
                    outgoing = []
                gate.hold_response(out, self._response_delay_ms)
            else:
                outgoing.append(out)
        if outgoing:
            transport.writelines(outgoing)

    def _return_response(self, frame: memoryview) -> Frame | None:
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
        out = self._chain.on_response(self, request, frame)
        self._metrics.count_response(request.header.api_key, len(out) - 4)
        if request.throttle_ms > 0 and self._gate is not None:
            self._gate.response_sent()  # written in this same pass; the gate also waits for the flush
        return out

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

    def _filter_failed(self, exc: Exception) -> None:
        _log.exception("filter_failed", peer=self.peer, upstream=self.upstream_peer)
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
