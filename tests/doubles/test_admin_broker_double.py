"""AdminBrokerDouble (tests/doubles/admin_broker.py) driven by real admin clients, plus the proxy's own
look-ups (protocol/topic_metadata.py) sent to it over a socket.

What the clients send, as observed here (the double advertises CreateTopics v0-7, DeleteTopics v0-6,
CreatePartitions v0-3, ApiVersions v0-3):
* kafka-python 3.0.12: ApiVersions v4 first (answered UNSUPPORTED_VERSION in v0), then v3; CreateTopics
  v7, CreatePartitions v3, DeleteTopics v6, all strict KIP-599 versions. It infers the broker as Kafka
  1.0 from the few APIs advertised, so it refuses num_partitions=-1 itself (that needs 2.4); these tests
  give explicit partition counts.
* librdkafka 2.16 (confluent-kafka 2.16.1): ApiVersions v3; CreateTopics v4, CreatePartitions v2,
  DeleteTopics v4, the permissive versions, as spec section 7.2 says.
"""

from __future__ import annotations

import gc
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic, ResourceType
from doubles.admin_broker import AdminBrokerDouble
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType
from kafka.admin import NewPartitions as KpNewPartitions
from rawclient import RawClient

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import encode_request_header, frame
from sluice.protocol.message_codec import decode_response_body, encode_request_body
from sluice.protocol.topic_metadata import (
    BROKER_CONFIG_VERSION,
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
from sluice.protocol.topic_mutations import TopicMutation

TIMEOUT_S = 15.0
API_VERSIONS = 18


@pytest.fixture
def broker() -> Iterator[AdminBrokerDouble]:
    with AdminBrokerDouble(node_id=0, num_partitions=3, topics={"orders": 2}) as double:
        yield double


def kafka_python_admin(broker: AdminBrokerDouble) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=broker.bootstrap, client_id="kp-admin", request_timeout_ms=10000
    )


class Rdkafka:
    """Owns a librdkafka AdminClient. librdkafka has no close(): the handle is destroyed with its last
    reference, which must go before the double stops or the client keeps reconnecting to a closed port.
    pytest keeps fixture values until the test is torn down, so the fixture hands out this owner."""

    def __init__(self, bootstrap: str) -> None:
        self.admin: AdminClient | None = AdminClient(
            {"bootstrap.servers": bootstrap, "client.id": "rdk-admin"}
        )

    def close(self) -> None:
        self.admin = None
        gc.collect()


@pytest.fixture
def rdkafka(broker: AdminBrokerDouble) -> Iterator[Rdkafka]:
    owner = Rdkafka(broker.bootstrap)
    yield owner
    owner.close()


def outcomes(futures: dict[Any, Any]) -> dict[str, int]:
    """librdkafka's per-topic futures as {topic: error code}."""
    codes = {}
    for name, future in futures.items():
        try:
            future.result(TIMEOUT_S)
            codes[str(name)] = 0
        except KafkaException as exc:
            codes[str(name)] = exc.args[0].code()
    return codes


def versions(broker: AdminBrokerDouble) -> list[tuple[int, int]]:
    return [(api_key, version) for api_key, version, _ in broker.received]


# -- kafka-python's KafkaAdminClient ----------------------------------------------------------------


def test_kafka_python_creates_grows_and_deletes_with_strict_versions(broker: AdminBrokerDouble) -> None:
    admin = kafka_python_admin(broker)
    try:
        created = admin.create_topics(
            {
                "audit": {"num_partitions": 4, "replication_factor": 1},
                "orders": {"num_partitions": 1, "replication_factor": 1},
            },
            raise_errors=False,
        )
        grown = admin.create_partitions(
            {"audit": KpNewPartitions(6), "orders": KpNewPartitions(2)}, raise_errors=False
        )
        deleted = admin.delete_topics(["audit", "missing"], raise_errors=False)
    finally:
        admin.close()

    assert [(t["name"], t["error_code"], t["num_partitions"]) for t in created["topics"]] == [
        ("audit", 0, 4),
        ("orders", 36, -1),
    ]
    assert [(r.name, r.error_code) for r in grown.results] == [("audit", 0), ("orders", 37)]
    assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [("audit", 0), ("missing", 3)]
    assert broker.topics == {"orders": 2}
    assert versions(broker) == [
        (ApiKey.CREATE_TOPICS, 7),
        (ApiKey.CREATE_PARTITIONS, 3),
        (ApiKey.DELETE_TOPICS, 6),
    ]
    assert broker.received[0][2].topics == [
        TopicMutation("audit", None, 4, None),
        TopicMutation("orders", None, 1, None),
    ]


def test_kafka_python_falls_back_from_api_versions_v4_to_v3(broker: AdminBrokerDouble) -> None:
    admin = kafka_python_admin(broker)
    admin.close()

    api_versions = [version for key, version in broker.requests_seen if key == API_VERSIONS]
    assert api_versions[:2] == [4, 3]


def test_kafka_python_deletes_a_topic_by_id(broker: AdminBrokerDouble) -> None:
    orders_id = broker.topic_ids["orders"]
    admin = kafka_python_admin(broker)
    try:
        deleted = admin.delete_topics([uuid.UUID(bytes=orders_id)])
    finally:
        admin.close()

    assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [("orders", 0)]
    assert broker.topics == {}
    assert broker.received[0][2].topics == [TopicMutation(None, orders_id, 0, None)]


def test_kafka_python_validate_only_changes_nothing(broker: AdminBrokerDouble) -> None:
    admin = kafka_python_admin(broker)
    try:
        created = admin.create_topics(
            {"audit": {"num_partitions": 4, "replication_factor": 1}}, validate_only=True
        )
        grown = admin.create_partitions({"orders": KpNewPartitions(5)}, validate_only=True)
    finally:
        admin.close()

    assert created["topics"][0]["error_code"] == 0
    assert grown.results[0].error_code == 0
    assert broker.topics == {"orders": 2}
    assert [request.validate_only for _, _, request in broker.received] == [True, True]


def test_kafka_python_reads_the_brokers_num_partitions(broker: AdminBrokerDouble) -> None:
    admin = kafka_python_admin(broker)
    try:
        described = admin.describe_configs(
            [KpConfigResource(ConfigResourceType.BROKER, "0", [NUM_PARTITIONS_CONFIG])], config_filter="all"
        )
    finally:
        admin.close()

    assert described["broker"]["0"][NUM_PARTITIONS_CONFIG]["value"] == "3"
    assert broker.describe_configs_requests == 1


# -- confluent-kafka's AdminClient (librdkafka) -----------------------------------------------------


def test_librdkafka_creates_grows_and_deletes_with_permissive_versions(
    broker: AdminBrokerDouble, rdkafka: Rdkafka
) -> None:
    admin = rdkafka.admin
    assert admin is not None

    created = outcomes(
        admin.create_topics(
            [NewTopic("audit", 4, 1), NewTopic("orders", 1, 1), NewTopic("default-sized")],
            request_timeout=TIMEOUT_S,
        )
    )
    grown = outcomes(
        admin.create_partitions(
            [NewPartitions("audit", 6), NewPartitions("orders", 1)], request_timeout=TIMEOUT_S
        )
    )
    deleted = outcomes(admin.delete_topics(["audit", "missing"], request_timeout=TIMEOUT_S))

    assert created == {"audit": 0, "orders": KafkaError.TOPIC_ALREADY_EXISTS, "default-sized": 0}
    assert grown == {"audit": 0, "orders": KafkaError.INVALID_PARTITIONS}
    assert deleted == {"audit": 0, "missing": KafkaError.UNKNOWN_TOPIC_OR_PART}
    assert broker.topics == {"orders": 2, "default-sized": 3}  # -1 took the broker's num.partitions
    assert versions(broker) == [
        (ApiKey.CREATE_TOPICS, 4),
        (ApiKey.CREATE_PARTITIONS, 2),
        (ApiKey.DELETE_TOPICS, 4),
    ]
    assert broker.received[0][2].topics[2] == TopicMutation("default-sized", None, -1, None)


def test_librdkafka_sends_api_versions_v3(broker: AdminBrokerDouble, rdkafka: Rdkafka) -> None:
    admin = rdkafka.admin
    assert admin is not None
    outcomes(admin.create_topics([NewTopic("audit", 1, 1)], request_timeout=TIMEOUT_S))

    assert next(version for key, version in broker.requests_seen if key == API_VERSIONS) == 3


def test_librdkafka_reads_the_brokers_num_partitions(broker: AdminBrokerDouble, rdkafka: Rdkafka) -> None:
    admin = rdkafka.admin
    assert admin is not None

    futures = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")], request_timeout=TIMEOUT_S)
    [future] = futures.values()
    configs = future.result(TIMEOUT_S)

    assert configs[NUM_PARTITIONS_CONFIG].value == "3"


# -- the proxy's own look-ups over a socket -----------------------------------------------------------


@pytest.fixture
def wire(broker: AdminBrokerDouble) -> Iterator[RawClient]:
    """One connection speaking framed requests built by protocol/."""
    host, port = broker.bootstrap.rsplit(":", 1)
    with RawClient(host, int(port), client_id="sluice", timeout_s=TIMEOUT_S) as connection:
        yield connection


def test_topic_metadata_look_up_reads_partition_counts(broker: AdminBrokerDouble, wire: RawClient) -> None:
    body = wire.call_body(
        ApiKey.METADATA,
        TOPIC_METADATA_VERSION,
        encode_topic_metadata_request(TOPIC_METADATA_VERSION, ["orders", "nope"]),
    )

    assert decode_topic_partitions(TOPIC_METADATA_VERSION, body) == {
        "orders": TopicPartitions(0, 2, None),
        "nope": TopicPartitions(3, 0, None),
    }
    assert broker.topics == {"orders": 2}  # looking created nothing
    assert broker.metadata_requests == 1


def test_topic_metadata_look_up_by_topic_id(broker: AdminBrokerDouble, wire: RawClient) -> None:
    orders_id = broker.topic_ids["orders"]
    by_id = wire.call_body(
        ApiKey.METADATA,
        TOPIC_ID_LOOKUP_METADATA_VERSION,
        encode_topic_metadata_request(TOPIC_ID_LOOKUP_METADATA_VERSION, [], topic_ids=[orders_id]),
    )

    assert decode_topic_partitions(TOPIC_ID_LOOKUP_METADATA_VERSION, by_id) == {
        "orders": TopicPartitions(0, 2, orders_id)
    }


def test_every_topic_look_up_carries_topic_ids_from_v10(broker: AdminBrokerDouble, wire: RawClient) -> None:
    broker.topics["audit"] = 5
    broker.topic_ids["audit"] = uuid.UUID(int=5).bytes
    every = wire.call_body(
        ApiKey.METADATA,
        TOPIC_IDS_METADATA_VERSION,
        encode_topic_metadata_request(TOPIC_IDS_METADATA_VERSION, None),
    )

    assert decode_topic_partitions(TOPIC_IDS_METADATA_VERSION, every) == {
        "orders": TopicPartitions(0, 2, broker.topic_ids["orders"]),
        "audit": TopicPartitions(0, 5, uuid.UUID(int=5).bytes),
    }


def test_broker_config_look_up_reads_num_partitions(broker: AdminBrokerDouble, wire: RawClient) -> None:
    body = wire.call_body(
        ApiKey.DESCRIBE_CONFIGS,
        BROKER_CONFIG_VERSION,
        encode_broker_config_request(BROKER_CONFIG_VERSION, broker.node_id, [NUM_PARTITIONS_CONFIG]),
    )

    assert decode_config_value(BROKER_CONFIG_VERSION, body, NUM_PARTITIONS_CONFIG) == "3"
    assert broker.describe_configs_requests == 1


def test_broker_config_look_up_of_another_broker_id_is_an_error(
    broker: AdminBrokerDouble, wire: RawClient
) -> None:
    body = wire.call_body(
        ApiKey.DESCRIBE_CONFIGS,
        BROKER_CONFIG_VERSION,
        encode_broker_config_request(BROKER_CONFIG_VERSION, 7, ["x"]),
    )

    with pytest.raises(ProtocolError, match="error code 42"):
        decode_config_value(BROKER_CONFIG_VERSION, body, "x")


def test_api_versions_above_v3_is_answered_unsupported_in_v0(wire: RawClient) -> None:
    body = wire.call_body(
        API_VERSIONS,
        4,
        encode_request_body(API_VERSIONS, 4, client_software_name="t", client_software_version="1"),
    )

    answer = decode_response_body(API_VERSIONS, 4, body)  # codec_quirks reads it as v0 (quirk Q5)
    assert answer.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in answer.api_keys] == [(API_VERSIONS, 0, 3)]


def test_api_versions_lists_what_the_double_speaks(wire: RawClient) -> None:
    answer = decode_response_body(
        API_VERSIONS, 3, wire.call_body(API_VERSIONS, 3, encode_request_body(API_VERSIONS, 3))
    )

    assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == {
        3: (0, 13),
        18: (0, 3),
        19: (0, 7),
        20: (0, 6),
        32: (0, 4),
        37: (0, 3),
    }


def test_any_other_api_closes_the_connection(broker: AdminBrokerDouble, wire: RawClient) -> None:
    wire.sock.sendall(frame(encode_request_header(0, 9, 1, "sluice") + b"\x00" * 8))  # a Produce

    assert wire.is_closed_by_peer()
    assert broker.requests_seen == [(0, 9)]


def test_a_malformed_request_closes_the_connection(wire: RawClient) -> None:
    wire.sock.sendall(frame(encode_request_header(ApiKey.CREATE_TOPICS, 7, 1, "sluice") + b"\x05\x01"))

    assert wire.is_closed_by_peer()


def test_leaving_the_block_stops_the_double() -> None:
    with AdminBrokerDouble() as double:
        host, port = double.bootstrap.rsplit(":", 1)
        connection = RawClient(host, int(port), timeout_s=TIMEOUT_S)

    assert connection.is_closed_by_peer()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
    connection.close()
