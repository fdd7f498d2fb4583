"""One client connection and the upstream connection that serves it: the asyncio shell.

`ClientSide` owns the transports, read pauses and timers of one client connection; the order of its
requests and responses (the FIFO in flight, correlation checks, acks=0, the proxy's own requests, SASL's
raw framing) is its `RequestPipeline` (proxy/data_path/request_pipeline.py), which never touches a socket.
`UpstreamSide` is a thin protocol that hands the broker's bytes and flow-control events to its
`ClientSide`.

Back-pressure runs both ways: when one side's write buffer passes the high-water mark, reading from the
other side pauses until it drains. A throttle mutes the client through its `ThrottleGate`: reading stops
and requests already read are held, not forwarded, until the mute ends.

A bad request frame (a length prefix out of bounds, a header that does not parse) is logged at once,
but the valid requests read before it are still forwarded and answered; then the connection closes.
What the connection may buffer of requests still arriving is its `RequestGuard`'s business (a share of
the proxy-wide request memory; with `sasl.required`, Kafka's limits before authentication).

Why this module is long: it is the whole asyncio shell of a connection (two transports and their pauses,
the throttle gate, the upstream connect, the idle timer, shutdown) plus the two small interfaces others
call on it, the services a filter may ask for (ConnectionInfo) and the pipeline's sink; each is a few lines
over the same connection state. What was logic moved out: the request order to
proxy/data_path/request_pipeline.py, the filters' run to proxy/data_path/filter_chain.py, the upstream
connect loop to proxy/data_path/upstream.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, cast

from sluice.protocol.errors import ProtocolError
from sluice.protocol.frame_memory import buffer_in_use
from sluice.protocol.frames import BadFramePrefix, FrameSplitter
from sluice.quota import ANONYMOUS

from ..filter_api.contract import UNOFFERED_VERSION, Pending, RawExchange, Reply
from ..observability.log import get_logger
from .flow import ReadPauses
from .request_guard import RequestGuard
from .request_pipeline import CloseConnection, Lifecycle, RequestPipeline
from .session import READ_BUFFER_BYTES, ConnectionRegistry, SessionSettings
from .throttle_gate import ThrottleGate
from .upstream import WRITE_HIGH_WATER, UpstreamSide, UpstreamUnreachable, connect_first

if TYPE_CHECKING:
    from ..filter_api.contract import Frame

__all__ = ["ClientSide", "ConnectionRegistry", "SessionSettings", "UpstreamSide"]

_log = get_logger("sluice.connection")
_T = TypeVar("_T")
# A pass is timed as Kafka times its request handlers' and network threads' work (`time.nanoseconds()`,
# System.nanoTime): on the monotonic clock, its wall time. The thread CPU clock would leave out a pass's
# preemption, but it is a system call (Linux has no vDSO path for CPU-time clocks): 0.77 us a read here,
# twice a pass, where the monotonic clock costs 0.06 (docs/quotas.md, "Request time").
_pass_clock_ns = time.monotonic_ns
# A request at least this large that a read leaves incomplete is forwarded as it arrives, rather than
# joined into one buffer first (when no filter reads its body): joining megabyte requests costs more in
# page faults than in copying. Smaller ones are assembled, as their pieces are few and small.
STREAM_MIN_FRAME_BYTES = 64 * 1024
# How much of it must have arrived before deciding: its header and, for a Produce, the acks field.
STREAM_HEAD_BYTES = 1024
UPSTREAM_BACKLOG = "upstream_backlog"
_PAUSE_MID_REQUEST = frozenset({UPSTREAM_BACKLOG})
_DRAINING = Lifecycle.DRAINING
_NO_BUFFER = bytearray()
# After a bad request frame, how long the requests read before it may take to be answered.
_BAD_FRAME_GRACE_S = 30.0


def _format_peer(peername: object) -> str:
    if isinstance(peername, tuple) and len(peername) >= 2:
        return f"{peername[0]}:{peername[1]}"
    return str(peername)


class ClientSide(asyncio.BufferedProtocol):
    """The client's connection to the proxy: transports, pauses and timers around its RequestPipeline."""

    # Slots, not a __dict__: the compiled passes and queries (_connection_passes.c, _connection_queries.c)
    # read and write a connection's attributes at their offsets, as 3.11's bytecode does, where a read by
    # name through the C API costs ~190 instructions; a pass over a read makes some twenty of them. Every
    # one is set in __init__ (tests/proxy/test_connection_attributes.py).
    __slots__ = (
        "_closed",
        "_closing_after",
        "_connect_task",
        "_cpu_time_needed",
        "_gate",
        "_grace_timer",
        "_guard",
        "_idle_timer",
        "_last_activity",
        "_last_read",
        "_loop",
        "_metrics",
        "_pauses",
        "_pipeline",
        "_read_buffer",
        "_replies",
        "_requests",
        "_responses",
        "_settings",
        "_transport",
        "_upstream",
        "_upstream_candidates",
        "_upstream_pauses",
        "_watched_fd",
        "cpu_ns",
        "listener",
        "peer",
        "upstream_peer",
        "user",
    )

    def __init__(
        self,
        settings: SessionSettings,
        listener: str,
        upstream_candidates: Callable[[], list[tuple[str, int]]],
    ) -> None:
        self._settings = settings
        self._metrics = settings.metrics
        self._cpu_time_needed = settings.cpu_time_needed
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
        self._pipeline: RequestPipeline | None = None
        self._requests = FrameSplitter(settings.max_request_bytes)
        # A large request's start, which a read ends with, goes upstream as a view of the read buffer (the
        # next read then takes a fresh one) instead of a copy: see _take_requests's `settle`.
        self._requests.defer_copies = True
        self._responses = FrameSplitter(settings.max_frame_bytes)
        # Responses the current pass sends, written in one go.
        self._replies: list[Frame] = []
        self._connect_task: asyncio.Task[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_activity = 0.0
        self._last_read = 0.0  # loop time of the last read from the client
        self._closed = False
        self._guard: RequestGuard | None = None
        self._watched_fd = -1  # the client socket, as the proxy's PeerWatch knows it
        # Set by a bad request frame: close with this reason once the requests before it are answered.
        self._closing_after: str | None = None
        self._grace_timer: asyncio.TimerHandle | None = None
        # The client's bytes are read into a buffer (asyncio.BufferedProtocol) that every connection of the
        # proxy shares: a read is handed over (get_buffer, then buffer_updated) before any other runs, so
        # one buffer serves them all while nothing holds a view of it; a request held or a write not yet
        # flushed keeps its buffer, and reading goes on in a fresh one. (One 256 KiB buffer for each
        # connection took 2,000 connections to half a gigabyte.)
        self._read_buffer = _NO_BUFFER
        self._loop = asyncio.get_running_loop()

    # ---- client transport callbacks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but they have its methods.
        transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self._transport = transport
        peername = transport.get_extra_info("peername")
        self.peer = _format_peer(peername)
        admission = self._settings.admission
        if admission is not None:
            refused_ms = admission(peername)
            if refused_ms > 0:
                self._refuse(transport, refused_ms)
                return
        self._pauses = ReadPauses(transport)
        # Nothing can be forwarded until the upstream connection exists, and nothing more is read meanwhile.
        self._pauses.add("connecting")
        self._loop.call_soon(self._pauses.reassert)
        self._gate = gate = ThrottleGate(
            self._loop,
            transport,
            self._to_client,
            self._pauses,
            self._release_held,
            self._metrics.count_muted,
        )
        filters = self._settings.chain.for_connection(self, gate.mute_for)
        self._pipeline = RequestPipeline(filters, gate, self, self._metrics, self._requests, self._responses)
        self._settings.registry.add(self)
        if self._settings.peer_watch is not None:  # a hang-up is noticed while reading is paused too
            self._watched_fd = self._settings.peer_watch.watch(self, transport)
        if self._settings.client_principal is not None and not self._take_certificate_user(transport):
            return
        settings = self._settings
        limits = settings.unproven_limits
        self._guard = RequestGuard(
            self._loop,
            self._requests,
            self._pauses,
            settings.request_memory,
            limits if self.user == ANONYMOUS else None,  # a client certificate proves it at once
            self._slow_unauthenticated_frame,
            proven_by_sasl=settings.sasl_required is not None,
            limit_name=settings.max_request_limit_name,
        )
        self._last_activity = self._loop.time()
        self._arm_idle_timer(self._settings.idle_timeout_s)
        self._connect_task = self._loop.create_task(self._connect_upstream())
        _log.info("connection_opened", peer=self.peer, listener=self.listener)

    def _refuse(self, transport: asyncio.Transport, throttle_ms: int) -> None:
        """KIP-612: a connection over its address's connection_creation_rate is not served and is closed
        once the throttle has passed, so the client cannot reconnect at once (Kafka's delayed close).
        Not logged one by one (a flood of connections must not flood the log); counted as a disconnect."""
        self._closed = True
        transport.pause_reading()
        self._loop.call_later(throttle_ms / 1000, transport.close)
        self._metrics.count_disconnect("connection_rate_throttled")

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

    def get_buffer(self, sizehint: int) -> memoryview:
        # Reuse the read buffer unless something still holds a view of it (a bytearray cannot grow while a
        # view of it lives): a request's start streaming upstream, a write the transport has not flushed, a
        # filter's reference. A view of it, never the bytearray itself: asyncio's own TLS transport reads
        # each TLS record after the first into a slice of what it is given, and a bytearray's slice is a copy
        # (tests/proxy/test_server_inprocess.py).
        settings = self._settings
        buffer = settings.read_buffer
        if buffer_in_use(buffer):
            buffer = settings.read_buffer = bytearray(READ_BUFFER_BYTES)
        self._read_buffer = buffer
        return memoryview(buffer)

    def buffer_updated(self, nbytes: int) -> None:
        # Only the views of it that something keeps (a held request, an unflushed write) keep the buffer
        # alive after this: the connection does not, or every connection would pin a 256 KiB buffer.
        buffer, self._read_buffer = self._read_buffer, _NO_BUFFER
        if self._pipeline is None:
            # A connection refused at accept (KIP-612): uvloop may still hand over the bytes that arrived
            # with it, although reading was paused at once. They are not served.
            return
        self._last_read = self._last_activity = self._loop.time()
        self._pass(_TAKE_REQUESTS, memoryview(buffer).toreadonly()[:nbytes], _BAD_REQUEST_FRAME)
        guard = self._guard
        if guard is not None and not self._closed:
            guard.after_feed()  # after _stream_tail: a request passed through holds no memory
        self._requests.through = []  # written (or queued by the transport, which then holds the buffer)

    def _take_requests(self, data: bytes | memoryview) -> None:
        requests = self._requests
        try:
            frames = requests.feed(data)
        except BadFramePrefix as exc:
            self._bad_request_frame(exc)  # logged now; the requests before it still go on
            if self._closed:
                return
            frames = exc.frames
        pipeline = self._pipeline
        assert pipeline is not None
        try:
            if requests.through:
                # More of a request already on its way upstream: it goes on first, as it came.
                ended = not requests.passing_through
                pipeline.through(requests.through, ended)
                if ended and self._pauses is not None:
                    self._pauses.frame_ended()
            self._after_step(pipeline.client_frames(frames))
        finally:
            # What this read left pending in the splitter is copied out now (unless a request streaming on
            # took it): a connection waiting for the rest of a request must not hold a whole read buffer.
            requests.settle()

    def _after_step(self, ready: Pending | None) -> None:
        """A step that forwarded requests is done: wait for a filter's deferral, or let a large request
        that a read (or a wait) left incomplete go on as it arrives."""
        if ready is not None:
            self._wait_for(ready)
        elif self._pipeline is not None and self._requests.buffered_bytes >= STREAM_HEAD_BYTES:
            # (else no request could go on yet, which is nearly every read: incomplete_head's first test,
            # made here without its two calls)
            self._stream_tail(self._requests, self._pipeline)

    def _stream_tail(self, requests: FrameSplitter, pipeline: RequestPipeline) -> None:
        """A large request this read began may go on as it arrives (RequestPipeline.stream_tail)."""
        pauses = self._pauses
        if pauses is None or requests.incomplete_head(STREAM_MIN_FRAME_BYTES, STREAM_HEAD_BYTES) is None:
            return
        # From before its filters run: a mute, deferral or shutdown must not cut it in half (the rest of it
        # would wait in the client's socket); back-pressure still pauses at once, as in any relay.
        pauses.hold_open(_PAUSE_MID_REQUEST)
        streamed = False
        try:
            streamed = pipeline.stream_tail(requests, STREAM_MIN_FRAME_BYTES, STREAM_HEAD_BYTES)
        finally:
            if not streamed:
                pauses.frame_ended()

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

    def _pass(
        self,
        work: Callable[[ClientSide, _T], None],
        arg: _T,
        bad_frame: Callable[[ClientSide, ProtocolError], None],
    ) -> None:
        """Every piece of work on the pipeline runs here (a read from either side, an unmute, a resume):
        its CPU time counted (an unmute or a resume runs the filters on held requests outside any read),
        what it produced written (one writelines each way), a bad frame handed to `bad_frame`, a filter's
        Close or failure (which must cost one connection, never the process) closing the connection; then
        the close that shutdown or a bad request frame put off, once nothing is owed. `work` and
        `bad_frame` are ClientSide's functions, called with this connection (see _TAKE_REQUESTS below)."""
        started = _pass_clock_ns() if self._cpu_time_needed() else 0
        try:
            work(self, arg)
        except BaseException as exc:
            self._finish_failed_pass(exc, bad_frame, started)
            return
        self._flush()
        if started:
            self.cpu_ns += _pass_clock_ns() - started
        self._after_pass()

    def _finish_failed_pass(
        self,
        exc: BaseException,
        bad_frame: Callable[[ClientSide, ProtocolError], None],
        started: int,
    ) -> None:
        """The rest of a pass whose work raised `exc` (`_pass`'s, and the compiled passes' of
        proxy/data_path/_connection_passes.c, which hand their failures over here): a bad frame goes to
        `bad_frame`, a filter's Close or failure closes the connection; anything else (not an Exception)
        goes on up, once what the pass produced is written."""
        try:
            if not isinstance(exc, Exception):
                raise exc
            self._work_failed(exc, bad_frame)
        finally:
            self._flush()
            if started:
                self.cpu_ns += _pass_clock_ns() - started
        self._after_pass()

    def _work_failed(self, exc: Exception, bad_frame: Callable[[ClientSide, ProtocolError], None]) -> None:
        if isinstance(exc, ProtocolError):
            bad_frame(self, exc)
        elif isinstance(exc, CloseConnection):
            self._close_on_error("filter_closed", reason=exc.reason)
        else:
            self._filter_failed(exc)

    def _after_pass(self) -> None:
        """The end of every pass: the close that shutdown or a bad request frame put off, once nothing is
        owed."""
        pipeline = self._pipeline
        if pipeline is not None and pipeline.state is _DRAINING and pipeline.drained:
            if self._gate is not None:
                self._gate.flush_held()
            self.close("shutdown")
        elif self._closing_after is not None:
            self._close_if_answered()

    def _run(self, step: Callable[[], Pending | None]) -> None:
        """Run a pipeline step outside a read (connected, unmuted, resumed)."""
        self._pass(_RUN_STEP, step, _BAD_REQUEST_FRAME)

    def _run_step(self, step: Callable[[], Pending | None]) -> None:
        self._after_step(step())

    def _flush(self) -> None:
        pipeline = self._pipeline
        if pipeline is not None and pipeline.outgoing:
            if self._upstream is not None and not self._closed:
                # One writelines per read: pipelined requests leave in one system call, not one each.
                self._upstream.writelines(pipeline.outgoing)
            pipeline.outgoing = []
        replies = self._replies
        if replies:
            # `_write_replies`, written out: this runs at the end of every pass, and a call less is less of
            # the interpreter to bring back into cache after an idle gap (docs/benchmarks.md).
            self._replies = []
            if self._transport is not None and not self._closed:
                self._transport.writelines(replies)

    def _write_replies(self) -> None:
        """Send the responses this pass made before it ends (`_flush` sends the rest, as this does); the
        throttle gate's held responses go through `_to_client`."""
        replies, self._replies = self._replies, []
        self._to_client(replies)

    def _to_client(self, frames: list[Frame]) -> None:
        if self._transport is not None and not self._closed:
            self._transport.writelines(frames)

    def _release_held(self) -> None:
        """The upstream is ready or a mute ended: forward what was held, in order."""
        if self._pipeline is not None and not self._closed:
            self._run(self._pipeline.release)

    def _wait_for(self, ready: Pending) -> None:
        if self._pauses is not None:
            self._pauses.add("deferred")

        def resume(done: Pending) -> None:
            if self._pauses is not None:
                self._pauses.discard("deferred")
            failure = None if done.cancelled() else done.exception()
            if failure is not None:  # a filter's wait went wrong: a bug, costing this connection only
                self._filter_failed(failure)
                return
            if self._pipeline is not None and not self._closed:
                self._run(self._pipeline.resume)

        ready.add_done_callback(resume)

    # ---- what filters may ask of the connection (ConnectionInfo) ----------------------------------

    def now_ms(self) -> int:
        return int(self._loop.time() * 1000)

    def read_ms(self) -> int:
        return int(self._last_read * 1000)

    def take_cpu_ns(self) -> int:
        """CPU time spent on this connection since the last call, for request_percentage charging: the wall
        time of its passes (`_pass_clock_ns`)."""
        spent, self.cpu_ns = self.cpu_ns, 0
        return spent

    def mute_remaining_ms(self) -> int:
        """How long the connection stays muted from now (0 when it is not muted)."""
        gate = self._gate
        # Asked for every answer a quota filter sees: when not muted (nearly always), no call to the gate.
        return gate.remaining_ms() if gate is not None and gate.muted else 0

    def send_upstream(self, api_key: int, api_version: int, body: bytes) -> asyncio.Future[bytes]:
        """Send the proxy's own request on this connection, so it is authenticated as the client. The future
        gets the response body; the client never sees the response. Requests already forwarded go first."""
        reply: asyncio.Future[bytes] = self._loop.create_future()
        pipeline = self._pipeline
        if self._closed or pipeline is None or not pipeline.own_request(api_key, api_version, body, reply):
            reply.cancel()  # nobody will answer: whoever waits on it stops
            return reply
        self._flush()
        return reply

    def begin_raw_exchange(self, exchange: RawExchange) -> None:
        assert self._pipeline is not None
        self._pipeline.begin_raw_exchange(exchange)

    def sasl_authenticated(self) -> None:
        """The broker accepted the client's SASL exchange: the pre-authentication limits end."""
        if self._guard is not None:
            self._guard.sasl_authenticated()

    # ---- what the pipeline sends (ResponseSink) ---------------------------------------------------

    def send_response(self, frame: Frame, delay_ms: int) -> None:
        gate = self._gate
        assert gate is not None and self._transport is not None
        if delay_ms > 0 or gate.held_responses:
            # Delayed (pre-KIP-219), or queued behind one that is: the gate keeps request order.
            if self._replies:
                self._write_replies()
            gate.hold_response(frame, delay_ms)
        else:
            self._replies.append(frame)

    def deliver_reply(self, reply: Reply, body: bytes) -> None:
        if not reply.done():
            reply.set_result(body)

    # ---- upstream ------------------------------------------------------------------------------

    async def _connect_upstream(self) -> None:
        try:
            transport, self.upstream_peer = await connect_first(
                self._loop,
                self._upstream_candidates(),
                self._settings.upstream_tls,
                lambda: UpstreamSide(self),
                self._settings.upstream_bind_address,
            )
        except UpstreamUnreachable as exc:
            self.close("upstream_unreachable", tried=exc.tried)
            return
        if self._closed:
            transport.close()
            return
        self._upstream = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        loads = self._settings.broker_loads
        if loads is not None and self._pipeline is not None:  # counted toward the broker it reached
            share = loads.share(_format_peer(transport.get_extra_info("peername")))
            self._pipeline.load = share
            if self._guard is not None:
                self._guard.load = share
        self._upstream_pauses = ReadPauses(transport)
        assert self._pipeline is not None and self._pauses is not None
        self._run(self._pipeline.upstream_ready)
        if self._pauses is not None:  # (None: what was held closed the connection)
            self._pauses.discard("connecting")

    def upstream_data(self, data: bytes) -> None:
        self._last_activity = self._loop.time()
        self._pass(_TAKE_RESPONSES, data, _BAD_RESPONSE_FRAME)

    def _take_responses(self, data: bytes) -> None:
        frames = self._responses.feed(data)
        guard = self._guard
        if frames and guard is not None and guard.awaiting_answer:
            guard.broker_answered()  # it speaks Kafka: the limits before proof end
        assert self._pipeline is not None
        self._pipeline.broker_frames(frames)

    def _bad_response_frame(self, exc: ProtocolError) -> None:
        # An answer refused because its request asked for what was never offered is the client's doing.
        self._protocol_error("client" if exc.reason == UNOFFERED_VERSION else "upstream", exc)

    def upstream_lost(self, exc: Exception | None) -> None:
        self._close_on_error("upstream_closed", upstream=self.upstream_peer, error=str(exc) if exc else None)

    def upstream_pause_writing(self) -> None:
        # The broker is slower than the client: stop reading requests until it catches up.
        if self._pauses is not None:
            self._pauses.add(UPSTREAM_BACKLOG)

    def upstream_resume_writing(self) -> None:
        if self._pauses is not None:
            self._pauses.discard(UPSTREAM_BACKLOG)

    # ---- life cycle -----------------------------------------------------------------------------

    def _arm_idle_timer(self, delay: float) -> None:
        self._idle_timer = self._loop.call_later(delay, self._check_idle)

    def _check_idle(self) -> None:
        # One timer per connection, re-armed only when it fires: activity costs a float store, not a timer.
        timeout = self._settings.idle_timeout_s
        idle_for = self._loop.time() - self._last_activity
        # A throttle past its deadline does not count: a muted client that stopped reading is idle.
        busy = self.in_flight or (self._gate is not None and self._gate.remaining_ms() > 0)
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
        if self._pauses is not None:
            self._pauses.add("shutdown")
        if self._gate is not None:
            self._gate.flush_held()
        if self._pipeline is None or self._pipeline.drain():
            self.close("shutdown")

    @property
    def in_flight(self) -> int:
        return self._pipeline.in_flight if self._pipeline is not None else 0

    @property
    def reading_paused(self) -> bool:
        return self._pauses is not None and self._pauses.paused

    @property
    def closed(self) -> bool:
        return self._closed

    def _filter_failed(self, exc: BaseException) -> None:
        _log.error("filter_failed", peer=self.peer, upstream=self.upstream_peer, exc_info=exc)
        self._close_on_error("filter_error", error=repr(exc))

    def _bad_request_frame(self, exc: ProtocolError) -> None:
        """Log a bad request frame now; close once the requests read before it have been answered."""
        reason, detail, limit = exc.reason, exc.detail, {}
        if reason == "frame_too_large" and self._guard is not None and isinstance(exc, BadFramePrefix):
            reason, size, name = self._guard.refusal(exc)  # which limit it broke, named
            limit = {"limit": size, "limit_name": name}
            detail = f"a frame of {exc.length} bytes, over {name} ({size})"
        self._metrics.count_protocol_error(reason)
        _log.warning("protocol_error", side="client", peer=self.peer, reason=reason, detail=detail, **limit)
        if self._closing_after is not None or self._closed:
            return
        self._closing_after = reason
        self._requests.clear()  # the stream cannot be read any further
        if self._guard is not None:
            self._guard.close()
        if self._pauses is not None:
            self._pauses.add("protocol_error")
        self._grace_timer = self._loop.call_later(_BAD_FRAME_GRACE_S, self._close_after_bad_frame)
        if not isinstance(exc, BadFramePrefix) or not exc.frames:
            self._close_if_answered()

    def _close_if_answered(self) -> None:
        pipeline, gate = self._pipeline, self._gate
        if pipeline is not None and (pipeline.waiting or pipeline.in_flight):
            return
        if gate is not None and gate.held_responses:
            return
        self._close_after_bad_frame()

    def _close_after_bad_frame(self) -> None:
        self._close_on_error("protocol_error", side="client", reason=self._closing_after)

    def _slow_unauthenticated_frame(self, waited_s: float) -> None:
        buffered = self._requests.buffered_bytes
        self._metrics.count_protocol_error("slow_unauthenticated_frame")
        _log.warning(
            "protocol_error",
            side="client",
            peer=self.peer,
            reason="slow_unauthenticated_frame",
            detail=f"{buffered} bytes of a frame still incomplete after {waited_s:g} s, before this "
            "connection proved itself",
            limit=waited_s,
            limit_name="sasl.unauthenticated_frame_timeout_s",
        )
        self.close("protocol_error", side="client", reason="slow_unauthenticated_frame")

    def _protocol_error(self, side: str, exc: ProtocolError) -> None:
        self._metrics.count_protocol_error(exc.reason)
        peer = self.peer if side == "client" else self.upstream_peer
        _log.warning("protocol_error", side=side, peer=peer, reason=exc.reason, detail=exc.detail)
        self._close_on_error("protocol_error", side=side, reason=exc.reason)

    def _close_on_error(self, cause: str, **detail: object) -> None:
        """Close for a cause that is not the client going away: first send what the client is owed, the
        responses of this pass and those a delay holds back (a throttle delays, it never drops; a producer
        that lost its ack would retry and duplicate)."""
        if self._closed:
            return
        if self._replies:
            self._write_replies()
        if self._gate is not None:
            self._gate.flush_held()
        self.close(cause, **detail)

    def close(self, cause: str, **detail: object) -> None:
        if self._closed:
            return
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._grace_timer is not None:
            self._grace_timer.cancel()
        if self._guard is not None:
            self._guard.close()
        if self._watched_fd >= 0 and self._settings.peer_watch is not None:
            self._settings.peer_watch.forget(self, self._watched_fd)
        # Buffers go back now, not when a reference cycle through this object is collected.
        self._requests.clear()
        self._responses.clear()
        if self._gate is not None:
            self._gate.close()
        if self._connect_task is not None and not self._connect_task.done():
            self._connect_task.cancel()
        if self._pipeline is not None:
            for waited_for in self._pipeline.close():
                if not waited_for.done():
                    waited_for.cancel()
        if self._transport is not None:
            self._transport.close()
        if self._upstream is not None:
            self._upstream.close()
        self._settings.registry.remove(self)
        self._metrics.count_disconnect(cause)
        extra = {k: v for k, v in detail.items() if v is not None}
        _log.info("connection_closed", peer=self.peer, listener=self.listener, cause=cause, **extra)
        # Its pipeline, filters, gate, guard and transports all point back at it: dropped now, the
        # connection's memory goes at once instead of at the cyclic collector's next full run.
        self._pipeline = self._gate = self._guard = self._pauses = self._upstream_pauses = None
        self._transport = self._upstream = self._idle_timer = self._grace_timer = self._connect_task = None


# What `_pass` runs, as ClientSide's plain functions: read as a value, `self._take_requests` is a bound method
# made (and freed) each time, two a read each way, a read Python 3.11 does not specialise.
_TAKE_REQUESTS = ClientSide._take_requests
_TAKE_RESPONSES = ClientSide._take_responses
_RUN_STEP = ClientSide._run_step
_BAD_REQUEST_FRAME = ClientSide._bad_request_frame
_BAD_RESPONSE_FRAME = ClientSide._bad_response_frame

# What a filter may ask of its connection, as written above: the references of the compiled queries
# (proxy/data_path/_connection_queries.c), which ClientSide runs where the install has them (the client quotas
# ask them on every Produce and its answer; compiled, a call from their compiled charges costs no frame).
QUERIES_IN_PYTHON = {
    name: getattr(ClientSide, name) for name in ("now_ms", "read_ms", "take_cpu_ns", "mute_remaining_ms")
}
if not TYPE_CHECKING:  # the type checker reads the Python methods; the compiled ones take the same
    try:
        from sluice.proxy.data_path import _connection_queries
    except ImportError:  # built without a C compiler
        pass
    else:
        for _name, _query in _connection_queries.methods_of(ClientSide).items():
            setattr(ClientSide, _name, _query)

# The passes over a read from either side (and the lending of the read buffer, and the sending of an answer),
# as written above: the references of their compiled twins (proxy/data_path/_connection_passes.c), which
# ClientSide runs where the install has them (a Fetch answer then runs no Python of the connection's, the
# splitter's or the pipeline's on its way through, and a read of whole requests none of the connection's).
_PASSES = ("upstream_data", "send_response", "get_buffer", "buffer_updated")
PASSES_IN_PYTHON = {name: getattr(ClientSide, name) for name in _PASSES}
if not TYPE_CHECKING:
    try:
        from sluice.proxy.data_path import _connection_passes
    except ImportError:  # built without a C compiler
        pass
    else:
        from sluice.protocol import frames as _frames

        from . import request_pipeline

        _connection_passes.bind(
            {
                "FrameSplitter": FrameSplitter,  # (the classes whose slots the passes read at their offsets)
                "RequestPipeline": RequestPipeline,
                "ThrottleGate": ThrottleGate,
                "RequestGuard": RequestGuard,
                "SessionSettings": SessionSettings,
                "ClientSide": ClientSide,
                # The globals the passes read at each pass, as the Python reads them: the splitter's
                # _whole_frames, the pipeline's _forward_plain and _answers_plain, this module's
                # _pass_clock_ns, _NO_BUFFER, buffer_in_use, READ_BUFFER_BYTES and _TAKE_REQUESTS.
                "frames_globals": vars(_frames),
                "pipeline_globals": vars(request_pipeline),
                "connection_globals": globals(),
                "DRAINING": _DRAINING,
                "bad_response_frame": _BAD_RESPONSE_FRAME,
                "bad_request_frame": _BAD_REQUEST_FRAME,
                **PASSES_IN_PYTHON,
            }
        )
        for _name, _pass_method in _connection_passes.methods_of(ClientSide).items():
            setattr(ClientSide, _name, _pass_method)
