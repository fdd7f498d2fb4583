"""RequestPipeline: the order of one connection's requests and responses, sans-IO.

Frames in, actions out; no asyncio, no clock. The pipeline keeps the FIFO of requests in flight (so
responses reach the client in request order), checks each response's correlation id against it, knows
that a Produce with acks=0 gets no response (and drops the answer a broker sends anyway), numbers the
proxy's own requests, puts answers a filter made in their turn, and relays SaslHandshake v0's bare tokens.
What it cannot do itself it asks of its collaborators: the connection's filters, the throttle gate (is
the connection muted?), a sink that writes responses or hands the proxy's own replies back, and metrics.
`ClientSide` (proxy/data_path/connection.py) keeps the transports, read pauses and timers around it.

The connection's life is one `Lifecycle` value; forwarding happens only while it is OPEN and the gate
is not muted. Requests that cannot go now are held, in order, until `release()`.

Why this module is long: it is one state machine. The FIFO, the held requests, a deferral's resume point
and the life cycle all serve one invariant, that the client sees its answers in the order it asked, and
each step reads or changes several of them; split, that invariant would have no single place.
"""

from __future__ import annotations

from collections import deque
from enum import Enum
from typing import TYPE_CHECKING, Protocol, cast

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.frame_memory import stays_valid
from sluice.protocol.frames import MIN_FRAME_PAYLOAD_BYTES, FrameHead, FrameObserver, FrameSplitter
from sluice.protocol.headers import (
    RequestHeader,
    encode_request,
    parse_request_header,
    read_correlation_id,
    response_header_size,
)
from sluice.protocol.primitives import INT32_UNPACK
from sluice.protocol.produce import produce_acks

from ..filter_api.contract import (
    Answer,
    Close,
    EntryKind,
    Forward,
    Frame,
    InFlight,
    Pending,
    RawExchange,
    Reply,
    Respond,
    whole,
)
from ..observability.metrics import OTHER_SLOT, ProxyMetrics
from .broker_load import COUNTED_MIN_BYTES
from .filter_chain import ChainOutcome, ConnectionFilters, Deferred

_PRODUCE = ApiKey.PRODUCE
# Every field given: the tuple made directly, without the NamedTuple's own __new__ (Python code, half the
# cost of an entry, and one is made per request).
_new_in_flight = tuple.__new__
assert len(InFlight._fields) == 7, "_expect makes an InFlight with every field: give it the new one"
# acks=0 correlation ids remembered, to recognise a broker that answers them anyway.
ACKS0_REMEMBERED = 1024
# The proxy's own requests count up from here, clear of the client's ids (Kafka clients count up from 0).
FIRST_OWN_CORRELATION_ID = -(2**31)
OWN_CLIENT_ID = "sluice"
# Stands in for the header of a token in SaslHandshake v0's legacy framing, which has none.
RAW_TOKEN = RequestHeader(-1, 0, 0, None, 0)

_FORWARDED, _ANSWERED, _OWN, _RAW = (
    EntryKind.FORWARDED,
    EntryKind.ANSWERED,
    EntryKind.OWN,
    EntryKind.RAW_TOKEN,
)


class Lifecycle(Enum):
    """Where a connection is in its life. Requests are forwarded only while OPEN.

    CONNECTING -> OPEN (upstream connected); OPEN <-> DEFERRED (a filter waits for something);
    CONNECTING/OPEN/DEFERRED -> DRAINING (shutdown: nothing more is forwarded, the connection closes once
    nothing is in flight); any -> CLOSED.
    """

    CONNECTING = "connecting"
    OPEN = "open"
    DEFERRED = "deferred"
    DRAINING = "draining"
    CLOSED = "closed"


_OPEN = Lifecycle.OPEN
# _forward_from's `other` where the plain run has not run yet at frames[i]: a sentinel, typed as the outcome
# it stands in for (cast once here, not per request).
_NOT_RUN = cast("tuple[RequestHeader, ChainOutcome]", object())
# A Deferred that resumes here resumes past every filter: a request waiting for room at its broker has
# been through them all already (it is not charged twice).
_PAST_THE_FILTERS = 1 << 30


class CloseConnection(Exception):
    """A filter asked for the connection to close (its `Close` effect)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ThrottleView(Protocol):
    """The parts of the connection's ThrottleGate the pipeline consults."""

    muted: bool

    def expect_response(self) -> None: ...

    def response_sent(self) -> None: ...


class ResponseSink(Protocol):
    """Where the pipeline's output goes: responses for the client, replies to the proxy's own requests."""

    def send_response(self, frame: Frame, delay_ms: int) -> None: ...

    def deliver_reply(self, reply: Reply, body: bytes) -> None: ...


class BrokerShare(Protocol):
    """The connection's share of its broker's load (proxy/data_path/broker_load.py's LoadShare)."""

    def take(self, size: int) -> bool: ...

    def fits(self, size: int) -> bool: ...

    def give(self, size: int) -> None: ...

    def wait(self, size: int) -> Pending: ...

    def close(self, in_flight: int) -> None: ...


class Counters(Protocol):
    def count_request(self, api_key: int, size: int) -> None: ...

    def count_response(self, api_key: int, size: int) -> None: ...


def _kept(frames: list[memoryview]) -> list[memoryview]:
    """Frames to keep past this read: a view of the connection's read buffer (which every connection
    shares, 256 KiB) is copied, so a request held for a mute or a deferral keeps its own bytes, not the
    buffer (2,000 connections waiting at a quota gate pinned 2,000 buffers, half a gigabyte)."""
    return [frame if stays_valid(frame) else memoryview(bytes(frame)) for frame in frames]


class RequestPipeline:
    __slots__ = (
        "_acks0_sent",
        "_filters",
        "_gate",
        "_held",
        "_in_flight",
        "_metrics",
        "_observers",
        "_own_correlation_id",
        "_raw_exchange",
        "_requests",
        "_responses",
        "_resume",
        "_sink",
        "_stream_load",
        "load",
        "outgoing",
        "state",
    )

    def __init__(
        self,
        filters: ConnectionFilters,
        gate: ThrottleView,
        sink: ResponseSink,
        metrics: Counters,
        requests: FrameSplitter,
        responses: FrameSplitter,
    ) -> None:
        self._filters = filters
        self._gate = gate
        self._sink = sink
        self._metrics = metrics
        self._requests = requests
        self._responses = responses
        self.state = Lifecycle.CONNECTING
        self._in_flight: deque[InFlight] = deque()
        # Requests read but not forwarded yet, in order; a deferred request goes before them.
        self._held: list[memoryview] = []
        self._resume: Deferred | None = None
        # Filters that observe the request passing through now (FrameHead.observe).
        self._observers: list[FrameObserver] | None = None
        # Made at the first acks=0 Produce (most connections never send one: a deque is 760 bytes).
        self._acks0_sent: deque[int] | None = None
        self._own_correlation_id = FIRST_OWN_CORRELATION_ID
        self._raw_exchange: RawExchange | None = None
        # Requests to write upstream, in order; the connection writes them in one go and empties the list.
        self.outgoing: list[Frame] = []
        # Its share of its broker's load, once the upstream is connected (None: not bounded); an acks=0
        # request passing through counts until its end.
        self.load: BrokerShare | None = None
        self._stream_load = 0

    # ---- what the connection reads --------------------------------------------------------------

    @property
    def waiting(self) -> bool:
        """Requests are held (read, not forwarded yet): after a bad frame, the connection waits for them."""
        return bool(self._held) or self._resume is not None

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    # ---- life cycle -----------------------------------------------------------------------------

    def upstream_ready(self) -> Pending | None:
        """The upstream connection exists: forward what was held (as `release`)."""
        if self.state is not Lifecycle.CONNECTING:
            return None
        self.state = Lifecycle.OPEN
        return self.release()

    def drain(self) -> bool:
        """Stop forwarding (shutdown); True when nothing is in flight, so the connection may close now."""
        if self.state is not Lifecycle.CLOSED:
            self.state = Lifecycle.DRAINING
        return not self._in_flight

    @property
    def drained(self) -> bool:
        return self.state is Lifecycle.DRAINING and not self._in_flight

    def close(self) -> list[Pending | Reply]:
        """The connection closed; what nobody will complete now, for the caller to cancel: the replies of
        the proxy's own requests, and a deferred request's wait (so it leaves, say, an entity gate's
        queue at once rather than holding the queue when its turn comes)."""
        self.state = Lifecycle.CLOSED
        replies: list[Pending | Reply] = [r.reply for r in self._in_flight if r.reply is not None]
        if self._resume is not None:
            replies.append(self._resume.ready)
        if self.load is not None:  # what it had in flight toward its broker goes back
            self.load.close(sum(r.load for r in self._in_flight) + self._stream_load)
            self.load, self._stream_load = None, 0
        # What was read and not sent goes back now (a closed connection holds no buffers).
        self._in_flight.clear()
        self._held = []
        self._resume = None
        self._observers = None
        self.outgoing = []
        return replies

    # ---- requests -------------------------------------------------------------------------------

    def client_frames(self, frames: list[memoryview]) -> Pending | None:
        """Forward `frames` in order (into `outgoing`), holding them from the first that must wait.
        Returns a filter's `Defer.ready` when one deferred a request: call `resume()` once it is done."""
        if self._held or self._resume is not None:
            self._held.extend(_kept(frames))
            return None
        return self._forward(frames)

    def release(self) -> Pending | None:
        """The reason to hold requests is gone (connected, unmuted): forward what was held, in order."""
        if self.state is not Lifecycle.OPEN:
            return None  # shutting down: requests never forwarded stay unanswered, and the client retries
        held, self._held = self._held, []
        return self._forward(held)

    def resume(self) -> Pending | None:
        """A deferred request's wait is over: it goes on from the filter that deferred it."""
        if self.state is Lifecycle.DEFERRED:
            self.state = Lifecycle.OPEN
        return self.release()

    def _forward(self, frames: list[memoryview]) -> Pending | None:
        answered = False
        if self._resume is not None:
            if self.state is not Lifecycle.OPEN or self._gate.muted:
                self._held[:0] = _kept(frames)
                return None
            deferred, self._resume = self._resume, None
            resumed = self._filters.on_request(deferred.header, deferred.frame, deferred)
            verdict = self._settle(deferred.header, deferred.original, resumed)
            if isinstance(verdict, Deferred):
                self._held[:0] = _kept(frames)
                return self._defer(verdict)
            answered = verdict is not None
        return self._forward_from(frames, 0, _NOT_RUN, answered)

    def after_plain_forward(
        self, frames: list[memoryview], i: int, other: tuple[RequestHeader, ChainOutcome] | None
    ) -> Pending | None:
        """Where the first plain run over a read's requests stopped (`_forward_plain`'s (i, other)): the rest
        of `_forward` from there. Public for the compiled pass over a client's read
        (proxy/data_path/_connection_passes.c), which runs that first run itself when nothing is held or
        deferred (`client_frames` would have forwarded at once) and hands over here when it stops short."""
        return self._forward_from(frames, i, other, False)

    def _forward_from(
        self,
        frames: list[memoryview],
        i: int,
        other: tuple[RequestHeader, ChainOutcome] | None,
        answered: bool,
    ) -> Pending | None:
        """Forward frames[i:], `other` the plain run's outcome at frames[i] (or _NOT_RUN: the run starts
        there); `answered`: a filter answered a request already."""
        ready: Pending | None = None
        try:
            count = len(frames)
            while i < count:
                if other is _NOT_RUN:
                    # The common requests, forwarded as they are (the hot path; compiled where the install
                    # has it).
                    i, other = _forward_plain(self, frames, i)
                if other is None:  # stopped before frames[i], having run nothing of it
                    if i == count:
                        break
                    # uvloop may deliver data that arrived with the connection before our pause took effect.
                    if self.state is not _OPEN or self._gate.muted:
                        self._held.extend(_kept(frames[i:]))
                        break
                    self._raw_request(frames[i])  # (a raw SASL exchange: what else stops the run)
                    i += 1
                    other = _NOT_RUN
                    continue
                header, out = other
                other = _NOT_RUN
                verdict = self._settle(header, frames[i], out)
                i += 1
                if verdict is not None:
                    if isinstance(verdict, Deferred):
                        self._held.extend(_kept(frames[i:]))
                        ready = self._defer(verdict)
                        break
                    answered = True
        except ProtocolError:
            # A bad request (malformed, or refused by a filter) ends the connection once the requests read
            # before it are answered: the answers filters made for them are ready and leave now, or the
            # connection would wait for them until its grace ran out and close with them unsent.
            if answered:
                self._answers()
            raise
        if answered:
            self._answers()
        return ready

    def _forward_plain_in_python(
        self, frames: list[memoryview], i: int
    ) -> tuple[int, tuple[RequestHeader, ChainOutcome] | None]:
        """From frames[i] on, forward each request the filters pass on as it is, with no throttle, that is too
        small to count toward its broker's load (_settle's common case, without its dispatch), while the
        connection is open, not muted and in no raw SASL exchange. Where it stops: (i, None) before
        frames[i] (or at the end), nothing of it run; (i, (header, out)) when the filters' outcome `out` for
        frames[i] is another case, for the caller to settle.

        The reference of the compiled run (proxy/data_path/_pipeline_runs.c, `forward_plain`), which runs
        in its place where the install has it."""
        gate = self._gate
        filters = self._filters
        count = len(frames)
        while i < count:
            if self.state is not _OPEN or gate.muted or self._raw_exchange is not None:
                break
            frame = frames[i]
            header = parse_request_header(frame)
            out = filters.on_request(header, frame)
            size = len(frame)
            if type(out) is not memoryview or size >= COUNTED_MIN_BYTES:
                return i, (header, out)
            self._expect(header, frame, size, 0, 0, None)
            self.outgoing.append(out)
            i += 1
        return i, None

    def stream_tail(self, requests: FrameSplitter, min_frame_bytes: int, head_bytes: int) -> bool:
        """The incomplete request `requests` ends with, if at least `min_frame_bytes` and `head_bytes` of
        it are in (FrameSplitter.incomplete_head): True when it goes on as it arrives, its bytes so far put
        in `outgoing` now and the rest of them as the splitter's `through` pieces bring them (the
        connection puts those first in `outgoing`); False when it must be read whole first."""
        offered = requests.incomplete_head(min_frame_bytes, head_bytes)
        if offered is None or not self._stream_head(*offered):
            return False
        self.through(requests.pass_through(), ended=False)
        return True

    def through(self, pieces: list[memoryview], ended: bool) -> None:
        """More of the request passing through (`ended`: its last bytes): forwarded, and shown to the
        filters that observe it."""
        self.outgoing.extend(pieces)
        if ended and self._stream_load:
            if self.load is not None:
                self.load.give(self._stream_load)
            self._stream_load = 0
        observers = self._observers
        if observers is not None:
            for observer in observers:
                for piece in pieces:
                    observer.feed(piece)
            if ended:
                self._observers = None
                for observer in observers:
                    observer.end()

    def _stream_head(self, head: memoryview, size: int) -> bool:
        """A large request has begun to arrive: its first bytes `head` (length prefix included) and its
        size. True when it may be forwarded as it arrives.

        It streams only when it could be forwarded now (open, not muted, nothing held or waiting, no raw
        SASL exchange), its header (and a Produce's acks) is in `head`, and no filter reads its body
        (`Filter.head_only_api_keys`, `FilterFactory.reads_body_now`). The filters then see a FrameHead
        and must pass it on as it is (possibly with a throttle): anything else is a filter's bug, raised
        as such."""
        if (
            self.state is not _OPEN
            or self._gate.muted
            or self._held
            or self._resume is not None
            or self._raw_exchange is not None
        ):
            return False
        try:
            header = parse_request_header(head)
            if header.api_key == _PRODUCE:
                produce_acks(head, header)
        except ProtocolError:
            return False  # not all in the head (or malformed): read it whole, and judge it then
        key = header.api_key
        load = self.load
        if not self._filters.may_stream(key) or (load is not None and not load.fits(size)):
            return False  # read whole first (and wait for room at its broker then, past the filters)
        stand_in = FrameHead(head, size)
        out = self._filters.on_request(header, stand_in)
        throttle = 0
        if isinstance(out, Forward) and out.frame is stand_in:
            throttle = out.throttle_ms
        elif out is not stand_in:
            raise TypeError(f"a filter answered {type(out).__name__} for an API it declared head-only")
        self._observers = stand_in.observers
        counted = 0
        if load is not None:
            load.take(size)  # it fits (above), and nothing ran in between
            counted = size
        if not self._expect(header, head, size, throttle, counted, None):
            self._stream_load = counted  # no answer will come: it counts until its last byte
        return True

    def _settle(self, header: RequestHeader, original: Frame, out: ChainOutcome) -> Answer | Deferred | None:
        """Record a request the filters are done with; None when it was forwarded, the Answer when a
        filter answered it, the Deferred when it must wait."""
        throttle = 0
        if type(out) is memoryview:
            frame: Frame = out
        elif isinstance(out, Forward):
            frame, throttle = whole(out.frame), out.throttle_ms
        elif isinstance(out, Answer):
            self._expect(header, original, len(original), out.throttle_ms, 0, out)
            return out
        elif isinstance(out, Deferred):
            return out
        elif isinstance(out, Close):
            self._answers()  # answers made before it are the client's: they leave before the close
            raise CloseConnection(out.reason)
        else:
            frame = whole(out)  # bytes a filter rewrote
        counted = 0
        load = self.load
        if load is not None and len(frame) >= COUNTED_MIN_BYTES:
            counted = len(frame)
            if not load.take(counted):  # no room at its broker: wait, past the filters
                return Deferred(load.wait(counted), header, original, frame, _PAST_THE_FILTERS, throttle)
        answered_later = self._expect(header, original, len(original), throttle, counted, None)
        if not answered_later and counted and load is not None:
            load.give(counted)  # no answer will come: it counted while it was forwarded, whole, now
        self.outgoing.append(frame)
        return None

    def _expect(
        self,
        header: RequestHeader,
        frame: Frame,
        size: int,
        throttle: int,
        counted: int,
        answer: Answer | None,
    ) -> bool:
        """Count a request that goes upstream or was answered (`size`: its frame's, length prefix included)
        and expect its response in turn, with the `throttle` it earned, the `counted` bytes it holds of
        its broker's load, and a filter's `answer`. False for an acks=0 Produce (`frame` holds at least
        its acks), which gets no response."""
        self._metrics.count_request(header.api_key, size - 4)
        if header.api_key == _PRODUCE and produce_acks(frame, header) == 0:
            self._sent_acks0(header.correlation_id)
            return False
        if answer is None:
            entry = _new_in_flight(InFlight, (header, _FORWARDED, throttle, None, 0, None, counted))
        else:
            entry = InFlight(header, _ANSWERED, throttle, answer.response, answer.delay_ms)
        self._in_flight.append(entry)
        if throttle > 0:
            self._gate.expect_response()
        return True

    def _sent_acks0(self, correlation_id: int) -> None:
        """An acks=0 Produce went upstream: no response will come for it."""
        sent = self._acks0_sent
        if sent is None:
            sent = self._acks0_sent = deque(maxlen=ACKS0_REMEMBERED)
        sent.append(correlation_id)

    def _defer(self, deferred: Deferred) -> Pending:
        frame, original = deferred.frame, deferred.original
        if type(frame) is memoryview or type(original) is memoryview:
            kept_frame = _kept([frame])[0] if type(frame) is memoryview else frame
            kept_original = (
                kept_frame
                if original is frame
                else (_kept([original])[0] if type(original) is memoryview else original)
            )
            deferred = deferred._replace(frame=kept_frame, original=kept_original)
        self._resume = deferred
        self.state = Lifecycle.DEFERRED
        return deferred.ready

    def own_request(self, api_key: int, api_version: int, body: bytes, reply: Reply) -> bool:
        """Queue the proxy's own request (after every request already forwarded); its response body goes to
        `sink.deliver_reply(reply, body)`. False when the connection cannot send it (not open)."""
        if self.state is Lifecycle.CLOSED or self.state is Lifecycle.CONNECTING:
            return False
        correlation_id = self._own_correlation_id
        self._own_correlation_id += 1
        header = RequestHeader(api_key, api_version, correlation_id, OWN_CLIENT_ID, 0)
        self._in_flight.append(InFlight(header, _OWN, reply=reply))
        self.outgoing.append(encode_request(api_key, api_version, correlation_id, OWN_CLIENT_ID, body))
        return True

    # ---- SaslHandshake v0's raw tokens ------------------------------------------------------------

    def begin_raw_exchange(self, exchange: RawExchange) -> None:
        self._raw_exchange = exchange
        # A SASL token may be empty (PLAIN's success answer is).
        self._requests.min_payload_bytes = self._responses.min_payload_bytes = 0

    def _raw_request(self, frame: memoryview) -> None:
        assert self._raw_exchange is not None
        self._raw_exchange.client_token(bytes(frame[4:]))
        self._in_flight.append(InFlight(RAW_TOKEN, _RAW))
        self.outgoing.append(frame)

    def _raw_response(self, frame: memoryview) -> None:
        self._in_flight.popleft()
        exchange = self._raw_exchange
        if exchange is not None and exchange.server_token(bytes(frame[4:])):
            self._raw_exchange = None
            self._requests.min_payload_bytes = self._responses.min_payload_bytes = MIN_FRAME_PAYLOAD_BYTES
        self._sink.send_response(frame, 0)

    # ---- responses ------------------------------------------------------------------------------

    def broker_frames(self, frames: list[memoryview], i: int = 0) -> None:
        """Match the broker's responses (`frames[i:]`) to the requests in flight and send them on, in request
        order, with the answers filters made in their turn."""
        count = len(frames)
        while i < count:
            # The common answers, sent on as they come (the hot path; compiled where the install has it).
            i, answers_due = _answers_plain(self, frames, i)
            if answers_due or i < count:
                i = self.after_plain_run(frames, i, answers_due)

    def after_plain_run(self, frames: list[memoryview], i: int, answers_due: bool) -> int:
        """Where a plain run of answers stopped (before `frames[i]`; the answers filters made due or not):
        that answer in full when none are due, then the answers due; where the next run begins. Public for
        the compiled pass over a broker's read (proxy/data_path/_connection_passes.c), which runs the first
        run itself and hands over here, then to `broker_frames` from where this leaves off."""
        if not answers_due:
            self._response(frames[i])
            i += 1
            in_flight = self._in_flight
            answers_due = bool(in_flight) and in_flight[0].kind is _ANSWERED
        if answers_due:
            self._answers()
        return i

    def _answers_plain_in_python(self, frames: list[memoryview], i: int) -> tuple[int, bool]:
        """From frames[i] on, send on each answer to the oldest request in flight, a forwarded one whose
        correlation id it carries. Where it stops, and whether answers filters made are due (the oldest
        request in flight now is one a filter answered): before the first frame of another case (or at the
        end), or after the answer that made answers due, for the caller to send them.

        The reference of the compiled run (proxy/data_path/_pipeline_runs.c, `answers_plain`), which runs
        in its place where the install has it."""
        in_flight = self._in_flight
        count = len(frames)
        while i < count:
            frame = frames[i]
            request = in_flight[0] if in_flight else None
            if (
                request is None
                or request.kind is not _FORWARDED
                or len(frame) < 8
                or INT32_UNPACK(frame, 4)[0] != request.header.correlation_id
            ):
                return i, False
            in_flight.popleft()
            self._respond(request, frame, 0)
            i += 1
            if in_flight and in_flight[0].kind is _ANSWERED:
                return i, True
        return i, False

    def _response(self, frame: memoryview) -> None:
        in_flight = self._in_flight
        if in_flight and in_flight[0].kind is _RAW:
            self._raw_response(frame)
            return
        correlation_id = read_correlation_id(frame)
        if not in_flight or correlation_id != in_flight[0].header.correlation_id:
            if self._acks0_sent is not None and correlation_id in self._acks0_sent:
                # Some brokers (librdkafka's mock among them) answer acks=0 Produce; Kafka clients expect
                # no answer and kafka-python drops the connection on an unknown correlation id.
                return
            if not in_flight:
                raise ProtocolError("unexpected_response", f"no request is waiting for id {correlation_id}")
            raise ProtocolError(
                "correlation_mismatch",
                f"expected correlation id {in_flight[0].header.correlation_id}, got {correlation_id}",
            )
        request = in_flight.popleft()
        if request.reply is not None:  # the proxy's own request
            header = request.header
            body = bytes(frame[4 + response_header_size(header.api_key, header.api_version, frame) :])
            self._sink.deliver_reply(request.reply, body)
            return
        self._respond(request, frame, 0)

    def _answers(self) -> None:
        """Answers a filter made leave as soon as every response before them has."""
        in_flight = self._in_flight
        while in_flight and in_flight[0].kind is _ANSWERED:
            request = in_flight.popleft()
            assert request.answer is not None
            self._respond(request, request.answer, request.answer_delay_ms)

    def _respond(self, request: InFlight, frame: Frame, delay_ms: int) -> None:
        if request.load and self.load is not None:  # answered: it no longer counts toward its broker's load
            self.load.give(request.load)
        out = self._filters.on_response(request, frame)
        if isinstance(out, Respond):
            frame = out.frame
            delay_ms = max(delay_ms, out.delay_ms)
        else:
            frame = out
        self._metrics.count_response(request.header.api_key, len(frame) - 4)
        if request.throttle_ms > 0:
            self._gate.response_sent()  # written in this same pass; the gate also waits for the flush
        self._sink.send_response(frame, delay_ms)


# The hot loops: compiled where the install has them (proxy/data_path/_pipeline_runs.c), else the methods
# above, their references.
_forward_plain = RequestPipeline._forward_plain_in_python
_answers_plain = RequestPipeline._answers_plain_in_python
if not TYPE_CHECKING:  # the type checker reads the Python methods; the compiled ones take the same
    try:
        from sluice.proxy.data_path import _pipeline_runs
    except ImportError:  # built without a C compiler
        pass
    else:
        from .throttle_gate import ThrottleGate  # (the gate whose `muted` slot the runs read at its offset)

        _pipeline_runs.bind(
            parse_request_header,
            produce_acks,
            Lifecycle.OPEN,
            EntryKind.FORWARDED,
            EntryKind.ANSWERED,
            InFlight,
            Respond,
            ApiKey.PRODUCE,
            COUNTED_MIN_BYTES,
            RequestPipeline,
            ThrottleGate,
            RequestHeader,
        )
        _pipeline_runs.bind_metrics(ProxyMetrics, OTHER_SLOT)  # whose counting they write out
        _forward_plain = _pipeline_runs.forward_plain
        _answers_plain = _pipeline_runs.answers_plain
