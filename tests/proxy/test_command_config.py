"""`--command-config`: Kafka client properties (Java's and librdkafka's names) to TLS and SASL settings, and
kafka-configs.sh's pairing of entity types with names."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from sluice.config.errors import ConfigError
from sluice.proxy.tools.command_config import connect_settings, read_properties
from sluice.proxy.tools.quota_configs import ANY_NAME, CommandError, entity_args, parse_adds


def settings_from(tmp_path: Path, text: str):
    path = tmp_path / "client.properties"
    path.write_text(text)
    return connect_settings(read_properties(path))


def test_plaintext_by_default(tmp_path: Path) -> None:
    settings = settings_from(tmp_path, "# nothing but a comment\n\n")
    assert settings.tls is None and settings.sasl is None
    assert settings.request_timeout_s == 30.0


def test_java_sasl_jaas_config_over_tls(tmp_path: Path) -> None:
    settings = settings_from(
        tmp_path,
        "security.protocol = SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        'username="ops" password="p=w\\"1";\n'.replace("\\\n", "")
        + "ssl.endpoint.identification.algorithm=\n"
        "client.id: ops-shell\n"
        "request.timeout.ms=5000\n",
    )
    assert settings.sasl is not None
    assert (settings.sasl.mechanism, settings.sasl.username, settings.sasl.password.reveal()) == (
        "SCRAM-SHA-512",
        "ops",
        'p=w"1',
    )
    assert settings.tls is not None and settings.tls.context.check_hostname is False
    assert settings.tls.context.verify_mode == ssl.CERT_REQUIRED  # the chain is still checked
    assert (settings.client_id, settings.request_timeout_s) == ("ops-shell", 5.0)


def test_librdkafka_names(tmp_path: Path) -> None:
    settings = settings_from(
        tmp_path, "security.protocol=SASL_PLAINTEXT\nsasl.username=app\nsasl.password=pw\n"
    )
    assert settings.tls is None
    assert settings.sasl is not None and (settings.sasl.mechanism, settings.sasl.username) == ("PLAIN", "app")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("security.protocol=SSL\nssl.truststore.location=/x.jks\n", "ssl.truststore.type"),
        ("security.protocol=TLS\n", "security.protocol"),
        ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n", "sasl.mechanism"),
        ("security.protocol=SASL_PLAINTEXT\nsasl.username=app\n", "sasl.username"),
        ("ssl.keystore.password=hunter2-secret\n", "ssl.keystore.password"),
        ("request.timeout.ms=soon\n", "request.timeout.ms"),
        ("security.protocol=SSL\nssl.ca.location=/no/such/ca.pem\n", "ssl.ca.location"),
    ],
)
def test_what_cannot_be_honoured_is_refused_naming_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from(tmp_path, text)
    assert caught.value.key == key
    assert "hunter2-secret" not in str(caught.value)


def test_a_jks_trust_store_says_what_to_give_instead(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"PEM file, ssl\.ca\.location"):
        settings_from(tmp_path, "security.protocol=SSL\nssl.truststore.location=/etc/kafka/truststore.jks\n")


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        read_properties(tmp_path / "absent.properties")
    assert caught.value.key == "--command-config"


def test_entity_types_pair_with_names_in_order() -> None:
    parts = [("type", "users"), ("name", "alice"), ("type", "clients"), ("default", None)]
    entity = entity_args(parts, alter=True)
    assert (entity.types, entity.names) == (("user", "client-id"), ("alice", None))
    described = entity_args([("type", "clients")], alter=False)
    assert described.names == (ANY_NAME,)
    assert entity_args([], alter=False).types == ()


@pytest.mark.parametrize(
    "parts",
    [
        [("type", "clients")],  # alter needs a name or the default for each type
        [],
        [("type", "ips"), ("name", "10.0.0.1"), ("type", "users"), ("name", "u")],
        [("type", "clients"), ("name", "a"), ("type", "clients"), ("name", "b")],
        [("type", "topics"), ("name", "t")],
        [("name", "orphan")],
    ],
)
def test_command_lines_kafka_configs_refuses(parts) -> None:
    with pytest.raises(CommandError):
        entity_args(parts, alter=True)


def test_add_config_values_are_doubles() -> None:
    assert parse_adds("producer_byte_rate=1048576, request_percentage=12.5") == [
        ("producer_byte_rate", 1048576.0),
        ("request_percentage", 12.5),
    ]
    with pytest.raises(CommandError, match="producer_byte_rate"):
        parse_adds("producer_byte_rate")
    with pytest.raises(CommandError, match="fast"):
        parse_adds("producer_byte_rate=fast")
