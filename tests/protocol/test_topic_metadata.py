"""protocol/topic_metadata.py: the proxy's own Metadata and DescribeConfigs look-ups for mutation quotas."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import MetadataRequest

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import encode_request, parse_request_header
from sluice.protocol.message_codec import decode_request_body, encode_response_body
from sluice.protocol.topic_metadata import (
    BROKER_CONFIG_VERSION,
    BROKER_RESOURCE_TYPE,
    NUM_PARTITIONS_CONFIG,
    TOPIC_ID_LOOKUP_METADATA_VERSION,
    TOPIC_IDS_METADATA_VERSION,
    TOPIC_METADATA_VERSION,
    TopicPartitions,
    decode_config_value,
    decode_topic_partitions,
    encode_broker_config_request,
    encode_topic_metadata_request,
)

METADATA_VERSIONS = range(14)
DESCRIBE_CONFIGS_VERSIONS = range(5)
ORDERS_ID = uuid.UUID("0b7d7c57-5d2b-4f4e-8a51-7f1e3c9a2d10")


# -- Metadata --------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", METADATA_VERSIONS)
def test_metadata_request_names_the_topics_and_never_auto_creates(version: int) -> None:
    body = encode_topic_metadata_request(version, ["orders", "audit"])

    request = decode_request_body(ApiKey.METADATA, version, body)

    assert [topic.name for topic in request.topics] == ["orders", "audit"]
    if version >= 4:
        assert request.allow_auto_topic_creation is False


@pytest.mark.parametrize("version", range(1, 14))
def test_metadata_request_for_every_topic_is_a_null_list(version: int) -> None:
    request = decode_request_body(ApiKey.METADATA, version, encode_topic_metadata_request(version, None))

    assert request.topics is None


def test_metadata_v0_asks_for_every_topic_with_an_empty_list_and_cannot_ask_for_none() -> None:
    assert decode_request_body(ApiKey.METADATA, 0, encode_topic_metadata_request(0, None)).topics == []
    with pytest.raises(ValueError, match="empty topic list"):
        encode_topic_metadata_request(0, [])


@pytest.mark.parametrize("version", [12, 13])
def test_metadata_request_by_topic_id(version: int) -> None:
    body = encode_topic_metadata_request(version, ["audit"], topic_ids=[ORDERS_ID.bytes])

    request = decode_request_body(ApiKey.METADATA, version, body)

    assert [(topic.name, topic.topic_id) for topic in request.topics] == [("audit", None), (None, ORDERS_ID)]


def test_metadata_request_by_topic_id_needs_v12() -> None:
    with pytest.raises(ValueError, match="v12"):
        encode_topic_metadata_request(TOPIC_ID_LOOKUP_METADATA_VERSION - 1, [], topic_ids=[ORDERS_ID.bytes])
    with pytest.raises(ValueError, match="every topic"):
        encode_topic_metadata_request(12, None, topic_ids=[ORDERS_ID.bytes])


def test_metadata_request_of_an_unknown_version_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="no version 14"):
        encode_topic_metadata_request(14, ["orders"])


def metadata_response(version: int, topics: list[dict[str, Any]], error_code: int = 0) -> bytes:
    return encode_response_body(
        ApiKey.METADATA,
        version,
        brokers=[{"node_id": 1, "host": "kafka-1", "port": 9092}],
        controller_id=1,
        topics=topics,
        error_code=error_code,
    )


def metadata_topic(
    name: str | None, partitions: int, error_code: int = 0, topic_id: Any = None
) -> dict[str, Any]:
    return {
        "error_code": error_code,
        "name": name,
        "topic_id": topic_id,
        "partitions": [
            {"error_code": 0, "partition_index": i, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]}
            for i in range(partitions)
        ],
    }


@pytest.mark.parametrize("version", METADATA_VERSIONS)
def test_topic_partitions_counts_each_topics_partitions(version: int) -> None:
    body = metadata_response(
        version,
        [metadata_topic("orders", 6, topic_id=ORDERS_ID), metadata_topic("gone", 0, error_code=3)],
    )

    found = decode_topic_partitions(version, body)

    orders_id = ORDERS_ID.bytes if version >= TOPIC_IDS_METADATA_VERSION else None
    assert found == {"orders": TopicPartitions(0, 6, orders_id), "gone": TopicPartitions(3, 0, None)}


def test_topic_partitions_leaves_out_nameless_entries_of_unknown_ids() -> None:
    body = metadata_response(12, [metadata_topic(None, 0, error_code=100, topic_id=ORDERS_ID)])

    assert decode_topic_partitions(12, body) == {}


def test_topic_partitions_raises_on_a_top_level_error() -> None:
    body = metadata_response(13, [], error_code=129)

    with pytest.raises(ProtocolError) as raised:
        decode_topic_partitions(13, body)

    assert raised.value.reason == "metadata_error"
    assert "129" in raised.value.detail


@pytest.mark.parametrize("version", [TOPIC_METADATA_VERSION, 9, 12])
def test_topic_partitions_of_a_truncated_body_is_a_protocol_error(version: int) -> None:
    body = metadata_response(version, [metadata_topic("orders", 2)])

    with pytest.raises(ProtocolError):
        decode_topic_partitions(version, body[:-1])


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([TOPIC_METADATA_VERSION, 9, 12]), st.binary(max_size=64))
def test_topic_partitions_of_arbitrary_bytes_raises_only_protocol_error(version: int, data: bytes) -> None:
    try:
        found = decode_topic_partitions(version, data)
    except ProtocolError:
        return
    assert all(isinstance(name, str) for name in found)


# -- DescribeConfigs -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", DESCRIBE_CONFIGS_VERSIONS)
def test_broker_config_request_names_one_broker_resource(version: int) -> None:
    body = encode_broker_config_request(version, 3, [NUM_PARTITIONS_CONFIG])

    request = decode_request_body(ApiKey.DESCRIBE_CONFIGS, version, body)

    [resource] = request.resources
    assert (resource.resource_type, resource.resource_name) == (BROKER_RESOURCE_TYPE, "3")
    assert resource.configuration_keys == [NUM_PARTITIONS_CONFIG]
    if version >= 1:
        assert request.include_synonyms is False
    if version >= 3:
        assert request.include_documentation is False


def test_broker_config_request_of_an_unknown_version_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="no version 5"):
        encode_broker_config_request(5, 0, [NUM_PARTITIONS_CONFIG])


def config_response(version: int, configs: dict[str, str | None], error_code: int = 0) -> bytes:
    return encode_response_body(
        ApiKey.DESCRIBE_CONFIGS,
        version,
        results=[
            {
                "error_code": error_code,
                "error_message": "Unexpected broker id" if error_code else None,
                "resource_type": BROKER_RESOURCE_TYPE,
                "resource_name": "3",
                "configs": [
                    {"name": name, "value": value, "read_only": False, "is_sensitive": False}
                    for name, value in configs.items()
                ],
            }
        ],
    )


@pytest.mark.parametrize("version", DESCRIBE_CONFIGS_VERSIONS)
def test_config_value_is_read_by_name(version: int) -> None:
    body = config_response(version, {"log.retention.hours": "168", NUM_PARTITIONS_CONFIG: "12"})

    assert decode_config_value(version, body, NUM_PARTITIONS_CONFIG) == "12"


@pytest.mark.parametrize("version", DESCRIBE_CONFIGS_VERSIONS)
def test_config_value_absent_or_null_is_none(version: int) -> None:
    assert (
        decode_config_value(version, config_response(version, {"other": "1"}), NUM_PARTITIONS_CONFIG) is None
    )
    assert decode_config_value(version, config_response(version, {"secret": None}), "secret") is None


@pytest.mark.parametrize("version", [BROKER_CONFIG_VERSION, 4])
def test_config_value_of_an_errored_resource_names_the_error_code(version: int) -> None:
    body = config_response(version, {}, error_code=42)

    with pytest.raises(ProtocolError) as raised:
        decode_config_value(version, body, NUM_PARTITIONS_CONFIG)

    assert raised.value.reason == "config_error"
    assert "error code 42" in raised.value.detail


def test_config_value_of_a_truncated_body_is_a_protocol_error() -> None:
    body = config_response(BROKER_CONFIG_VERSION, {NUM_PARTITIONS_CONFIG: "12"})

    with pytest.raises(ProtocolError):
        decode_config_value(BROKER_CONFIG_VERSION, body[:-4], NUM_PARTITIONS_CONFIG)


@pytest.mark.parametrize("version", range(14))
@pytest.mark.parametrize("topics", [None, [], ["orders", "payments"]])
def test_framed_metadata_request_equals_kafka_python_framed_encoding(
    version: int, topics: list[str] | None
) -> None:
    if version == 0 and topics == []:
        with pytest.raises(ValueError):  # v0 reads an empty list as every topic
            encode_topic_metadata_request(version, topics)
        return
    ours = encode_request(
        ApiKey.METADATA, version, 11, "sluice-proxy", encode_topic_metadata_request(version, topics)
    )
    topic_list = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
    reference = MetadataRequest(version=version, topics=topic_list)
    if version >= 4:
        reference.allow_auto_topic_creation = False
    reference.with_header(correlation_id=11, client_id="sluice-proxy")
    assert ours == bytes(reference.encode(header=True, framed=True))
    header = parse_request_header(ours)
    assert (header.api_key, header.api_version, header.correlation_id) == (ApiKey.METADATA, version, 11)
    decoded = MetadataRequest.decode(ours[4 + header.size :], version=version)
    expected_topics = topics if topics is not None else ([] if version == 0 else None)
    names = None if decoded.topics is None else [t.name for t in decoded.topics]
    assert names == expected_topics
