"""produce_acks and produce_acks_and_timeout read Produce requests built by kafka-python's own codec; the
answer that fails a whole request is read back by it."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import encode_request_header, frame, parse_request_header
from sluice.protocol.produce import (
    REQUEST_TIMED_OUT,
    produce_acks,
    produce_acks_and_timeout,
    produce_error_body,
)
from sluice.protocol.produce_topics import produce_partitions


def _produce_frame(version: int, acks: int, transactional_id: str | None) -> bytes:
    partition = ProduceRequest.TopicProduceData.PartitionProduceData(index=3, records=b"\x01" * 70)
    topic = (
        ProduceRequest.TopicProduceData(topic_id=uuid.uuid4(), partition_data=[partition])
        if version >= 13
        else ProduceRequest.TopicProduceData(name="orders", partition_data=[partition])
    )
    request = ProduceRequest(version=version, acks=acks, timeout_ms=30000, topic_data=[topic])
    if version >= 3:
        request.transactional_id = transactional_id
    body = bytes(request.encode(version=version))
    return frame(encode_request_header(0, version, 1, "producer-1") + body)


@pytest.mark.parametrize("version", range(14))
@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("transactional_id", [None, "tx-ünï-" + "t" * 200])
def test_acks_of_every_produce_version(version: int, acks: int, transactional_id: str | None) -> None:
    framed = _produce_frame(version, acks, transactional_id)
    header = parse_request_header(framed)
    assert produce_acks(framed, header) == acks


@pytest.mark.parametrize("version", [0, 3, 9])
def test_truncated_produce_body_is_a_protocol_error(version: int) -> None:
    framed = _produce_frame(version, 1, "tx")
    header = parse_request_header(framed)
    cut = framed[: 4 + header.size + (1 if version < 3 else 3)]
    with pytest.raises(ProtocolError) as info:
        produce_acks(cut, header)
    assert info.value.reason == "bad_produce_request"


@pytest.mark.parametrize("version", range(14))
@pytest.mark.parametrize("transactional_id", [None, "tx-ünï-" + "t" * 200])
def test_timeout_of_every_produce_version(version: int, transactional_id: str | None) -> None:
    framed = _produce_frame(version, -1, transactional_id)
    assert produce_acks_and_timeout(framed, parse_request_header(framed)) == (-1, 30000)


@pytest.mark.parametrize("version", range(14))
def test_a_request_timed_out_answer_names_every_partition_of_the_request(version: int) -> None:
    """The answer the entity gate gives a Produce whose client's timeout passed: decoded by kafka-python,
    each partition of the request (by topic name, or by topic id from v13) fails with REQUEST_TIMED_OUT."""
    framed = _produce_frame(version, 1, None)
    header = parse_request_header(framed)
    partitions = produce_partitions(framed, header)
    body = produce_error_body(version, partitions, REQUEST_TIMED_OUT, throttle_ms=2500)
    response = ProduceResponse.decode(body, version=version)
    [topic] = response.responses
    if version >= 13:
        assert uuid.UUID(str(topic.topic_id)).bytes == partitions[0][0]
    else:
        assert topic.name == "orders"
    assert [(p.index, p.error_code, p.base_offset) for p in topic.partition_responses] == [(3, 7, -1)]
    if version >= 1:  # throttle_time_ms exists from v1
        assert response.throttle_time_ms == 2500
