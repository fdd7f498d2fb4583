"""Making sure a topic exists: Metadata first, then CreateTopics, or auto-creation where the broker lacks it.

An existing topic is left as it is (the proxy then needs no CREATE permission on it). CreateTopics goes to
the controller when the metadata names one, else to any broker (KRaft brokers forward it). A broker that
does not offer CreateTopics in ApiVersions (librdkafka's mock cluster; a listener that forbids admin
APIs) gets a Metadata request allowing auto-creation instead: the topic then has the broker's defaults,
and the warning `kafka_client_topic_auto_created` names the configs that were not applied.
"""

from __future__ import annotations

import enum

from kafka.errors import LeaderNotAvailableError

from sluice.protocol.client_requests import (
    CREATE_TOPICS,
    NewTopic,
    decode_create_topics,
    encode_create_topics_request,
)

from ..observability.log import get_logger
from .cluster import Cluster
from .errors import TOPIC_ALREADY_EXISTS, UNKNOWN_TOPIC_OR_PARTITION, KafkaErrorCode, from_code

_log = get_logger("sluice.kafka_client")
LEADER_NOT_AVAILABLE = LeaderNotAvailableError.errno


class TopicCreation(enum.Enum):
    CREATED = "created"  # by CreateTopics, with the partitions, replication and configs asked for
    EXISTED = "existed"  # already there; its settings were left as they are
    # The broker lacks CreateTopics: made by a Metadata request, with the broker's defaults
    # (num.partitions, default.replication.factor) and none of the configs.
    AUTO_CREATED = "auto_created"


async def create_once(cluster: Cluster, topic: NewTopic) -> TopicCreation:
    answer = await cluster.refresh([topic.name])
    info = answer.topics.get(topic.name)
    if info is not None and info.error_code != UNKNOWN_TOPIC_OR_PARTITION:
        if info.error_code and not KafkaErrorCode(info.error_code, "").retriable:
            raise from_code(info.error_code, f"Metadata for {topic.name}")
        return TopicCreation.EXISTED
    controller = cluster.controller_id
    if controller in cluster.brokers:
        connection = await cluster.connection_to(controller)
    else:
        connection = await cluster.any_connection()
    if CREATE_TOPICS not in connection.versions:
        _log.warning(
            "kafka_client_topic_auto_created",
            topic=topic.name,
            broker=connection.label,
            reason="the broker does not offer CreateTopics in ApiVersions",
            configs_not_applied=sorted(topic.configs),
        )
        await cluster.refresh([topic.name], allow_auto_create=True)
        return TopicCreation.AUTO_CREATED
    timeout_ms = int(cluster.request_timeout_s * 1000)
    results = await cluster.call(
        connection,
        CREATE_TOPICS,
        "CreateTopics",
        lambda v: encode_create_topics_request(v, [topic], timeout_ms),
        decode_create_topics,
    )
    code, message = results.get(topic.name, (UNKNOWN_TOPIC_OR_PARTITION, "no answer for the topic"))
    if code == TOPIC_ALREADY_EXISTS:
        return TopicCreation.EXISTED
    if code:
        raise from_code(code, f"CreateTopics {topic.name} on {connection.label}", message)
    _log.info(
        "kafka_client_topic_created",
        topic=topic.name,
        partitions=topic.partitions,
        replication_factor=topic.replication_factor,
        configs=dict(topic.configs),
    )
    return TopicCreation.CREATED


async def await_leaders(cluster: Cluster, topic: str) -> None:
    """Raises a retriable error until every partition of `topic` has a leader."""
    answer = await cluster.refresh([topic])
    info = answer.topics.get(topic)
    if info is None or info.error_code or not info.partitions:
        code = info.error_code if info is not None and info.error_code else UNKNOWN_TOPIC_OR_PARTITION
        raise from_code(code, f"Metadata for {topic}")
    for partition in info.partitions:
        if cluster.leader_for(topic, partition) is None:
            raise from_code(LEADER_NOT_AVAILABLE, f"Metadata for {topic}-{partition}")
