"""protocol/produce_topics.py: (topic, record bytes) per partition of Produce requests built by
kafka-python's own codec, at every version that names topics (0-12)."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceRequest

from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import encode_request_header, frame, parse_request_header
from sluice.protocol.produce_topics import produce_partition_sizes, topic_sizes

Topic = ProduceRequest.TopicProduceData
Partition = Topic.PartitionProduceData


def produce_frame(
    version: int, topics: list[tuple[str, list[bytes | None]]], transactional_id: str | None = None
) -> bytes:
    data = [
        Topic(
            name=name, partition_data=[Partition(index=i, records=records) for i, records in enumerate(parts)]
        )
        for name, parts in topics
    ]
    request = ProduceRequest(version=version, acks=-1, timeout_ms=30000, topic_data=data)
    if version >= 3:
        request.transactional_id = transactional_id
    body = bytes(request.encode(version=version))
    return frame(encode_request_header(0, version, 7, "producer-1") + body)


@pytest.mark.parametrize("version", range(13))
def test_sizes_per_partition_of_every_version(version: int) -> None:
    topics = [("orders", [b"a" * 100, b"b" * 300]), ("ünïcode-topic", [b"c" * 200]), ("audit", [None])]
    framed = produce_frame(version, topics, "tx-" + "t" * 150)
    sizes = produce_partition_sizes(framed, parse_request_header(framed))
    assert sizes == [("orders", 100), ("orders", 300), ("ünïcode-topic", 200), ("audit", 0)]
    assert topic_sizes(sizes) == {"orders": 400, "ünïcode-topic": 200, "audit": 0}


@pytest.mark.parametrize("version", [0, 3, 9, 12])
def test_large_record_sets(version: int) -> None:
    framed = produce_frame(version, [("big", [b"x" * 1_000_000])])
    assert produce_partition_sizes(framed, parse_request_header(framed)) == [("big", 1_000_000)]


def test_version_13_names_topics_by_id_and_is_refused() -> None:
    request = ProduceRequest(
        version=13,
        acks=1,
        timeout_ms=1,
        topic_data=[Topic(topic_id=uuid.uuid4(), partition_data=[Partition(index=0, records=b"z")])],
    )
    framed = frame(encode_request_header(0, 13, 1, "p") + bytes(request.encode(version=13)))
    with pytest.raises(ProtocolError) as info:
        produce_partition_sizes(framed, parse_request_header(framed))
    assert info.value.reason == "unsupported_version"


@pytest.mark.parametrize("version", [0, 3, 9])
@pytest.mark.parametrize("cut", [1, 5, 20])
def test_truncated_or_trailing_bytes_are_protocol_errors(version: int, cut: int) -> None:
    framed = produce_frame(version, [("orders", [b"a" * 40])])
    header = parse_request_header(framed)
    with pytest.raises(ProtocolError) as info:
        produce_partition_sizes(framed[:-cut], header)
    assert info.value.reason == "bad_produce_request"
    with pytest.raises(ProtocolError):
        produce_partition_sizes(framed + b"\x00", header)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=60), st.sampled_from([0, 3, 9, 12]))
def test_any_body_parses_or_raises_protocol_error(tail: bytes, version: int) -> None:
    framed = produce_frame(version, [])
    header = parse_request_header(framed)
    with contextlib.suppress(ProtocolError):
        produce_partition_sizes(framed[: 4 + header.size] + tail, header)
