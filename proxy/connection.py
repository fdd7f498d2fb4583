"""One client connection and the upstream connection that serves it.

`ClientSide` owns the session: it splits the client's stream into frames, runs the request filters,
forwards to its own upstream connection, and sends responses back in request order (a FIFO of the
requests in flight; a Produce with acks=0 gets no response and takes no place in it). `UpstreamSide` is a
thin protocol that hands the broker's bytes and flow-control events to its `ClientSide`.

Back-pressure runs both ways: when one side's write buffer passes the high-water mark, reading from the
other side pauses until it drains.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from protocol.apis import produce_acks
from protocol.errors import ProtocolError
from protocol.frames import FrameSplitter
from protocol.headers import RequestHeader, parse_request_header, read_correlation_id

from .flow import ReadPauses
from .log import get_logger

if TYPE_CHECKING:
    from .filters import FilterChain, Frame
    from .metrics import ProxyMetrics

PRODUCE = 0
_ACKS0_REMEMBERED = 1024
_log = get_logger("sluice.connection")

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

    def __iter__(self):
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

    __slots__ = ("chain", "idle_timeout_s", "max_frame_bytes", "metrics", "registry")

    def __init__(
        self,
        chain: FilterChain,
        metrics: ProxyMetrics,
        registry: ConnectionRegistry,
        max_frame_bytes: int,
        idle_timeout_s: float,
    ) -> None:
        self.chain = chain
        self.metrics = metrics
        self.registry = registry
        self.max_frame_bytes = max_frame_bytes
        self.idle_timeout_s = idle_timeout_s


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
        self._transport: asyncio.Transport | None = None
        self._upstream: asyncio.Transport | None = None
        self._upstream_pauses: ReadPauses | None = None
        self._pauses: ReadPauses | None = None
        self._requests = FrameSplitter(settings.max_frame_bytes)
        self._responses = FrameSplitter(settings.max_frame_bytes)
        self._in_flight: deque[RequestHeader] = deque()
        self._waiting_for_upstream: list[Frame] = []
        # Correlation ids of recent acks=0 Produce requests, to recognise a broker that answers them anyway.
        self._acks0_sent: deque[int] = deque(maxlen=_ACKS0_REMEMBERED)
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
        self._transport = transport
        self.peer = _format_peer(transport.get_extra_info("peername"))
        self._pauses = ReadPauses(transport)
        # Nothing can be forwarded until the upstream connection exists.
        self._pauses.add("connecting")
        self._settings.registry.add(self)
        self._last_activity = self._loop.time()
        self._arm_idle_timer(self._settings.idle_timeout_s)
        self._connect_task = self._loop.create_task(self._connect_upstream())
        _log.info("connection_opened", peer=self.peer, listener=self.listener)

    def data_received(self, data: bytes) -> None:
        self._last_activity = self._loop.time()
        try:
            # One writelines per read: pipelined requests leave in one system call, not one each.
            outgoing = [self._forward_request(frame) for frame in self._requests.feed(data)]
            if outgoing:
                self._send_upstream(outgoing)
        except ProtocolError as exc:
            self._protocol_error("client", exc)
        except Exception as exc:  # a filter bug must cost one connection, never the process
            _log.exception("filter_failed", peer=self.peer, upstream=self.upstream_peer)
            self.close("filter_error", error=repr(exc))

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

    def _forward_request(self, frame: memoryview) -> Frame:
        header = parse_request_header(frame)
        self._metrics.count_request(header.api_key, len(frame) - 4)
        frame = self._chain.on_request(self, header, frame)
        if header.api_key != PRODUCE or produce_acks(frame, header) != 0:
            self._in_flight.append(header)
        else:
            self._acks0_sent.append(header.correlation_id)
        return frame

    def _send_upstream(self, frames: list[Frame]) -> None:
        if self._upstream is None:
            # uvloop may deliver data that arrived with the connection before our pause takes effect.
            self._waiting_for_upstream.extend(frames)
        else:
            self._upstream.writelines(frames)

    # ---- upstream ------------------------------------------------------------------------------

    async def _connect_upstream(self) -> None:
        failures: list[str] = []
        for host, port in self._upstream_candidates():
            try:
                transport, _ = await self._loop.create_connection(lambda: UpstreamSide(self), host, port)
            except OSError as exc:
                failures.append(f"{host}:{port}: {exc.strerror or exc}")
                continue
            if self._closed:
                transport.close()
                return
            self._upstream = cast(asyncio.Transport, transport)
            self.upstream_peer = f"{host}:{port}"
            self._upstream_pauses = ReadPauses(self._upstream)
            if self._waiting_for_upstream:
                self._upstream.writelines(self._waiting_for_upstream)
                self._waiting_for_upstream = []
            assert self._pauses is not None
            self._pauses.discard("connecting")
            return
        self.close("upstream_unreachable", tried=failures or ["no known address"])

    def upstream_data(self, data: bytes) -> None:
        self._last_activity = self._loop.time()
        try:
            outgoing = [
                out
                for frame in self._responses.feed(data)
                if (out := self._return_response(frame)) is not None
            ]
            if outgoing:
                assert self._transport is not None
                self._transport.writelines(outgoing)
        except ProtocolError as exc:
            self._protocol_error("upstream", exc)
            return
        except Exception as exc:  # a filter bug must cost one connection, never the process
            _log.exception("filter_failed", peer=self.peer, upstream=self.upstream_peer)
            self.close("filter_error", error=repr(exc))
            return
        if self._draining and not self._in_flight:
            self.close("shutdown")

    def _return_response(self, frame: memoryview) -> Frame | None:
        correlation_id = read_correlation_id(frame)
        if not self._in_flight or correlation_id != self._in_flight[0].correlation_id:
            if correlation_id in self._acks0_sent:
                # Some brokers (librdkafka's mock among them) answer acks=0 Produce; Kafka clients expect
                # no answer and kafka-python drops the connection on an unknown correlation id.
                return None
            if not self._in_flight:
                raise ProtocolError("unexpected_response", f"no request is waiting for id {correlation_id}")
        request = self._in_flight.popleft()
        if correlation_id != request.correlation_id:
            raise ProtocolError(
                "correlation_mismatch",
                f"expected correlation id {request.correlation_id}, got {correlation_id}",
            )
        frame = self._chain.on_response(self, request, frame)
        self._metrics.count_response(request.api_key, len(frame) - 4)
        return frame

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self._closed:
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
        if idle_for < timeout or self._in_flight:
            self._arm_idle_timer(max(timeout - idle_for, 0.05) if not self._in_flight else timeout)
        else:
            self.close("idle_timeout", idle_s=round(idle_for, 3))

    def drain(self) -> None:
        """Stop taking requests; close once every request already forwarded has its response."""
        self._draining = True
        if self._pauses is not None:
            self._pauses.add("shutdown")
        if not self._in_flight:
            self.close("shutdown")

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

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
