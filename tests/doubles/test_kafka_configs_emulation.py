"""tests/kafka_configs.py (kafka-configs.sh's requests and output, for quotas) against QuotaBrokerDouble."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from doubles.quota_broker import QuotaBrokerDouble
from kafka_configs import KafkaConfigs, java_double


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (2097152.0, "2097152.0"),
        (12.34, "12.34"),
        (10485760.0, "1.048576E7"),
        (1e7, "1.0E7"),
        (0.0005, "5.0E-4"),
        (5.0, "5.0"),
    ],
)
def test_java_double(value: float, text: str) -> None:
    assert java_double(value) == text


@pytest.fixture
def tool() -> Iterator[KafkaConfigs]:
    with QuotaBrokerDouble(broker_count=1) as cluster:
        yield KafkaConfigs("127.0.0.1", cluster.port)


def test_alter_then_describe(tool: KafkaConfigs) -> None:
    alter = tool.run(
        "--bootstrap-server",
        "x",
        "--alter",
        "--add-config",
        "producer_byte_rate=2097152",
        "--entity-type",
        "clients",
        "--entity-name",
        "pump",
    )
    assert alter == (0, ["Completed updating config for client pump."], [])
    assert tool.requests[-3:] == [(18, 2), (48, 1), (49, 1)]
    describe = tool.run("--describe", "--entity-type", "clients", "--entity-name", "pump")
    assert describe.stdout == ["Quota configs for client-id 'pump' are producer_byte_rate=2097152.0"]


def test_user_and_client_defaults(tool: KafkaConfigs) -> None:
    alter = tool.run(
        "--alter",
        "--add-config",
        "consumer_byte_rate=10485760,request_percentage=50",
        "--entity-type",
        "users",
        "--entity-default",
        "--entity-type",
        "clients",
        "--entity-default",
    )
    assert alter.stdout == ["Completed updating default config for users in the cluster."]
    describe = tool.run(
        "--describe",
        "--entity-type",
        "users",
        "--entity-default",
        "--entity-type",
        "clients",
        "--entity-default",
    )
    assert describe.stdout == [
        "Quota configs for the default user-principal, the default client-id are "
        "consumer_byte_rate=1.048576E7, request_percentage=50.0"
    ]


def test_deleting_a_key_that_is_not_set_fails_before_sending(tool: KafkaConfigs) -> None:
    outcome = tool.run(
        "--alter", "--delete-config", "producer_byte_rate", "--entity-type", "users", "--entity-name", "alice"
    )
    assert outcome == (1, [], ["Invalid config(s): producer_byte_rate"])
    assert (49, 1) not in tool.requests


def test_a_refused_alter_prints_the_execution_exception(tool: KafkaConfigs) -> None:
    outcome = tool.run(
        "--alter", "--add-config", "bogus=1", "--entity-type", "users", "--entity-name", "alice"
    )
    assert outcome.exit_code == 1
    assert outcome.stderr[1] == (
        "java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.InvalidRequestException: "
        "Invalid configuration key bogus"
    )
