"""RequestPipeline on an injected clock: request order, acks=0, correlation checks, the proxy's own
requests, filters' answers, deferrals, throttles and SaslHandshake v0's raw framing.

Everything here is real except the loop and the client transport (tests/manual_loop.py): the pipeline, the
filter chain, the ThrottleGate and the frame splitters. Frames are built by `protocol/`.
"""

from __future__ import annotations

import struct

import pytest
from filter_factories import Factory
from manual_loop import ManualLoop, RecordingTransport

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.frame_memory import FrameMapping
from sluice.protocol.frames import MIN_FRAME_PAYLOAD_BYTES, FrameSplitter
from sluice.protocol.headers import RequestHeader, encode_request, encode_response, read_correlation_id
from sluice.proxy.data_path.broker_load import COUNTED_MIN_BYTES, BrokerLoad, LoadShare
from sluice.proxy.data_path.filter_chain import FilterChain
from sluice.proxy.data_path.flow import ReadPauses
from sluice.proxy.data_path.request_pipeline import (
    FIRST_OWN_CORRELATION_ID,
    CloseConnection,
    Lifecycle,
    RequestPipeline,
)
from sluice.proxy.data_path.throttle_gate import ThrottleGate
from sluice.proxy.filter_api import (
    Answer,
    Close,
    Defer,
    Filter,
    FilterFactory,
    Forward,
    Frame,
    InFlight,
    Respond,
)

# Each test on both twins of the chain's and the pipeline's hot loops (tests/proxy/conftest.py).
pytestmark = pytest.mark.usefixtures("both_runs")

METADATA, PRODUCE, API_VERSIONS = ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.API_VERSIONS


def request(key: int, correlation_id: int, version: int = 1, body: bytes = b"") -> bytes:
    return encode_request(key, version, correlation_id, "pipeline-test", body)


def produce(correlation_id: int, acks: int) -> bytes:
    # Produce v3: transactional_id (null), acks, timeout, no topics; all the pipeline reads is acks.
    return request(PRODUCE, correlation_id, 3, struct.pack(">hhii", -1, acks, 1000, 0))


def response(key: int, correlation_id: int, body: bytes = b"ok") -> bytes:
    return encode_response(key, 1, correlation_id, body)


class Connection:
    """What the filters see of the connection (only what these tests' filters use)."""

    def __init__(self, loop: ManualLoop) -> None:
        self._loop = loop
        self.peer = "127.0.0.1:1"
        self.user = "ANONYMOUS"

    def now_ms(self) -> int:
        return int(self._loop.time() * 1000)


class Sink:
    def __init__(self) -> None:
        self.responses: list[tuple[bytes, int]] = []
        self.replies: list[tuple[object, bytes]] = []

    def send_response(self, frame: Frame, delay_ms: int) -> None:
        self.responses.append((bytes(frame), delay_ms))

    def deliver_reply(self, reply: object, body: bytes) -> None:
        self.replies.append((reply, body))

    def correlation_ids(self) -> list[int]:
        return [read_correlation_id(frame) for frame, _ in self.responses]


class Counters:
    def __init__(self) -> None:
        self.requests: list[int] = []
        self.responses: list[int] = []

    def count_request(self, api_key: int, size: int) -> None:
        self.requests.append(api_key)

    def count_response(self, api_key: int, size: int) -> None:
        self.responses.append(api_key)


class Harness:
    def __init__(self, *factories: FilterFactory, connect: bool = True) -> None:
        self.loop = ManualLoop()
        self.transport = RecordingTransport()
        self.gate = ThrottleGate(
            self.loop,
            self.transport,
            self.transport.writelines,
            ReadPauses(self.transport),
            self._unmuted,
            lambda _change: None,
        )
        self.conn = Connection(self.loop)
        self.chain = FilterChain(factories)
        self.sink = Sink()
        self.counters = Counters()
        self.requests = FrameSplitter()
        self.responses = FrameSplitter()
        self.pipeline = RequestPipeline(
            self.chain.for_connection(self.conn, self.gate.mute_for),
            self.gate,
            self.sink,
            self.counters,
            self.requests,
            self.responses,
        )
        self.ready: list[object] = []
        if connect:
            self.pipeline.upstream_ready()

    def _unmuted(self) -> None:
        self._note(self.pipeline.release())

    def _note(self, ready: object | None) -> object | None:
        if ready is not None:
            self.ready.append(ready)
        return ready

    def client(self, *frames: bytes) -> object | None:
        return self._note(self.pipeline.client_frames(self.requests.feed(b"".join(frames))))

    def upstream(self) -> list[int]:
        """Correlation ids of what the pipeline forwarded since the last call."""
        sent, self.pipeline.outgoing = self.pipeline.outgoing, []
        return [struct.unpack_from(">i", bytes(frame), 8)[0] for frame in sent]

    def broker(self, *frames: bytes) -> None:
        self.pipeline.broker_frames(self.responses.feed(b"".join(frames)))


# ---- test filters ----------------------------------------------------------------------------------


class Recorder(Filter):
    """Sees every Metadata request and response and writes down that it did."""

    request_api_keys = frozenset({METADATA, PRODUCE})
    response_api_keys = frozenset({METADATA, PRODUCE, API_VERSIONS})
    seen: list[tuple[str, int]]

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame:
        self.seen.append(("request", header.correlation_id))
        return frame

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        self.seen.append((request.kind.value, request.header.correlation_id))
        return frame


class AnswersApiVersions(Filter):
    request_api_keys = frozenset({API_VERSIONS})

    def on_request(self, header: RequestHeader, frame: Frame) -> Answer:
        return Answer(response(API_VERSIONS, header.correlation_id, b"mine"))


class DefersMetadataOnce(Filter):
    request_api_keys = frozenset({METADATA})
    calls: list[int]
    ready: object

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame | Defer:
        self.calls.append(header.correlation_id)
        if len(self.calls) == 1:
            return Defer(self.ready)  # type: ignore[arg-type]
        return frame


class ThrottlesProduce(Filter):
    request_api_keys = frozenset({PRODUCE})

    def on_request(self, header: RequestHeader, frame: Frame) -> Forward:
        return Forward(frame, 200)


class ClosesOnMetadata(Filter):
    request_api_keys = frozenset({METADATA})

    def on_request(self, header: RequestHeader, frame: Frame) -> Close:
        return Close("not today")


class RespondsLater(Filter):
    response_api_keys = frozenset({METADATA})
    delay_ms = 0
    mute_ms = 0

    def on_response(self, request: InFlight, frame: Frame) -> Respond:
        return Respond(frame, self.delay_ms, self.mute_ms)


# ---- order, acks=0, correlation -----------------------------------------------------------------


def test_pipelined_requests_leave_together_and_responses_return_in_order() -> None:
    h = Harness()
    assert h.client(request(METADATA, 1), request(METADATA, 2), request(METADATA, 3)) is None
    assert h.upstream() == [1, 2, 3]
    assert h.pipeline.in_flight == 3
    h.broker(response(METADATA, 1), response(METADATA, 2))
    h.broker(response(METADATA, 3))
    assert h.sink.correlation_ids() == [1, 2, 3]
    assert h.pipeline.in_flight == 0
    assert h.counters.requests == [METADATA] * 3 and h.counters.responses == [METADATA] * 3


def test_acks0_produce_takes_no_place_and_a_brokers_answer_to_it_is_dropped() -> None:
    h = Harness()
    h.client(produce(1, acks=0), produce(2, acks=1))
    assert h.upstream() == [1, 2]
    assert h.pipeline.in_flight == 1
    h.broker(response(PRODUCE, 1), response(PRODUCE, 2))  # librdkafka's mock answers acks=0 anyway
    assert h.sink.correlation_ids() == [2]


def test_a_response_out_of_order_is_a_protocol_error() -> None:
    h = Harness()
    h.client(request(METADATA, 1), request(METADATA, 2))
    with pytest.raises(ProtocolError) as caught:
        h.broker(response(METADATA, 2))
    assert caught.value.reason == "correlation_mismatch"


def test_a_response_nobody_asked_for_is_a_protocol_error() -> None:
    h = Harness()
    with pytest.raises(ProtocolError) as caught:
        h.broker(response(METADATA, 7))
    assert caught.value.reason == "unexpected_response"


# ---- the proxy's own requests ------------------------------------------------------------------


def test_own_requests_follow_forwarded_ones_and_their_answers_never_reach_the_client() -> None:
    h = Harness()
    h.client(request(METADATA, 1))
    reply = object()
    assert h.pipeline.own_request(METADATA, 1, b"", reply)
    assert h.upstream() == [1, FIRST_OWN_CORRELATION_ID]
    h.broker(response(METADATA, 1), encode_response(METADATA, 1, FIRST_OWN_CORRELATION_ID, b"body"))
    assert h.sink.correlation_ids() == [1]
    assert h.sink.replies == [(reply, b"body")]


def test_own_requests_wait_for_a_connection() -> None:
    h = Harness(connect=False)
    assert not h.pipeline.own_request(METADATA, 1, b"", object())
    h.pipeline.close()
    assert not h.pipeline.own_request(METADATA, 1, b"", object())


def test_closing_hands_back_the_replies_nobody_will_answer() -> None:
    h = Harness()
    reply = object()
    h.client(request(METADATA, 1))
    h.pipeline.own_request(METADATA, 1, b"", reply)
    assert h.pipeline.close() == [reply]
    assert h.pipeline.state is Lifecycle.CLOSED


def test_closing_hands_back_a_deferred_requests_wait_to_cancel() -> None:
    """So a request waiting at an entity gate leaves its queue when its connection closes."""
    ready = object()
    h = Harness(Factory(DefersMetadataOnce, calls=[], ready=ready))
    assert h.client(request(METADATA, 1)) is ready
    assert h.pipeline.close() == [ready]


# ---- filters' effects ------------------------------------------------------------------------------


def test_an_answer_leaves_in_its_turn_and_through_the_response_filters() -> None:
    seen: list[tuple[str, int]] = []
    h = Harness(Factory(AnswersApiVersions), Factory(Recorder, seen=seen))
    h.client(request(METADATA, 1), request(API_VERSIONS, 2), request(METADATA, 3))
    assert h.upstream() == [1, 3]  # the answered request is not forwarded
    assert h.sink.responses == []  # the answer waits for the response before it
    h.broker(response(METADATA, 1))
    assert h.sink.correlation_ids() == [1, 2]
    assert h.sink.responses[1][0].endswith(b"mine")
    h.broker(response(METADATA, 3))
    assert h.sink.correlation_ids() == [1, 2, 3]
    assert ("answered", 2) in seen


def test_a_deferred_request_resumes_at_the_filter_that_deferred_and_holds_the_ones_behind() -> None:
    seen: list[tuple[str, int]] = []
    calls: list[int] = []
    ready = object()
    h = Harness(Factory(Recorder, seen=seen), Factory(DefersMetadataOnce, calls=calls, ready=ready))
    assert h.client(request(METADATA, 1), request(METADATA, 2)) is ready
    assert h.pipeline.state is Lifecycle.DEFERRED
    assert h.upstream() == []
    h.client(request(METADATA, 3))  # read while deferred: held behind
    assert h.upstream() == []
    assert h.pipeline.resume() is None
    assert h.upstream() == [1, 2, 3]
    assert calls == [1, 1, 2, 3]  # the deferring filter runs again
    assert seen.count(("request", 1)) == 1  # the filter before it does not


def test_a_deferral_while_connecting_is_reported_when_the_upstream_is_ready() -> None:
    ready = object()
    h = Harness(Factory(DefersMetadataOnce, calls=[], ready=ready), connect=False)
    assert h.client(request(METADATA, 1)) is None
    assert h.pipeline.state is Lifecycle.CONNECTING
    assert h.pipeline.upstream_ready() is ready
    h.pipeline.resume()
    assert h.upstream() == [1]


def test_a_throttle_mutes_at_once_and_holds_requests_until_it_ends_and_its_response_left() -> None:
    h = Harness(Factory(ThrottlesProduce))
    h.client(produce(1, acks=1), request(METADATA, 2), request(METADATA, 3))
    assert h.upstream() == [1]
    assert h.gate.muted
    h.loop.advance(0.5)  # past the 200 ms, but the throttled request has no response yet
    assert h.upstream() == []
    h.broker(response(PRODUCE, 1))
    h.loop.advance(0.0)
    assert not h.gate.muted
    assert h.upstream() == [2, 3]
    assert h.pipeline.in_flight == 2


def test_a_held_request_keeps_its_own_mapping_and_a_view_of_the_read_buffer_is_copied() -> None:
    # A held request must not keep the read buffer every connection reads into (it is copied); one that
    # was assembled in its own mapping is its own already, and copying it would cost a copy per byte.
    h = Harness(Factory(ThrottlesProduce))
    h.requests.own_mapping_bytes = 64  # as from 1 MiB in the proxy
    h.client(produce(1, acks=1))
    assert h.upstream() == [1] and h.gate.muted
    assembled = request(METADATA, 2, body=bytes(range(100)))
    for start, end in ((0, 20), (20, 60), (60, len(assembled))):  # its own mapping from the second read
        h.pipeline.client_frames(h.requests.feed(assembled[start:end]))
    buffer = bytearray(request(METADATA, 3))
    h.pipeline.client_frames(h.requests.feed(memoryview(buffer).toreadonly()))
    buffer[:] = bytes(len(buffer))  # the next read overwrites the buffer
    h.broker(response(PRODUCE, 1))
    h.loop.advance(0.5)
    sent, h.pipeline.outgoing = h.pipeline.outgoing, []
    assert [bytes(frame) for frame in sent] == [assembled, request(METADATA, 3)]
    assert type(sent[0].obj) is FrameMapping  # held as it was
    assert type(sent[1].obj) is bytes  # copied when held


def test_a_close_effect_stops_the_pipeline() -> None:
    h = Harness(Factory(ClosesOnMetadata))
    with pytest.raises(CloseConnection) as caught:
        h.client(request(METADATA, 1))
    assert caught.value.reason == "not today"
    assert h.upstream() == []


def test_answers_made_before_a_close_effect_leave_first() -> None:
    h = Harness(Factory(AnswersApiVersions), Factory(ClosesOnMetadata))
    with pytest.raises(CloseConnection):
        h.client(request(API_VERSIONS, 1), request(METADATA, 2))
    assert h.sink.correlation_ids() == [1]


class RefusesMetadata(Filter):
    """As the gate refuses a request for what was not offered (UnadvertisedRequests)."""

    request_api_keys = frozenset({METADATA})

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame:
        raise ProtocolError("unadvertised_api_version", "Metadata v1")


def malformed(correlation_id: int) -> bytes:
    """A request whose client id claims more bytes than the frame holds: its header cannot be read."""
    frame = bytearray(request(METADATA, correlation_id))
    struct.pack_into(">h", frame, 12, 0x7FFF)  # after size, api key, version and correlation id
    return bytes(frame)


@pytest.mark.parametrize("bad", ["refused", "malformed"])
def test_answers_made_before_a_bad_request_leave_before_it_ends_the_connection(bad: str) -> None:
    """The connection closes after a bad request once everything read before it is answered: an answer a
    filter made in the same read must leave now, not wait for a response that will never come."""
    h = Harness(Factory(AnswersApiVersions), Factory(RefusesMetadata))
    second = request(METADATA, 2) if bad == "refused" else malformed(2)
    with pytest.raises(ProtocolError):
        h.client(request(API_VERSIONS, 1), second)
    assert h.sink.correlation_ids() == [1]
    assert h.pipeline.in_flight == 0 and not h.pipeline.waiting


def test_answers_behind_a_forwarded_request_wait_for_its_response_even_after_a_bad_request() -> None:
    h = Harness(Factory(AnswersApiVersions), Factory(RefusesMetadata))
    with pytest.raises(ProtocolError):
        h.client(produce(1, acks=1), request(API_VERSIONS, 2), request(METADATA, 3))
    assert h.upstream() == [1]
    assert h.sink.responses == []
    h.broker(response(PRODUCE, 1))
    assert h.sink.correlation_ids() == [1, 2]
    assert h.pipeline.in_flight == 0


def test_a_response_effect_delays_or_mutes() -> None:
    delayed = Harness(Factory(RespondsLater, delay_ms=300))
    delayed.client(request(METADATA, 1))
    delayed.broker(response(METADATA, 1))
    assert delayed.sink.responses[0][1] == 300
    muting = Harness(Factory(RespondsLater, mute_ms=300))
    muting.client(request(METADATA, 1))
    muting.broker(response(METADATA, 1))
    assert muting.sink.responses[0][1] == 0 and muting.gate.muted
    muting.loop.advance(0.3)
    assert not muting.gate.muted


# ---- life cycle ----------------------------------------------------------------------------------


def test_requests_wait_for_the_upstream_and_leave_in_order_once_it_is_there() -> None:
    h = Harness(connect=False)
    h.client(request(METADATA, 1))
    h.client(request(METADATA, 2))
    assert h.upstream() == []
    h.pipeline.upstream_ready()
    assert h.pipeline.state is Lifecycle.OPEN
    assert h.upstream() == [1, 2]


def test_draining_forwards_nothing_more_and_is_done_when_nothing_is_in_flight() -> None:
    h = Harness()
    h.client(request(METADATA, 1))
    h.upstream()
    assert not h.pipeline.drain()
    h.client(request(METADATA, 2))
    assert h.upstream() == []
    assert not h.pipeline.drained
    h.broker(response(METADATA, 1))
    assert h.pipeline.drained
    assert h.pipeline.resume() is None and h.upstream() == []  # a late wake-up forwards nothing either


# ---- SaslHandshake v0's raw framing ------------------------------------------------------------------


class RawExchange:
    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.client_tokens: list[bytes] = []

    def client_token(self, token: bytes) -> None:
        self.client_tokens.append(token)

    def server_token(self, token: bytes) -> bool:
        self.rounds -= 1
        return self.rounds == 0


def test_raw_tokens_are_relayed_in_order_until_the_exchange_ends() -> None:
    h = Harness()
    exchange = RawExchange(rounds=1)
    h.pipeline.begin_raw_exchange(exchange)
    assert h.requests.min_payload_bytes == 0
    h.client(b"\x00\x00\x00\x05token")
    assert exchange.client_tokens == [b"token"]
    assert h.pipeline.outgoing == [b"\x00\x00\x00\x05token"] and h.counters.requests == []
    h.pipeline.outgoing = []
    h.broker(b"\x00\x00\x00\x00")  # PLAIN's empty success token
    assert h.sink.responses == [(b"\x00\x00\x00\x00", 0)]
    assert h.requests.min_payload_bytes == h.responses.min_payload_bytes == MIN_FRAME_PAYLOAD_BYTES
    h.client(request(METADATA, 5))  # Kafka framing again
    assert h.upstream() == [5]
    h.broker(response(METADATA, 5))
    assert read_correlation_id(h.sink.responses[-1][0]) == 5


# ---- deferrals, mutes and drains together (each once had no test) -----------------------------------


class DefersTheSecond(Filter):
    """Defers the request with correlation id 2, once."""

    request_api_keys = frozenset({METADATA})
    calls: list[int]
    ready: object

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame | Defer:
        self.calls.append(header.correlation_id)
        if header.correlation_id == 2 and self.calls.count(2) == 1:
            return Defer(self.ready)  # type: ignore[arg-type]
        return frame


def test_a_resume_while_muted_forwards_nothing_until_the_mute_ends() -> None:
    calls: list[int] = []
    ready = object()
    h = Harness(Factory(DefersTheSecond, calls=calls, ready=ready), Factory(RespondsLater, mute_ms=300))
    h.client(request(METADATA, 1))
    assert h.upstream() == [1]
    assert h.client(request(METADATA, 2), request(METADATA, 3)) is ready
    h.broker(response(METADATA, 1))  # its response mutes while request 2 is deferred
    assert h.gate.muted and h.pipeline.state is Lifecycle.DEFERRED
    assert h.pipeline.resume() is None
    assert h.upstream() == []  # the deferral is over, but the mute is not
    assert calls == [1, 2]  # and the deferring filter has not run again yet
    h.loop.advance(0.299)
    assert h.gate.muted and h.upstream() == []
    h.loop.advance(0.001)
    assert not h.gate.muted
    assert h.upstream() == [2, 3]
    assert calls == [1, 2, 2, 3]


def test_a_throttled_acks0_produce_unmutes_at_its_deadline_with_nothing_in_flight() -> None:
    h = Harness(Factory(ThrottlesProduce))
    h.client(produce(1, acks=0), request(METADATA, 2))
    assert h.upstream() == [1]
    assert h.gate.muted and h.pipeline.in_flight == 0  # no response will come to wait for
    h.loop.advance(0.199)
    assert h.gate.muted and h.upstream() == []
    h.loop.advance(0.001)
    assert not h.gate.muted
    assert h.upstream() == [2]


def test_an_answer_with_nothing_in_flight_is_sent_at_once() -> None:
    h = Harness(Factory(AnswersApiVersions))
    h.client(request(API_VERSIONS, 1))
    assert h.upstream() == []
    assert h.sink.correlation_ids() == [1]
    assert h.sink.responses[0][0].endswith(b"mine")
    assert h.pipeline.in_flight == 0


def test_draining_while_deferred_means_the_resume_forwards_nothing() -> None:
    calls: list[int] = []
    ready = object()
    h = Harness(Factory(DefersMetadataOnce, calls=calls, ready=ready))
    assert h.client(request(METADATA, 1), request(METADATA, 2)) is ready
    assert h.pipeline.drain()  # nothing in flight: the connection may close now
    assert h.pipeline.state is Lifecycle.DRAINING
    assert h.pipeline.resume() is None
    assert h.upstream() == []
    assert calls == [1]


# ---- bytes in flight toward the broker (proxy/data_path/broker_load.py) ------------------------------

KIB = 1024


def big_produce(correlation_id: int, size: int, acks: int = 1) -> bytes:
    # Produce v3: transactional_id (null), acks, timeout, no topics; then padding to `size` bytes in all.
    body = struct.pack(">hhii", -1, acks, 1000, 0)
    frame = request(PRODUCE, correlation_id, 3, body)
    return request(PRODUCE, correlation_id, 3, body + b"\0" * (size - len(frame)))


def loaded(load: BrokerLoad, seen: list) -> Harness:
    h = Harness(Factory(Recorder, seen=seen))
    h.pipeline.load = LoadShare(load)
    return h


async def test_a_request_without_room_waits_past_the_filters_and_goes_when_an_answer_gives_room() -> None:
    load = BrokerLoad("broker:9092", limit=100 * KIB)
    seen: list = []
    first, second = loaded(load, seen), loaded(load, seen)
    assert first.client(big_produce(1, 80 * KIB)) is None
    assert first.upstream() == [1] and load.used == 80 * KIB
    ready = second.client(big_produce(2, 80 * KIB), request(3, 3))  # and a Metadata behind it
    assert ready is not None and not ready.done()
    assert second.upstream() == [] and load.waiting == 1
    first.broker(response(PRODUCE, 1))  # answered: its 80 KiB go back, and the room is the second's
    assert ready.done() and load.used == 80 * KIB
    second._note(second.pipeline.resume())
    assert second.upstream() == [2, 3]
    assert seen.count(("request", 2)) == 1  # the filters saw it once
    second.broker(response(PRODUCE, 2), response(3, 3))
    assert load.used == 0


async def test_small_requests_and_acks0_ones_do_not_hold_room() -> None:
    load = BrokerLoad("broker:9092", limit=100 * KIB)
    h = loaded(load, [])
    h.client(request(3, 1), big_produce(2, COUNTED_MIN_BYTES, acks=0))
    assert h.upstream() == [1, 2]
    assert load.used == 0  # the small one is not counted; the acks=0 one counted while forwarded whole


async def test_a_request_larger_than_the_limit_goes_alone() -> None:
    load = BrokerLoad("broker:9092", limit=100 * KIB)
    h = loaded(load, [])
    h.client(big_produce(1, 300 * KIB))
    assert h.upstream() == [1] and load.used == 300 * KIB


async def test_a_closed_connection_gives_back_what_it_had_in_flight_and_leaves_the_queue() -> None:
    load = BrokerLoad("broker:9092", limit=100 * KIB)
    first, second, third = loaded(load, []), loaded(load, []), loaded(load, [])
    first.client(big_produce(1, 80 * KIB))
    waiting = second.client(big_produce(2, 80 * KIB))
    third_ready = third.client(big_produce(3, 80 * KIB))
    assert load.waiting == 2
    for ready in second.pipeline.close():  # the connection cancels what nobody will complete
        ready.cancel()  # type: ignore[attr-defined]
    assert waiting.cancelled()  # type: ignore[union-attr]
    first.pipeline.close()
    assert third_ready.done()  # the second left the queue: the room went to the third
    assert load.used == 80 * KIB and load.waiting == 0
