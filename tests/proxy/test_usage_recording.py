"""UsageRecording, the UsageRecorder filter's work: request counts, bytes, and topic names for topic ids."""

from __future__ import annotations

import uuid

from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceRequest

from sluice.protocol.codec_quirks import encode_body
from sluice.protocol.headers import encode_request_header, frame, parse_request_header
from sluice.proxy.filters.usage_recorder import UsageRecording
from sluice.quota.usage_ledger import UsageLedger

ORDERS = uuid.uuid4()
NAMES = {ORDERS.bytes: "orders"}


def _produce(version: int, topic_id: uuid.UUID | None = None) -> bytes:
    partition = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=b"\x01" * 70)
    identity = {"topic_id": topic_id} if version >= 13 else {"name": "orders"}
    request = ProduceRequest(
        version=version,
        acks=1,
        timeout_ms=1000,
        topic_data=[ProduceRequest.TopicProduceData(**identity, partition_data=[partition])],
    )
    return frame(encode_request_header(0, version, 7, "pump") + bytes(request.encode(version=version)))


def test_produce_bytes_requests_and_topics() -> None:
    ledger = UsageLedger("a")
    recording = UsageRecording(ledger, NAMES.get)
    for version, topic_id in ((7, None), (13, ORDERS), (13, uuid.UUID(int=9))):
        data = _produce(version, topic_id)
        recording.request("alice", parse_request_header(data), memoryview(data))
    metadata = frame(encode_request_header(3, 1, 8, "pump") + b"\x00\x00\x00\x00")
    recording.request("alice", parse_request_header(metadata), metadata)
    rows = ledger.drain(0, 1000, api_name={0: "Produce", 3: "Metadata"}.__getitem__).rows
    entity, *topics = rows
    assert dict(entity.requests) == {"Produce": 3, "Metadata": 1}
    sizes = [len(_produce(v, t)) - 4 for v, t in ((7, None), (13, ORDERS), (13, uuid.UUID(int=9)))]
    assert entity.produce_bytes == sum(sizes)
    # A topic id the proxy knows gets its name; one it does not is reported as the id itself.
    assert [(row.topic, row.produce_bytes) for row in topics] == [
        ("orders", 140),
        (str(uuid.UUID(int=9)), 70),
    ]


def test_fetch_response_bytes_and_topics() -> None:
    ledger = UsageLedger("a")
    recording = UsageRecording(ledger)
    part = FetchResponse.FetchableTopicResponse.PartitionData(
        partition_index=0, error_code=0, high_watermark=5, records=b"\x02" * 300
    )
    response = FetchResponse(
        version=4,
        throttle_time_ms=0,
        responses=[FetchResponse.FetchableTopicResponse(topic="orders", partitions=[part])],
    )
    body = encode_body(response, 4)
    request = frame(encode_request_header(1, 4, 9, "reader") + b"")
    recording.fetch_response("bob", parse_request_header(request), frame(b"\x00\x00\x00\x09" + body))
    entity, topic = ledger.drain(0, 1000).rows
    assert entity.fetch_bytes == len(body) + 4  # what consumer_byte_rate is charged
    assert (topic.topic, topic.fetch_bytes) == ("orders", 300)


def _metadata_answer(version: int, topics: dict[str, uuid.UUID]) -> bytes:
    answer = MetadataResponse(
        version=version,
        throttle_time_ms=0,
        brokers=[],
        cluster_id="c",
        controller_id=1,
        topics=[
            MetadataResponse.MetadataResponseTopic(
                error_code=0, name=name, topic_id=topic_id, is_internal=False, partitions=[]
            )
            for name, topic_id in topics.items()
        ],
    )
    # A flexible response header: the correlation id and an empty tagged-field block.
    return frame(b"\x00\x00\x00\x08\x00" + encode_body(answer, version))


def test_a_fetch_by_topic_id_is_recorded_by_the_name_a_metadata_answer_gave() -> None:
    ledger = UsageLedger("a")
    recording = UsageRecording(ledger)  # the topic cache knows nothing: only the Metadata answer names it
    request = frame(encode_request_header(3, 12, 8, "reader"))
    recording.metadata_response(parse_request_header(request), _metadata_answer(12, {"orders": ORDERS}))
    part = FetchResponse.FetchableTopicResponse.PartitionData(
        partition_index=0, error_code=0, high_watermark=5, records=b"\x02" * 300
    )
    response = FetchResponse(
        version=13,
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            FetchResponse.FetchableTopicResponse(topic_id=topic_id, partitions=[part])
            for topic_id in (ORDERS, uuid.UUID(int=9))
        ],
    )
    fetch = frame(encode_request_header(1, 13, 9, "reader"))
    recording.fetch_response(
        "bob", parse_request_header(fetch), frame(b"\x00\x00\x00\x09\x00" + encode_body(response, 13))
    )
    _, *topics = ledger.drain(0, 1000).rows
    assert {row.topic: row.fetch_bytes for row in topics} == {
        "orders": 300,
        str(uuid.UUID(int=9)): 300,  # never named by an answer: its id
    }
