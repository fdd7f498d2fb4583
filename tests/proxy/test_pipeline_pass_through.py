"""Large requests that no filter reads the body of pass through as they arrive (RequestPipeline.stream_tail
over FrameSplitter.pass_through), on an injected clock: the bytes forwarded are the bytes the client
sent, in order, wherever its stream is cut; filters see a FrameHead with the request's real size; a
throttle earned on the way in mutes the connection only once the request has ended.

Everything is real except the loop and the client transport (tests/manual_loop.py): splitter, pipeline,
filter chain, ThrottleGate and ReadPauses. `Driver.read` does what ClientSide.buffer_updated does.
"""

from __future__ import annotations

import itertools
import struct

import pytest
from filter_factories import Factory
from kafka.protocol.producer import ProduceRequest
from manual_loop import ManualLoop, RecordingTransport

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.frames import FrameHead, FrameSplitter
from sluice.protocol.headers import RequestHeader, encode_request, encode_response, read_correlation_id
from sluice.proxy.data_path.filter_chain import FilterChain
from sluice.proxy.data_path.flow import ReadPauses
from sluice.proxy.data_path.request_pipeline import RequestPipeline
from sluice.proxy.data_path.throttle_gate import ThrottleGate
from sluice.proxy.filter_api import Answer, Filter, FilterFactory, Forward, Frame
from sluice.proxy.filters.usage_recorder import UsageRecorderFactory, UsageRecording
from sluice.quota.usage_ledger import UsageLedger

# Each test on both twins of the chain's and the pipeline's hot loops (tests/proxy/conftest.py).
pytestmark = pytest.mark.usefixtures("both_runs")

PRODUCE, METADATA = ApiKey.PRODUCE, ApiKey.METADATA
MIN_FRAME, HEAD = 100, 40  # the connection's thresholds, scaled down so every cut can be tried
AT_ONCE = frozenset({"upstream_backlog"})


def produce(correlation_id: int, acks: int, payload: int) -> bytes:
    # Produce v3: transactional_id (null), acks, timeout, then bytes standing for the topic data.
    body = struct.pack(">hhi", -1, acks, 1000) + bytes(range(256)) * (payload // 256) + b"p" * (payload % 256)
    return encode_request(PRODUCE, 3, correlation_id, "pass-test", body)


def metadata(correlation_id: int) -> bytes:
    return encode_request(METADATA, 1, correlation_id, "pass-test", struct.pack(">i", 0))


class Seen(Filter):
    """Head-only for Produce: notes what it was given; optionally throttles a chosen request."""

    request_api_keys = frozenset({PRODUCE, METADATA})
    head_only_api_keys = frozenset({PRODUCE})
    seen: list[tuple[int, int, str]]
    throttle_id: int | None = None

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame | Forward:
        self.seen.append((header.correlation_id, len(frame), type(frame).__name__))
        if header.correlation_id == self.throttle_id:
            return Forward(frame, 500)
        return frame


class Observes(Filter):
    """Head-only for Produce, observing each streamed one: the bytes it was shown, and whether it ended."""

    request_api_keys = frozenset({PRODUCE})
    head_only_api_keys = frozenset({PRODUCE})
    observed: list[list]

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame:
        if type(frame) is FrameHead:
            record: list = [header.correlation_id, bytearray(), False]
            self.observed.append(record)

            class Watch:
                def feed(self, piece: memoryview) -> None:
                    assert not record[2]
                    record[1] += piece

                def end(self) -> None:
                    record[2] = True

            frame.observe(Watch())
        return frame


class ReadsBodies(Filter):
    request_api_keys = frozenset({PRODUCE})

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame:
        assert isinstance(frame, memoryview | bytes)  # the whole request, always
        return frame


class AnswersHeads(Filter):
    """A filter bug: declares Produce head-only, then answers one."""

    request_api_keys = frozenset({PRODUCE})
    head_only_api_keys = frozenset({PRODUCE})

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame | Answer:
        return Answer(b"\x00\x00\x00\x04" + struct.pack(">i", header.correlation_id))


class Connection:
    def __init__(self, loop: ManualLoop) -> None:
        self._loop = loop
        self.user = "ANONYMOUS"

    def now_ms(self) -> int:
        return int(self._loop.time() * 1000)


class Counters:
    def __init__(self) -> None:
        self.requests: list[tuple[int, int]] = []

    def count_request(self, api_key: int, size: int) -> None:
        self.requests.append((api_key, size))

    def count_response(self, api_key: int, size: int) -> None:
        pass


class Sink:
    def send_response(self, frame: Frame, delay_ms: int) -> None:
        pass

    def deliver_reply(self, reply: object, body: bytes) -> None:
        pass


class Driver:
    """The client side of one connection, as ClientSide drives it, writing upstream into `upstream`."""

    def __init__(self, *factories: FilterFactory) -> None:
        self.loop = ManualLoop()
        self.transport = RecordingTransport()
        self.pauses = ReadPauses(self.transport)  # type: ignore[arg-type]
        self.gate = ThrottleGate(
            self.loop,
            self.transport,
            self.transport.writelines,
            self.pauses,
            self._unmuted,
            lambda _change: None,
        )
        self.requests = FrameSplitter()
        self.counters = Counters()
        self.pipeline = RequestPipeline(
            FilterChain(factories).for_connection(Connection(self.loop), self.gate.mute_for),  # type: ignore[arg-type]
            self.gate,
            Sink(),
            self.counters,
            self.requests,
            FrameSplitter(),
        )
        self.pipeline.upstream_ready()
        self.upstream: list[bytes] = []
        self.reading_when_mid_request: list[bool] = []

    def _unmuted(self) -> None:
        self.pipeline.release()
        self._flush()

    def _flush(self) -> None:
        self.upstream += [bytes(piece) for piece in self.pipeline.outgoing]
        self.pipeline.outgoing = []

    def read(self, data: bytes) -> None:
        requests, pipeline = self.requests, self.pipeline
        frames = requests.feed(data)
        if requests.through:
            ended = not requests.passing_through
            pipeline.through(requests.through, ended)
            if ended:
                self.pauses.frame_ended()
        pipeline.client_frames(frames)
        if requests.incomplete_head(MIN_FRAME, HEAD) is not None:
            self.pauses.hold_open(AT_ONCE)
            streamed = False
            try:
                streamed = pipeline.stream_tail(requests, MIN_FRAME, HEAD)
            finally:
                if not streamed:
                    self.pauses.frame_ended()
        self._flush()
        if requests.passing_through:
            self.reading_when_mid_request.append(self.transport.reading)

    def in_flight_ids(self) -> list[int]:
        return [entry.header.correlation_id for entry in self.pipeline._in_flight]


def _stream() -> tuple[bytes, list[bytes]]:
    frames = [produce(1, 1, 10), produce(2, 1, 130), metadata(3), produce(4, 0, 90), produce(5, -1, 5)]
    return b"".join(frames), frames


def _read_in_chunks(driver: Driver, data: bytes, cuts: tuple[int, ...]) -> None:
    start = 0
    for cut in [*cuts, len(data)]:
        driver.read(data[start:cut])
        start = cut


def _cuts(length: int) -> itertools.chain[tuple[int, ...]]:
    """Every single cut, and every pair of cuts up to 48 bytes apart (a piece of every small size,
    anywhere: inside a length prefix, a header, a head, a body, across two requests)."""
    singles = ((i,) for i in range(length + 1))
    pairs = ((i, j) for i in range(length + 1) for j in range(i + 1, min(i + 49, length + 1)))
    return itertools.chain(singles, pairs)


def test_every_cut_and_pair_of_close_cuts_forwards_exactly_the_bytes_sent() -> None:
    data, frames = _stream()
    sizes = {read_correlation_id(f[:4] + f[8:12]): len(f) for f in frames}
    streamed_somewhere = set()
    for cuts in _cuts(len(data)):
        seen: list[tuple[int, int, str]] = []
        driver = Driver(Factory(Seen, seen=seen))
        _read_in_chunks(driver, data, cuts)
        assert b"".join(driver.upstream) == data, cuts
        assert driver.in_flight_ids() == [1, 2, 3, 5], cuts  # acks=0 takes no place in the FIFO
        assert [(cid, size) for cid, size, _ in seen] == [(cid, sizes[cid]) for cid in (1, 2, 3, 4, 5)], cuts
        assert driver.counters.requests == [(f[5], len(f) - 4) for f in frames], cuts
        streamed_somewhere |= {cid for cid, _, kind in seen if kind == FrameHead.__name__}
        assert not driver.requests.passing_through
    # The two large requests did stream for some cuts (and small ones never).
    assert streamed_somewhere == {2, 4}


def test_byte_by_byte_both_large_requests_stream_and_reading_never_paused_mid_request() -> None:
    data, _ = _stream()
    seen: list[tuple[int, int, str]] = []
    driver = Driver(Factory(Seen, seen=seen))
    _read_in_chunks(driver, data, tuple(range(1, len(data))))
    assert b"".join(driver.upstream) == data
    assert [kind for _, _, kind in seen] == [
        "memoryview",
        "FrameHead",
        "memoryview",
        "FrameHead",
        "memoryview",
    ]
    assert all(driver.reading_when_mid_request)


def test_a_throttle_earned_by_a_streaming_request_mutes_once_it_has_ended() -> None:
    data, frames = _stream()
    big = frames[1]
    seen: list[tuple[int, int, str]] = []
    driver = Driver(Factory(Seen, seen=seen, throttle_id=2))
    first_cut = sum(len(f) for f in frames[:1]) + HEAD + 10  # inside the large request, past its head
    driver.read(data[:first_cut])
    assert seen[-1][2] == "FrameHead" and driver.gate.muted
    assert driver.transport.reading  # muted, but the rest of the request is still read
    end_of_big = len(frames[0]) + len(big)
    driver.read(data[first_cut : end_of_big + 7])  # the rest of it, and the start of what follows
    assert not driver.transport.reading  # now the mute pauses reading
    assert b"".join(driver.upstream) == data[:end_of_big]  # nothing behind it went while muted
    driver.read(data[end_of_big + 7 :])  # what had already arrived is held, not forwarded
    assert b"".join(driver.upstream) == data[:end_of_big]
    answers = FrameSplitter().feed(b"".join(encode_response(PRODUCE, 3, cid, b"ok") for cid in (1, 2)))
    driver.pipeline.broker_frames(answers)  # the throttled request's answer has left
    assert driver.gate.muted  # ... but the throttle has not passed yet
    driver.loop.advance(1.0)
    assert b"".join(driver.upstream) == data
    assert driver.transport.reading and not driver.gate.muted


def test_a_filter_that_reads_the_body_gets_the_whole_request() -> None:
    data, _ = _stream()
    driver = Driver(Factory(ReadsBodies))
    _read_in_chunks(driver, data, tuple(range(7, len(data), 13)))
    assert b"".join(driver.upstream) == data
    assert driver.requests.through == []


class ReadsBodiesWhileOn(Filter):
    """Like TopicQuotaFilter: reads a Produce body only while its factory is switched on."""

    request_api_keys = frozenset({PRODUCE})
    factory: ReadsBodiesWhileSwitchedOn

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame:
        self.factory.kinds.add(type(frame).__name__)
        return frame


class ReadsBodiesWhileSwitchedOn(FilterFactory):
    """Like TopicQuotasFactory: its filters read Produce bodies only while something is configured."""

    filter_class = ReadsBodiesWhileOn

    def __init__(self) -> None:
        self.on = False
        self.kinds: set[str] = set()

    def create(self, conn):  # type: ignore[no-untyped-def]
        made = ReadsBodiesWhileOn(conn)
        made.factory = self
        return made

    def reads_body_now(self, api_key: int) -> bool:
        return self.on


@pytest.mark.parametrize("on", [False, True])
def test_a_filter_that_reads_bodies_only_while_configured_lets_them_stream_otherwise(on: bool) -> None:
    data, _ = _stream()
    factory = ReadsBodiesWhileSwitchedOn()
    factory.on = on
    driver = Driver(factory)
    _read_in_chunks(driver, data, tuple(range(7, len(data), 13)))
    assert b"".join(driver.upstream) == data
    # While it reads bodies it gets whole requests; otherwise the large ones pass through as they arrive.
    assert (FrameHead.__name__ in factory.kinds) is not on


def test_a_head_only_filter_that_answers_is_a_bug_not_a_silent_drop() -> None:
    big = produce(9, 1, 300)
    driver = Driver(Factory(AnswersHeads))
    with pytest.raises(TypeError):
        driver.read(big[:150])


def test_an_observer_sees_every_byte_of_each_streamed_request_and_its_end_wherever_it_is_cut() -> None:
    data, frames = _stream()
    by_id = {read_correlation_id(f[:4] + f[8:12]): f for f in frames}
    for cuts in _cuts(len(data)):
        observed: list[list] = []
        driver = Driver(Factory(Observes, observed=observed))
        _read_in_chunks(driver, data, cuts)
        assert b"".join(driver.upstream) == data, cuts
        for correlation_id, seen, ended in observed:
            assert bytes(seen) == by_id[correlation_id] and ended, cuts


def test_usage_records_count_a_streamed_produce_per_topic_as_a_whole_one() -> None:
    """The usage recorder observes a Produce passing through: its topic bytes are those of the one-buffer
    walk, wherever the stream is cut, and the request streamed (usage records keep pass-through on)."""
    records = [b"r" * 70, b"s" * 90]
    topics = [
        ProduceRequest.TopicProduceData(
            name=name,
            partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=r)],
        )
        for name, r in zip(("orders", "audit"), records, strict=True)
    ]
    body = bytes(ProduceRequest(acks=1, timeout_ms=30000, topic_data=topics).encode(version=9))
    framed = encode_request(PRODUCE, 9, 1, "usage", body)
    for cut in range(len(framed) + 1):
        ledger = UsageLedger("test")
        seen: list[tuple[int, int, str]] = []
        driver = Driver(Factory(Seen, seen=seen), UsageRecorderFactory(UsageRecording(ledger)))
        _read_in_chunks(driver, framed, (cut,))
        assert b"".join(driver.upstream) == framed
        usage = ledger.entity("ANONYMOUS", "usage")
        assert usage.produce_bytes == len(framed) - 4
        # Keyed by (topic, broker): this connection's broker is not known (no node behind the driver).
        assert usage.topics == {("orders", None): [70, 0], ("audit", None): [90, 0]}, cut
        if 2 * HEAD <= cut < len(framed):  # the first read ends mid-request, its head in
            assert seen[0][2] == "FrameHead", cut  # so it passed through
