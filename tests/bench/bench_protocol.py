"""Benchmarks for protocol/: Metadata broker rewrite, frame splitting + header parsing, feed throughput,
patching throttle_time_ms in Produce and Fetch responses, the NodeEndpoints walk every Produce v10+ and
Fetch v16+ answer takes (the common answer, with none, and one naming two new leaders), the Produce walk
over a whole body and over a request streamed in pieces (protocol/produce_stream.py); and, from
tests/bench/bench_chain.py, what the server's whole filter chain costs a small request and its answer.

Run: `.venv/bin/python tests/bench/bench_protocol.py` prints one JSON object per line.
`run()` returns the same records as dicts: {"name", "value", "unit", "target"} (target None = no
budget, just a number to watch). Timings are the best of several repeats, to report the code's cost
rather than the machine's noise.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from sluice.protocol.broker_addresses import rewrite_broker_addresses, rewrite_metadata_with_codec
from sluice.protocol.frames import FrameSplitter
from sluice.protocol.headers import encode_request_header, frame, parse_request_header
from sluice.protocol.node_endpoints import rewrite_node_endpoints
from sluice.protocol.produce_stream import ProduceTopicStream, walk_produce_body
from sluice.protocol.throttle_field import patch_throttle_ms

METADATA_TARGET_MS = 1.0
SMALL_REQUEST_TARGET_NS = 2000.0
FEED_TARGET_MIB_S = 1000.0


def _best_seconds(fn: Callable[[], object], repeats: int, number: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / number)
    return best / 1e9


def large_metadata_body(version: int, topics: int = 1000, partitions: int = 10, brokers: int = 6) -> bytes:
    broker_cls = MetadataResponse.MetadataResponseBroker
    topic_cls = MetadataResponse.MetadataResponseTopic
    partition_cls = topic_cls.MetadataResponsePartition
    message = MetadataResponse(
        version=version,
        throttle_time_ms=0,
        brokers=[
            broker_cls(node_id=b, host=f"kafka-{b}.cluster.internal", port=9092, rack=f"rack-{b % 3}")
            for b in range(brokers)
        ],
        cluster_id="bench-cluster",
        controller_id=0,
        topics=[
            topic_cls(
                error_code=0,
                name=f"bench-topic-{t:04d}",
                topic_id=uuid.UUID(int=t + 1),
                is_internal=False,
                partitions=[
                    partition_cls(
                        error_code=0,
                        partition_index=p,
                        leader_id=(t + p) % brokers,
                        leader_epoch=3,
                        replica_nodes=[(t + p + r) % brokers for r in range(3)],
                        isr_nodes=[(t + p + r) % brokers for r in range(3)],
                        offline_replicas=[],
                    )
                    for p in range(partitions)
                ],
                authorized_operations=None,
            )
            for t in range(topics)
        ],
        authorized_operations=None,
        error_code=0,
    )
    return bytes(message.encode(version=version))


def _advertise(node_id: int, _host: str, _port: int) -> tuple[str, int]:
    return "sluice-proxy.example.com", 19092 + node_id


def bench_metadata(version: int) -> list[dict[str, Any]]:
    body = large_metadata_body(version)
    fast = _best_seconds(
        lambda: rewrite_broker_addresses(3, version, body, _advertise), repeats=5, number=200
    )
    codec = _best_seconds(lambda: rewrite_metadata_with_codec(version, body, _advertise), repeats=3, number=3)
    label = f"metadata_rewrite_v{version}_1000x10"
    return [
        {
            "name": f"{label}_fast_path",
            "value": round(fast * 1e3, 4),
            "unit": "ms",
            "target": METADATA_TARGET_MS,
        },
        {"name": f"{label}_codec", "value": round(codec * 1e3, 3), "unit": "ms", "target": None},
        {"name": f"{label}_body_size", "value": len(body), "unit": "bytes", "target": None},
    ]


def bench_small_requests(count: int = 1000) -> dict[str, Any]:
    # A realistic small request: a Fetch v12 header (flexible) plus a ~60-byte body.
    request = frame(encode_request_header(1, 12, 7, "consumer-bench-1") + b"\x00" * 60)
    chunk = request * count

    def split_and_parse() -> None:
        for view in FrameSplitter().feed(chunk):
            parse_request_header(view)

    per_chunk = _best_seconds(split_and_parse, repeats=7, number=20)
    return {
        "name": "split_and_parse_small_request",
        "value": round(per_chunk / count * 1e9, 1),
        "unit": "ns/request",
        "target": SMALL_REQUEST_TARGET_NS,
    }


def bench_feed_throughput(frames: int = 16) -> dict[str, Any]:
    one_mib_frame = frame(b"\xab" * (1024 * 1024 - 4))
    stream = one_mib_frame * frames
    chunk_size = 64 * 1024
    chunks = [stream[i : i + chunk_size] for i in range(0, len(stream), chunk_size)]

    def feed_all() -> None:
        splitter = FrameSplitter()
        for c in chunks:
            splitter.feed(c)

    seconds = _best_seconds(feed_all, repeats=7, number=3)
    return {
        "name": "feed_1mib_frames_in_64kib_chunks",
        "value": round(len(stream) / seconds / (1024 * 1024), 1),
        "unit": "MiB/s",
        "target": FEED_TARGET_MIB_S,
    }


def produce_response_body(version: int, partitions: int = 10) -> bytes:
    partition_cls = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    topic = ProduceResponse.TopicProduceResponse(
        name="bench-topic",
        partition_responses=[
            partition_cls(
                index=p, error_code=0, base_offset=1_000_000 + p, log_append_time_ms=-1, log_start_offset=0
            )
            for p in range(partitions)
        ],
    )
    message = ProduceResponse(version=version, responses=[topic], throttle_time_ms=0)
    return bytes(message.encode(version=version))


def record_batch(count: int, size: int) -> bytes:
    """One uncompressed v2 record batch of `count` unkeyed records of `size` bytes each, as a client's
    producer batches them (offsets 0 to count - 1)."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=count * (size + 100))
    for i in range(count):
        builder.append(i, None, b"v" * size, [])
    builder.close()
    return bytes(builder.buffer())


def fetch_response_body(
    version: int,
    record_bytes: int = 16384,
    *,
    records: bytes | None = None,
    partitions: int = 1,
    topic_id: uuid.UUID | None = None,
    topic: str = "bench-topic",
) -> bytes:
    """A Fetch answer's body: one topic, `topic` (and `topic_id`, for the versions naming topics by id),
    with `partitions` partitions of `records` each (default `record_bytes` zero bytes)."""
    topic_cls = FetchResponse.FetchableTopicResponse
    data = [
        topic_cls.PartitionData(
            partition_index=p,
            error_code=0,
            high_watermark=1000,
            last_stable_offset=1000,
            log_start_offset=0,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=b"\x00" * record_bytes if records is None else records,
        )
        for p in range(partitions)
    ]
    identity = {"topic_id": topic_id} if topic_id is not None else {}
    message = FetchResponse(
        version=version,
        throttle_time_ms=0,
        error_code=0,
        session_id=7,
        responses=[topic_cls(topic=topic, partitions=data, **identity)],
    )
    return bytes(message.encode(version=version))


def bench_throttle_patch(name: str, api_key: int, version: int, body: bytes) -> dict[str, Any]:
    writable = bytearray(body)
    assert patch_throttle_ms(api_key, version, writable, 1234)
    per_call = _best_seconds(
        lambda: patch_throttle_ms(api_key, version, writable, 1234), repeats=7, number=20000
    )
    return {"name": name, "value": round(per_call * 1e9, 1), "unit": "ns/call", "target": None}


def _fetch_partitions_body(version: int, partitions: int, endpoints: bool) -> bytes:
    """A Fetch answer of `partitions` partitions of one 1 kB record set each; with `endpoints`, the last
    partition moved and the answer names two leaders' addresses."""
    topic_cls = FetchResponse.FetchableTopicResponse
    parts = [
        topic_cls.PartitionData(partition_index=p, error_code=0, high_watermark=1000, records=b"\x00" * 1024)
        for p in range(partitions)
    ]
    nodes = [
        FetchResponse.NodeEndpoint(node_id=n, host=f"kafka-{n}.internal", port=9092, rack=None)
        for n in (2, 3)
    ]
    message = FetchResponse(
        version=version,
        throttle_time_ms=0,
        error_code=0,
        session_id=7,
        responses=[topic_cls(topic="bench-topic", topic_id=uuid.UUID(int=1), partitions=parts)],
        node_endpoints=nodes if endpoints else [],
    )
    return bytes(message.encode(version=version))


def _microseconds(name: str, seconds: float) -> dict[str, Any]:
    return {"name": name, "value": round(seconds * 1e6, 2), "unit": "us", "target": None}


def bench_node_endpoints() -> list[dict[str, Any]]:
    """What finding (and, when present, rewriting) NodeEndpoints costs per answer."""
    cases = [("produce_v10_1_partition", 0, 10, produce_response_body(10, partitions=1))]
    cases.append(("produce_v10_10_partitions", 0, 10, produce_response_body(10)))
    for partitions in (1, 10, 100):
        cases.append(
            (f"fetch_v16_{partitions}_partitions", 1, 16, _fetch_partitions_body(16, partitions, False))
        )
    cases.append(("fetch_v16_100_partitions_with_endpoints", 1, 16, _fetch_partitions_body(16, 100, True)))
    records = []
    for label, api_key, version, body in cases:
        view = memoryview(body)
        per_call = _best_seconds(
            lambda k=api_key, v=version, b=view: rewrite_node_endpoints(k, v, b, _advertise),
            repeats=7,
            number=2000,
        )
        records.append(_microseconds(f"node_endpoints_{label}", per_call))
    return records


def produce_request_frame(version: int, topics: int, partitions: int, record_bytes: int) -> bytes:
    """A framed Produce request: `topics` x `partitions` record sets of `record_bytes` each."""
    topic_cls = ProduceRequest.TopicProduceData
    data = [
        topic_cls(
            name=f"topic-{t:02d}",
            partition_data=[
                topic_cls.PartitionProduceData(index=p, records=b"r" * record_bytes)
                for p in range(partitions)
            ],
        )
        for t in range(topics)
    ]
    request = ProduceRequest(version=version, acks=-1, timeout_ms=30000, topic_data=data)
    if version >= 3:
        request.transactional_id = None
    return frame(encode_request_header(0, version, 7, "bench") + bytes(request.encode(version=version)))


def _streamed(version: int, header_size: int, pieces: list[memoryview]) -> Callable[[], object]:
    size = sum(len(piece) for piece in pieces)

    def run() -> object:
        stream = ProduceTopicStream(version, header_size, size)
        for piece in pieces:
            stream.feed(piece)
        return stream.result()

    return run


def bench_produce_walk() -> list[dict[str, Any]]:
    """The one Produce walk: over a whole body (what the filters of a request share), for the classic
    versions most clients speak and the flexible ones, and fed a large request in 16 KiB pieces."""
    records = []
    for version in (3, 8, 9):
        for topics, partitions, record_bytes in ((1, 1, 200), (10, 10, 1024)):
            framed = produce_request_frame(version, topics, partitions, record_bytes)
            body = memoryview(framed)[4 + parse_request_header(framed).size :]
            per_call = _best_seconds(
                lambda v=version, b=body: walk_produce_body(v, b),
                repeats=7,
                number=20000 if topics == 1 else 1000,
            )
            records.append(
                _microseconds(f"produce_walk_v{version}_{topics}x{partitions}_partitions", per_call)
            )
    for version in (8, 9):
        framed = produce_request_frame(version, 10, 10, 16384)
        header = parse_request_header(framed)
        pieces = [memoryview(framed)[at : at + 16384] for at in range(0, len(framed), 16384)]

        run = _streamed(version, header.size, pieces)
        assert run() is not None
        per_call = _best_seconds(run, repeats=7, number=500)
        records.append(
            _microseconds(f"produce_walk_streamed_v{version}_10x10_partitions_16k_pieces", per_call)
        )
    return records


def run() -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for version in (12, 1):
        results.extend(bench_metadata(version))
    results.append(bench_small_requests())
    results.append(bench_feed_throughput())
    results.append(
        bench_throttle_patch("patch_throttle_produce_v9_10_partitions", 0, 9, produce_response_body(9))
    )
    results.append(
        bench_throttle_patch("patch_throttle_produce_v7_10_partitions", 0, 7, produce_response_body(7))
    )
    results.append(bench_throttle_patch("patch_throttle_fetch_v12", 1, 12, fetch_response_body(12)))
    results.extend(bench_node_endpoints())
    results.extend(bench_produce_walk())
    from bench_chain import run as chain_rows  # imports this module: loaded once this one is

    results.extend(chain_rows())
    return results


if __name__ == "__main__":
    for record in run():
        print(json.dumps(record))
