"""Python µs per request on the data path with real-client-shaped traffic, in process: no sockets, no event
loop, only the proxy's own work per request (a figure that moves little with what else runs).

The chain is the one `sluice run` builds with section 2b's configuration (quotas configured, usage records
on; `--plain`: neither), run inside the connection's RequestPipeline (its FIFO, correlation checks,
metrics), each read split into frames by a FrameSplitter, on a real ClientSide (its queries, which the
filters ask, the proxy's own; the loop's clock stopped) with stand-ins for its transports,
for a connection to one broker's listener that asked Metadata first (so the topic's id has a name):
one read of 16 pipelined Produce v10 requests (one ~16 KiB record batch each, as librdkafka's 16 KiB
`batch.size` sends them), then one read of their 16 answers; and one Fetch v12 / v16 request and its
~94 KB answer (6 partitions of record batches). Each figure is the best of several repeats, per request
(request + its answer), in the thread's CPU time.

Run: ``.venv/bin/python tests/bench/experiments/per_request_cost.py [--plain] [--profile] [--only CASE]
[--cold KIB]``. With ``--cold``, each pass (the requests' read, the answers' read) is timed alone after
KIB KiB of other memory were written (1024: this machine's L2 per core), as a real proxy's pass runs after
the kernel copied the bytes of a read and of a write: nearer what a real client's exchange costs, not all
of it (docs/benchmarks.md).
Instructions per request, a figure that does not move with what else runs: one case under
``PYTHONHASHSEED=0 valgrind --tool=callgrind`` at ``--number 50`` and ``--number 250``, the difference in
Ir divided by 7 x 200 loops x the case's requests per loop (16 for Produce, 1 for Fetch).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
import timeit
import uuid
from collections.abc import Callable
from pathlib import Path

from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_chain
from bench_protocol import fetch_response_body, record_batch
from bench_real_clients import CLIENT_ID, SLUICE_CONFIG

from sluice.config.load import config_from_mapping
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.frames import FrameSplitter
from sluice.protocol.headers import encode_request, encode_response
from sluice.proxy.cluster.broker_nodes import BROKER_LISTENER_PREFIX
from sluice.proxy.data_path.connection import ClientSide
from sluice.proxy.data_path.request_pipeline import RequestPipeline
from sluice.proxy.process.server import SluiceServer
from sluice.quota import ANONYMOUS

PIPELINED = 16
PARTITIONS = 6
TOPIC_ID = uuid.UUID(int=1)
PASS_CPU_NS = 10_000  # per request, in each pass over a read


class _LoopClock:
    """The event loop as a connection's queries ask it: its clock, a call into C as uvloop's `time` is,
    stopped at one moment (every request read and charged in the same ms; a moving clock would make the
    figures, and the instruction counts under callgrind, depend on how fast the run goes)."""

    time = staticmethod((1000.0).__float__)


def _connection() -> ClientSide:
    """A real ClientSide as the filters see it, its queries (now_ms, read_ms, take_cpu_ns, mute_remaining_ms)
    the proxy's own, compiled where the install has them: unthrottled, on the listener of one broker (where a
    client's produce and fetch traffic goes; a bootstrap connection's broker may be unknown, and the usage
    records look for it again per request), with the CPU time of each pass over a read to charge, as it
    counts it: added after the pass, taken by the first answer charged after it. Made without its
    transports: only what the queries and the filters read is set."""
    conn = ClientSide.__new__(ClientSide)
    conn.peer, conn.upstream_peer, conn.user = "127.0.0.1:1", "127.0.0.1:2", ANONYMOUS
    conn.listener = f"{BROKER_LISTENER_PREFIX}1"
    conn._loop = _LoopClock()  # type: ignore[assignment]
    conn._last_read = 0.0
    conn.cpu_ns = 0
    conn._gate = None
    return conn


class _Gate:
    muted = False
    held_responses = ()  # none held

    def expect_response(self) -> None:
        pass

    def response_sent(self) -> None:
        pass


class _Sink:
    __slots__ = ("sent",)

    def __init__(self) -> None:
        self.sent: list[object] = []

    def send_response(self, frame: object, delay_ms: int) -> None:
        self.sent.append(frame)

    def deliver_reply(self, reply: object, body: bytes) -> None:
        raise AssertionError("no own requests here")


def _produce(correlation_id: int, partition: int) -> bytes:
    partition_data = ProduceRequest.TopicProduceData.PartitionProduceData(
        index=partition, records=record_batch(16, 1000)
    )
    request = ProduceRequest[10](
        transactional_id=None,
        acks=1,
        timeout_ms=30000,
        topic_data=[ProduceRequest.TopicProduceData(name="bench-topic", partition_data=[partition_data])],
    )
    body = bytes(request.encode(version=10))
    return encode_request(ApiKey.PRODUCE, 10, correlation_id, CLIENT_ID, body)


def _produce_answer(correlation_id: int, partition: int) -> bytes:
    partition_cls = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    topic = ProduceResponse.TopicProduceResponse(
        name="bench-topic",
        partition_responses=[
            partition_cls(
                index=partition, error_code=0, base_offset=1000, log_append_time_ms=-1, log_start_offset=0
            )
        ],
    )
    body = bytes(ProduceResponse(version=10, responses=[topic], throttle_time_ms=0).encode(version=10))
    return encode_response(ApiKey.PRODUCE, 10, correlation_id, body)


def _fetch(version: int, correlation_id: int) -> bytes:
    return bench_chain.fetch_request(version, correlation_id, max_bytes=52428800, client_id=CLIENT_ID)


def _fetch_answer(version: int, correlation_id: int) -> bytes:
    records = record_batch(16, 1000)
    body = fetch_response_body(version, records=records, partitions=PARTITIONS, topic_id=TOPIC_ID)
    return encode_response(ApiKey.FETCH, version, correlation_id, body)


def _metadata_exchange() -> tuple[bytes, bytes]:
    """A Metadata v12 request and its answer naming the bench topic's id: what a client asks before it
    fetches by topic id (Fetch v13+), from which the usage records learn the topic's name."""
    request = MetadataRequest[12](topics=None, allow_auto_topic_creation=False)
    answer = MetadataResponse(
        version=12,
        throttle_time_ms=0,
        brokers=[],
        cluster_id="bench",
        controller_id=1,
        topics=[
            MetadataResponse.MetadataResponseTopic(
                error_code=0, name="bench-topic", topic_id=TOPIC_ID, is_internal=False, partitions=[]
            )
        ],
    )
    return (
        encode_request(ApiKey.METADATA, 12, 99, CLIENT_ID, bytes(request.encode(version=12))),
        encode_response(ApiKey.METADATA, 12, 99, bytes(answer.encode(version=12))),
    )


def _pipeline(plain: bool) -> tuple[RequestPipeline, _Sink, ClientSide]:
    extra = {} if plain else SLUICE_CONFIG
    config = config_from_mapping(
        {"listen": "127.0.0.1:9092", "upstream": {"bootstrap": ["127.0.0.1:19092"]}, **extra}
    )
    server = SluiceServer(config)
    conn = _connection()
    filters = server.settings.chain.for_connection(conn, lambda _ms: None)  # type: ignore[arg-type]
    sink = _Sink()
    pipeline = RequestPipeline(
        filters, _Gate(), sink, server.settings.metrics, FrameSplitter(1 << 26), FrameSplitter(1 << 26)
    )
    pipeline.upstream_ready()
    request, answer = _metadata_exchange()
    pipeline.client_frames([memoryview(request)])
    pipeline.outgoing = []
    pipeline.broker_frames([memoryview(answer)])
    assert len(sink.sent) == 1, "the Metadata answer went through"
    sink.sent.clear()
    return pipeline, sink, conn


def _exchange(
    pipeline: RequestPipeline, sink: _Sink, conn: ClientSide, requests: list[bytes], answers: list[bytes]
) -> tuple[Callable[[], None], Callable[[], None]]:
    """One read of pipelined requests and one read of their answers, each split into frames as the
    connection splits what it reads, each pass adding `PASS_CPU_NS` per request to the CPU time charged:
    the two passes, to run in turn."""
    request_bytes = memoryview(b"".join(requests)).toreadonly()
    answer_bytes = b"".join(answers)
    request_frames, answer_frames = FrameSplitter(1 << 26), FrameSplitter(1 << 26)

    pass_cpu_ns = PASS_CPU_NS * len(requests)

    def requests_pass() -> None:
        conn._last_read = conn._loop.time()  # as the connection's read does
        pipeline.client_frames(request_frames.feed(request_bytes))
        conn.cpu_ns += pass_cpu_ns
        pipeline.outgoing = []

    def answers_pass() -> None:
        pipeline.broker_frames(answer_frames.feed(answer_bytes))
        conn.cpu_ns += pass_cpu_ns
        sink.sent.clear()

    requests_pass()
    answers_pass()
    return requests_pass, answers_pass


def _in_turn(passes: tuple[Callable[[], None], ...]) -> Callable[[], None]:
    def one() -> None:
        for one_pass in passes:
            one_pass()

    return one


def _cold_us(passes: tuple[Callable[[], None], ...], evict_bytes: int, number: int) -> float:
    """µs per exchange with each pass timed alone after `evict_bytes` of other memory were written: the
    best of 7 repeats of the mean of `number` (as the warm figure is the best of 7), less the clock
    reads' own cost (measured warm, so slightly under what a read costs after the eviction)."""
    source, sink = bytes(evict_bytes), bytearray(evict_bytes)
    clock = time.thread_time_ns
    reads = min(timeit.repeat(clock, number=1000, repeat=5)) / 1000 * 1e9  # ns per read of the clock
    means = []
    for _ in range(7):
        spent = 0
        for _ in range(number):
            for one_pass in passes:
                sink[:] = source  # as a socket read or write copies its bytes between two passes
                started = clock()
                one_pass()
                spent += clock() - started - reads
        means.append(spent / number)
    return min(means) / 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plain", action="store_true", help="no quota, no usage records")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--number", type=int, default=500)
    parser.add_argument("--only", help="one case by name (under callgrind: one case's instructions)")
    parser.add_argument(
        "--cold",
        type=int,
        default=0,
        metavar="KIB",
        help="before each pass (untimed), write KIB KiB of memory, as the kernel's copies of a read and a"
        " write do between two passes of a real proxy: the same code on caches other work has used",
    )
    args = parser.parse_args()
    if args.cold and args.profile:
        parser.error("--profile profiles the warm loop: not with --cold")
    pipeline, sink, conn = _pipeline(args.plain)
    cases = {
        "produce_v10_16k": (
            [_produce(i, i % PARTITIONS) for i in range(PIPELINED)],
            [_produce_answer(i, i % PARTITIONS) for i in range(PIPELINED)],
            PIPELINED,
        ),
        "fetch_v12_94k": ([_fetch(12, 100)], [_fetch_answer(12, 100)], 1),
        "fetch_v16_94k": ([_fetch(16, 101)], [_fetch_answer(16, 101)], 1),
    }
    for name, (requests, answers, count) in cases.items():
        if args.only not in (None, name):
            continue
        passes = _exchange(pipeline, sink, conn, requests, answers)
        if args.cold:
            cold = _cold_us(passes, args.cold << 10, args.number) / count
            print(f"{name}: {cold:.2f} us per request, caches cold")
            continue
        # The thread's CPU clock, not the wall clock: on a machine shared with other work, time the
        # process spent descheduled is not the code's.
        one = _in_turn(passes)
        repeats = timeit.repeat(one, number=args.number, repeat=7, timer=time.thread_time)
        best = min(repeats) / args.number / count * 1e6
        print(f"{name}: {best:.2f} us per request")
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(args.number):
                one()
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
