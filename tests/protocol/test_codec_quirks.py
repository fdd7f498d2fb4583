"""One test per kafka-python codec quirk (protocol/codec_quirks.py), each showing the workaround
round-trips byte for byte, and where useful that the raw codec does not."""

from __future__ import annotations

import contextlib
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse, MetadataResponse

from sluice.protocol.codec_quirks import decode_body, encode_body
from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import encode_uvarint

Broker = MetadataResponse.MetadataResponseBroker
Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition


def _tags(*entries: tuple[int, bytes]) -> bytes:
    block = encode_uvarint(len(entries))
    for tag, value in entries:
        block += encode_uvarint(tag) + encode_uvarint(len(value)) + value
    return block


def _metadata(version: int, authorized_operations: Any = None, topic_id: Any = None) -> bytes:
    message = MetadataResponse(
        version=version,
        throttle_time_ms=5,
        brokers=[Broker(node_id=1, host="kafka-1", port=9092, rack="eu-1a")],
        cluster_id="cluster",
        controller_id=1,
        topics=[
            Topic(
                error_code=0,
                name="orders",
                topic_id=topic_id,
                is_internal=False,
                partitions=[
                    Partition(
                        error_code=0,
                        partition_index=0,
                        leader_id=1,
                        leader_epoch=4,
                        replica_nodes=[1],
                        isr_nodes=[1],
                        offline_replicas=[],
                    )
                ],
                authorized_operations=authorized_operations,
            )
        ],
        authorized_operations=authorized_operations,
        error_code=0,
    )
    return bytes(message.encode(version=version))


def _api_versions_v3(tail: bytes) -> bytes:
    plain = ApiVersionsResponse(
        version=3,
        error_code=0,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=3, min_version=0, max_version=12)],
        throttle_time_ms=0,
    )
    encoded = bytes(plain.encode(version=3))
    assert encoded.endswith(b"\x00")  # an empty top-level tagged-field block, replaced below
    return encoded[:-1] + tail


def test_q1_decoded_message_re_encodes() -> None:
    body = _metadata(12)
    raw = MetadataResponse.decode(body, version=12)
    with pytest.raises(AttributeError):
        raw.encode(version=12)
    assert encode_body(decode_body(MetadataResponse, 12, body), 12) == body


def test_q2_unknown_tagged_fields_survive_at_top_level_and_in_brokers() -> None:
    body = _metadata(12)
    assert body.endswith(b"\x00")
    with_top_tag = body[:-1] + _tags((42, b"future"))
    raw = MetadataResponse.decode(with_top_tag, version=12)
    raw._header = None
    assert bytes(raw.encode(version=12)) != with_top_tag  # kafka-python drops the unknown tag
    assert encode_body(decode_body(MetadataResponse, 12, with_top_tag), 12) == with_top_tag

    broker = Broker(node_id=1, host="h", port=1, rack=None, _7=b"\x01\x02")
    message = MetadataResponse(
        version=12, throttle_time_ms=0, brokers=[broker], cluster_id=None, controller_id=1, topics=[]
    )
    with_broker_tag = encode_body(message, 12)
    assert _tags((7, b"\x01\x02")) in with_broker_tag
    assert encode_body(decode_body(MetadataResponse, 12, with_broker_tag), 12) == with_broker_tag


def test_q3_tagged_field_equal_to_its_default_survives() -> None:
    explicit_epoch = _api_versions_v3(_tags((1, b"\xff" * 8)))  # FinalizedFeaturesEpoch = -1, explicit
    raw = ApiVersionsResponse.decode(explicit_epoch, version=3)
    raw._header = None
    assert bytes(raw.encode(version=3)) != explicit_epoch
    assert encode_body(decode_body(ApiVersionsResponse, 3, explicit_epoch), 3) == explicit_epoch


def test_q4_tagged_fields_are_written_in_ascending_tag_order() -> None:
    features = encode_uvarint(1)  # an empty compact array of SupportedFeatures
    epoch = (5).to_bytes(8, "big")
    canonical = _api_versions_v3(_tags((0, features), (1, epoch), (9, b"x")))
    reordered = _api_versions_v3(_tags((9, b"x"), (1, epoch), (0, features)))
    assert encode_body(decode_body(ApiVersionsResponse, 3, canonical), 3) == canonical
    assert encode_body(decode_body(ApiVersionsResponse, 3, reordered), 3) == canonical


def test_q5_only_unsupported_version_errors_are_v0_bodies() -> None:
    unsupported = ApiVersionsResponse(
        version=0,
        error_code=35,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=3)],
    )
    v0_body = bytes(unsupported.encode(version=0))
    decoded = decode_body(ApiVersionsResponse, 4, v0_body)
    assert decoded.version == 0
    assert encode_body(decoded, 0) == v0_body

    invalid_request = ApiVersionsResponse(version=3, error_code=42, api_keys=[], throttle_time_ms=0)
    v3_body = bytes(invalid_request.encode(version=3))
    with pytest.raises(struct.error):
        ApiVersionsResponse.decode(v3_body, version=3)  # kafka-python reads it as v0 and fails
    decoded = decode_body(ApiVersionsResponse, 3, v3_body)
    assert (decoded.version, decoded.error_code) == (3, 42)
    assert encode_body(decoded, 3) == v3_body


@pytest.mark.parametrize("cut", [1, 5, 9, 20])
def test_q6_truncated_body_is_a_protocol_error(cut: int) -> None:
    body = _metadata(12)
    with pytest.raises(ProtocolError) as info:
        decode_body(MetadataResponse, 12, body[:cut])
    assert info.value.reason == "bad_metadata_response"


def test_q6_trailing_bytes_are_a_protocol_error() -> None:
    body = _metadata(3)
    MetadataResponse.decode(body + b"junk", version=3)  # kafka-python accepts and ignores them
    with pytest.raises(ProtocolError) as info:
        decode_body(MetadataResponse, 3, body + b"junk")
    assert "trailing" in info.value.detail


def test_q6_invalid_utf8_is_a_protocol_error() -> None:
    body = _metadata(1).replace(b"kafka-1", b"kafka\xff1")
    with pytest.raises(ProtocolError):
        decode_body(MetadataResponse, 1, body)


def test_q6_version_above_the_codec_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError) as info:
        decode_body(MetadataResponse, 14, _metadata(13))
    assert info.value.reason == "unsupported_version"


@pytest.mark.parametrize(
    ("operations", "wire"),
    [(None, b"\x80\x00\x00\x00"), (set(), b"\x00\x00\x00\x00"), ({0, 31}, b"\x80\x00\x00\x01")],
)
@pytest.mark.parametrize("version", [8, 10, 12])
def test_q7_authorized_operations_round_trip(operations: set[int] | None, wire: bytes, version: int) -> None:
    body = _metadata(version, authorized_operations=operations)
    assert wire in body
    decoded = decode_body(MetadataResponse, version, body)
    assert decoded.topics[0].authorized_operations == operations
    assert encode_body(decoded, version) == body


def test_q7_describe_cluster_authorized_operations_round_trip() -> None:
    message = DescribeClusterResponse(
        version=0, throttle_time_ms=0, error_code=0, cluster_id="c", controller_id=1, brokers=[]
    )
    body = bytes(message.encode(version=0))
    assert body.endswith(b"\x80\x00\x00\x00\x00")  # MIN_VALUE, then the empty tagged-field block
    assert decode_body(DescribeClusterResponse, 0, body).authorized_operations is None
    assert encode_body(decode_body(DescribeClusterResponse, 0, body), 0) == body


@pytest.mark.parametrize("topic_id", [uuid.UUID(int=0), uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")])
def test_q8_topic_ids_round_trip(topic_id: uuid.UUID) -> None:
    body = _metadata(12, topic_id=topic_id)
    decoded = decode_body(MetadataResponse, 12, body)
    assert decoded.topics[0].topic_id == (None if topic_id.int == 0 else topic_id)
    assert encode_body(decoded, 12) == body


@pytest.mark.parametrize("version", range(14))
def test_encode_body_equals_kafka_python_for_codec_built_metadata(version: int) -> None:
    body = _metadata(version, authorized_operations={2, 3})
    assert encode_body(decode_body(MetadataResponse, version, body), version) == body


@pytest.mark.parametrize("version", range(7))
def test_encode_body_equals_kafka_python_for_find_coordinator(version: int) -> None:
    if version < 4:
        message = FindCoordinatorResponse(
            version=version, throttle_time_ms=1, error_code=0, error_message=None, node_id=2, host="h", port=9
        )
    else:
        coordinator = FindCoordinatorResponse.Coordinator(
            key="group", node_id=2, host="h", port=9, error_code=0, error_message=None
        )
        message = FindCoordinatorResponse(version=version, throttle_time_ms=1, coordinators=[coordinator])
    body = bytes(message.encode(version=version))
    assert encode_body(decode_body(FindCoordinatorResponse, version, body), version) == body


@given(data=st.binary(max_size=80), version=st.integers(min_value=0, max_value=13))
def test_any_bytes_decode_or_raise_protocol_error(data: bytes, version: int) -> None:
    for message_class, max_version in (
        (MetadataResponse, 13),
        (FindCoordinatorResponse, 6),
        (DescribeClusterResponse, 2),
        (ApiVersionsResponse, 4),
    ):
        with contextlib.suppress(ProtocolError):
            decode_body(message_class, min(version, max_version), data)
