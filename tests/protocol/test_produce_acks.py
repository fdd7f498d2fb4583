"""produce_acks reads acks from Produce requests built by kafka-python's own codec."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.producer import ProduceRequest

from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import encode_request_header, frame, parse_request_header
from sluice.protocol.produce import produce_acks


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
