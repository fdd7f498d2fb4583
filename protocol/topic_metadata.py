"""The proxy's own look-ups for partition-mutation quotas: current partition counts (Metadata) and the
broker's `num.partitions` default (DescribeConfigs on a BROKER resource). Bodies only; the caller adds
the request header (`protocol.headers.encode_request_header`) and the frame prefix (`frame`).

Versions to send (every broker from Kafka 2.0 to 4.x speaks them):

* Metadata `TOPIC_METADATA_VERSION` = 4: the first version with `allow_auto_topic_creation`, so
  looking never creates a topic, and the oldest one Kafka 4.0 kept (KIP-896 removed v0-3). Kafka 2.0
  speaks v0-6.
* Topic ids appear in Metadata answers from v10 (Kafka 2.8, the release that brought DeleteTopics v6
  and its id-only deletes). Looking topics up *by id* needs `TOPIC_ID_LOOKUP_METADATA_VERSION` = 12
  (Kafka 3.1); on 2.8-3.0 ask for all topics (`topics=None`) at `TOPIC_IDS_METADATA_VERSION` = 10
  and match the ids in the answer.
* DescribeConfigs `BROKER_CONFIG_VERSION` = 1: Kafka 4.0 removed v0; v1 is spoken from Kafka 1.1 on.
  v1-3 answer `num.partitions` identically.

A BROKER resource is named by a broker id, and Kafka answers INVALID_REQUEST unless the request goes
to that very broker (an empty name describes only the cluster-wide dynamic defaults, which normally
do not hold `num.partitions`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

from kafka.protocol.admin.configs import DescribeConfigsRequest, DescribeConfigsResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from sluice.protocol.codec_quirks import decode_body, encode_body
from sluice.protocol.errors import ProtocolError

TOPIC_METADATA_VERSION = 4
TOPIC_IDS_METADATA_VERSION = 10
TOPIC_ID_LOOKUP_METADATA_VERSION = 12
BROKER_CONFIG_VERSION = 1
BROKER_RESOURCE_TYPE = 4
NUM_PARTITIONS_CONFIG = "num.partitions"

_AUTO_CREATE_FLAG_FROM = 4
_NULL_TOPICS_FROM = 1  # v0 spells "all topics" as an empty list
_TOPIC_IDS_FROM = 10
_TOP_LEVEL_ERROR_FROM = 13


class TopicPartitions(NamedTuple):
    error_code: int
    partitions: int
    topic_id: bytes | None  # 16 bytes from Metadata v10 on, None before or when the broker sent zeros


def encode_topic_metadata_request(
    version: int, topics: Sequence[str] | None, *, topic_ids: Sequence[bytes] = ()
) -> bytes:
    """A Metadata request body for `topics` (None: every topic), plus topics given by 16-byte id.

    `allow_auto_topic_creation` is False where the version has it (v4+). Raises ValueError for a
    version kafka-python does not know, for v0 asked for no topics (v0 cannot say that), and for ids
    below v12 (brokers ignore them before).
    """
    if not 0 <= version <= MetadataRequest.max_version:
        raise ValueError(f"Metadata has no version {version}")
    entries: list[Any] | None  # kafka-python's MetadataRequestTopic
    if topics is None:
        if topic_ids:
            raise ValueError("topic ids cannot be combined with a request for every topic")
        entries = None if version >= _NULL_TOPICS_FROM else []
    else:
        if version < _NULL_TOPICS_FROM and not topics and not topic_ids:
            raise ValueError("Metadata v0 reads an empty topic list as every topic")
        entries = [MetadataRequest.MetadataRequestTopic(version=version, name=name) for name in topics]
    if topic_ids:
        if version < TOPIC_ID_LOOKUP_METADATA_VERSION:
            raise ValueError(f"topic ids need Metadata v{TOPIC_ID_LOOKUP_METADATA_VERSION}+")
        assert entries is not None
        entries += [
            MetadataRequest.MetadataRequestTopic(version=version, name=None, topic_id=uuid.UUID(bytes=raw))
            for raw in topic_ids
        ]
    request = MetadataRequest(version=version, topics=entries)
    if version >= _AUTO_CREATE_FLAG_FROM:
        request.allow_auto_topic_creation = False
    return encode_body(request, version)


def decode_topic_partitions(
    version: int, body: bytes | memoryview, *, allow_trailing: bool = False
) -> dict[str, TopicPartitions]:
    """Each named topic of a Metadata response body: its error code, partition count and topic id.

    Nameless entries (ids a v12+ broker did not know) are left out: they have no partitions to count.
    A v13+ top-level error raises ProtocolError('metadata_error').
    """
    response = decode_body(MetadataResponse, version, body, allow_trailing=allow_trailing)
    if version >= _TOP_LEVEL_ERROR_FROM and response.error_code:
        raise ProtocolError("metadata_error", f"error code {response.error_code}")
    found: dict[str, TopicPartitions] = {}
    for topic in response.topics or []:
        if topic.name is None:
            continue
        topic_id = topic.topic_id if version >= _TOPIC_IDS_FROM else None
        found[topic.name] = TopicPartitions(
            topic.error_code, len(topic.partitions or []), None if topic_id is None else topic_id.bytes
        )
    return found


def encode_broker_config_request(version: int, broker_id: int, names: Sequence[str]) -> bytes:
    """A DescribeConfigs request body for `names` of broker `broker_id` (resource type BROKER).

    No synonyms, no documentation. Raises ValueError for a version kafka-python does not know.
    """
    if not 0 <= version <= DescribeConfigsRequest.max_version:
        raise ValueError(f"DescribeConfigs has no version {version}")
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        version=version,
        resource_type=BROKER_RESOURCE_TYPE,
        resource_name=str(broker_id),
        configuration_keys=list(names),
    )
    return encode_body(DescribeConfigsRequest(version=version, resources=[resource]), version)


class BrokerConfigs(NamedTuple):
    """A DescribeConfigs answer for one BROKER resource: its error (0: none) and the values asked for
    (None: absent, or null as a sensitive config's)."""

    error_code: int
    error_message: str | None
    values: dict[str, str | None]


def decode_broker_configs(version: int, body: bytes | memoryview) -> BrokerConfigs:
    """The first resource of a DescribeConfigs response body (a request asks for one broker)."""
    response = decode_body(DescribeConfigsResponse, version, body)
    for result in response.results or []:
        values = {config.name: config.value for config in result.configs or []}
        return BrokerConfigs(result.error_code, result.error_message, values)
    raise ProtocolError("config_error", "a DescribeConfigs answer without a resource")


def decode_config_value(version: int, body: bytes | memoryview, name: str) -> str | None:
    """The value of config `name` in a DescribeConfigs response body, None if it is absent (or its
    value is null, as for sensitive configs).

    A resource that errored raises ProtocolError('config_error') naming the error code and message.
    """
    response = decode_body(DescribeConfigsResponse, version, body)
    value: str | None = None
    for result in response.results or []:
        if result.error_code:
            raise ProtocolError(
                "config_error",
                f"error code {result.error_code} for resource {result.resource_type}/"
                f"{result.resource_name!r}: {result.error_message}",
            )
        for config in result.configs or []:
            if config.name == name and value is None:
                value = config.value
    return value
