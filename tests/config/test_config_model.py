"""The configuration model: HostPort text form, broker_port(), read-only fields, the error's message."""

import pickle
from types import MappingProxyType

import pytest

from sluice.config import ConfigError, HostPort, ProxyConfig, QuotaSettings
from sluice.config.errors import MISSING


def make_config(**changes: object) -> ProxyConfig:
    fields: dict[str, object] = {
        "listen": HostPort("127.0.0.1", 9092),
        "upstream_bootstrap": (HostPort("k", 19092),),
        "advertised_host": "127.0.0.1",
        "broker_port_base": 9100,
    }
    fields.update(changes)
    return ProxyConfig(**fields)  # type: ignore[arg-type]


def test_host_port_text_form() -> None:
    assert str(HostPort("kafka-1", 9092)) == "kafka-1:9092"


def test_host_port_text_form_brackets_ipv6() -> None:
    assert str(HostPort("::1", 9092)) == "[::1]:9092"


def test_defaults_of_optional_fields() -> None:
    config = make_config()
    assert config.max_frame_bytes == 104857600
    assert config.idle_timeout_s == 600.0
    assert config.shutdown_timeout_s == 30.0
    assert config.metrics_listen is None
    assert (config.log.level, config.log.format) == ("info", "json")
    assert dict(config.broker_ports) == {}
    assert config.quota == QuotaSettings()


def test_broker_port_is_base_plus_node_id() -> None:
    assert make_config().broker_port(0) == 9100
    assert make_config().broker_port(7) == 9107


def test_broker_port_explicit_entry_wins() -> None:
    config = make_config(broker_ports={7: 9300})
    assert config.broker_port(7) == 9300
    assert config.broker_port(6) == 9106


def test_mapping_fields_are_read_only_copies() -> None:
    source = {1: 9201}
    config = make_config(broker_ports=source)
    source[2] = 9202
    assert dict(config.broker_ports) == {1: 9201}
    assert isinstance(config.broker_ports, MappingProxyType)
    with pytest.raises(TypeError):
        config.broker_ports[2] = 9202  # type: ignore[index]


def test_config_is_frozen_and_hashable() -> None:
    config = make_config(broker_ports={1: 9201})
    with pytest.raises(AttributeError):
        config.listen = HostPort("x", 1)  # type: ignore[misc]
    assert hash(config) == hash(make_config(broker_ports={1: 9201}))
    assert config == make_config(broker_ports={1: 9201})


@pytest.mark.parametrize(
    ("changes", "node_id", "reason"),
    [
        ({"broker_port_base": 65530}, 6, "beyond 65535"),
        ({"broker_port_base": 9090}, 2, "the listen port"),
        ({"metrics_listen": HostPort("127.0.0.1", 9104)}, 4, "the metrics port"),
        ({"broker_ports": {0: 9103}}, 3, "an explicit broker_ports entry"),
    ],
)
def test_broker_port_refuses_a_derived_port_that_cannot_be_used(
    changes: dict[str, object], node_id: int, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_config(**changes).broker_port(node_id)
    assert caught.value.key == f"broker_ports.{node_id}"
    assert reason in str(caught.value)


def test_broker_port_refuses_negative_node_id() -> None:
    with pytest.raises(ConfigError) as caught:
        make_config().broker_port(-1)
    assert caught.value.key == "broker_ports.-1"


def test_error_message_names_key_value_and_expectation() -> None:
    error = ConfigError("log.level", "loud", "one of debug, info")
    assert str(error) == "config error: log.level='loud': expected one of debug, info"
    assert (error.key, error.value, error.expected) == ("log.level", "loud", "one of debug, info")


def test_error_message_shows_missing_value() -> None:
    assert (
        str(ConfigError("listen", MISSING, "a value")) == "config error: listen=<missing>: expected a value"
    )


def test_error_message_shortens_huge_values() -> None:
    assert len(str(ConfigError("listen", "x" * 1_000_000, "host:port"))) < 300


def test_error_survives_pickling() -> None:
    error = pickle.loads(pickle.dumps(ConfigError("listen", 5, "host:port")))
    assert (error.key, error.value, error.expected) == ("listen", 5, "host:port")
    assert str(error) == "config error: listen=5: expected host:port"
