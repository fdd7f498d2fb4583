"""load_config happy paths: file only, flags only, flags over the file, defaults, and file-level errors."""

from pathlib import Path

import pytest

from sluice.config import (
    ConfigError,
    HostPort,
    LogConfig,
    QuotaRule,
    QuotaSettings,
    ThrottleMode,
    load_config,
)
from sluice.quota import QuotaEntity, QuotaKey

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "config-example.yaml"

FULL_FILE = """\
listen: "127.0.0.1:9092"
advertised_host: proxy.local
broker_port_base: 9100
broker_ports:
  5: 9300
  "6": 9301
upstream:
  bootstrap: ["kafka-1:19092", "kafka-2:19092"]
max_frame_bytes: 2048
idle_timeout_s: 1.5
shutdown_timeout_s: 0
metrics:
  listen: "127.0.0.1:9404"
log:
  level: debug
  format: console
quota:
  throttle_mode: delay
  entities:
    - {client_id: pump, producer_byte_rate: 1000}
"""

MINIMAL_FLAGS = {"listen": "127.0.0.1:9092", "upstream.bootstrap": ["kafka-1:19092"]}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sluice.yaml"
    path.write_text(text)
    return path


def test_file_only_sets_every_key(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL_FILE))
    assert config.listen == HostPort("127.0.0.1", 9092)
    assert config.advertised_host == "proxy.local"
    assert config.broker_port_base == 9100
    assert dict(config.broker_ports) == {5: 9300, 6: 9301}
    assert config.upstream_bootstrap == (HostPort("kafka-1", 19092), HostPort("kafka-2", 19092))
    assert config.max_frame_bytes == 2048
    assert config.idle_timeout_s == 1.5
    assert config.shutdown_timeout_s == 0.0
    assert config.metrics_listen == HostPort("127.0.0.1", 9404)
    assert config.log == LogConfig(level="debug", format="console")
    assert config.quota.throttle_mode is ThrottleMode.DELAY
    assert config.quota.rules == (
        QuotaRule(QuotaEntity(client_id="pump"), {QuotaKey.PRODUCER_BYTE_RATE: 1000}),
    )


def test_file_path_may_be_a_string(tmp_path: Path) -> None:
    assert load_config(str(write(tmp_path, FULL_FILE))).broker_port_base == 9100


def test_flags_only() -> None:
    config = load_config(
        overrides={
            "listen": "127.0.0.1:9092",
            "upstream.bootstrap": ["h:1", "h:2"],
            "advertised_host": "x",
            "broker_port_base": 9100,
            "metrics.listen": "127.0.0.1:9404",
            "log.level": "warning",
        }
    )
    assert config.listen == HostPort("127.0.0.1", 9092)
    assert config.upstream_bootstrap == (HostPort("h", 1), HostPort("h", 2))
    assert config.advertised_host == "x"
    assert config.broker_port_base == 9100
    assert config.metrics_listen == HostPort("127.0.0.1", 9404)
    assert config.log.level == "warning"


def test_flags_override_the_file_and_leave_the_rest(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, FULL_FILE),
        {
            "listen": "127.0.0.1:7000",
            "upstream.bootstrap": "other:1",
            "log.level": "error",
            "broker_ports.5": 9400,
        },
    )
    assert config.listen == HostPort("127.0.0.1", 7000)
    assert config.upstream_bootstrap == (HostPort("other", 1),)
    assert config.log == LogConfig(level="error", format="console")
    assert dict(config.broker_ports) == {5: 9400, 6: 9301}
    assert config.advertised_host == "proxy.local"


def test_none_override_means_flag_not_given(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL_FILE), {"listen": None, "metrics.listen": None})
    assert config.listen == HostPort("127.0.0.1", 9092)
    assert config.metrics_listen == HostPort("127.0.0.1", 9404)


def test_overrides_do_not_change_the_callers_mappings() -> None:
    overrides = {"listen": "127.0.0.1:9092", "upstream": {"bootstrap": "a:1"}, "upstream.bootstrap": "b:2"}
    assert load_config(overrides=overrides).upstream_bootstrap == (HostPort("b", 2),)
    assert overrides["upstream"] == {"bootstrap": "a:1"}


def test_defaults() -> None:
    config = load_config(overrides=MINIMAL_FLAGS)
    assert config.advertised_host == "127.0.0.1"
    assert config.broker_port_base == 9093
    assert config.broker_port(0) == 9093
    assert config.broker_port(3) == 9096
    assert config.max_frame_bytes == 104857600
    assert config.idle_timeout_s == 600.0
    assert config.shutdown_timeout_s == 30.0
    assert config.metrics_listen is None
    assert config.log == LogConfig(level="info", format="json")
    assert config.quota == QuotaSettings()


def test_bootstrap_as_comma_separated_string() -> None:
    config = load_config(overrides={"listen": "127.0.0.1:9092", "upstream.bootstrap": "a:1, b:2"})
    assert config.upstream_bootstrap == (HostPort("a", 1), HostPort("b", 2))


def test_ipv6_listen_and_default_advertised_host() -> None:
    config = load_config(overrides={**MINIMAL_FLAGS, "listen": "[::1]:9092"})
    assert config.listen == HostPort("::1", 9092)
    assert config.advertised_host == "::1"


def test_wildcard_listen_with_explicit_advertised_host() -> None:
    config = load_config(overrides={**MINIMAL_FLAGS, "listen": "0.0.0.0:9092", "advertised_host": "proxy"})
    assert (config.listen.host, config.advertised_host) == ("0.0.0.0", "proxy")


def test_log_choices_are_case_insensitive() -> None:
    assert load_config(overrides={**MINIMAL_FLAGS, "log.level": "DEBUG"}).log.level == "debug"


def test_null_values_count_as_not_given(tmp_path: Path) -> None:
    path = write(
        tmp_path, "listen: '127.0.0.1:9092'\nupstream: {bootstrap: 'a:1'}\nmetrics:\nlog: {level: ~}\n"
    )
    config = load_config(path)
    assert config.metrics_listen is None
    assert config.log.level == "info"


def test_empty_file_with_flags(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, ""), MINIMAL_FLAGS).listen.port == 9092


def test_documented_example_loads_and_sets_every_key() -> None:
    config = load_config(EXAMPLE)
    assert config.listen == HostPort("127.0.0.1", 9092)
    assert config.metrics_listen is not None
    assert dict(config.broker_ports) == {1000: 9200}
    assert len(config.upstream_bootstrap) == 2


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as caught:
        load_config(missing)
    assert caught.value.key == "<file>"
    assert str(missing) in str(caught.value)
    assert "No such file" in str(caught.value)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path)
    assert caught.value.key == "<file>"


def test_yaml_syntax_error_names_path_and_parser_message(tmp_path: Path) -> None:
    path = write(tmp_path, "listen: [unclosed\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.key == "<file>"
    assert str(path) in str(caught.value)
    assert "line 2" in str(caught.value)  # the parser's own position report


def test_yaml_invalid_date_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "listen: 2024-13-01\n"))
    assert caught.value.key == "<file>"
    assert "month must be in 1..12" in str(caught.value)


def test_duplicate_key_in_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "listen: 'a:1'\nlisten: 'b:2'\n"))
    assert caught.value.key == "<file>"
    assert "duplicate key 'listen'" in str(caught.value)


def test_yaml_merge_key_may_be_overridden_without_a_duplicate_key_error(tmp_path: Path) -> None:
    path = write(tmp_path, "listen: '127.0.0.1:9092'\nupstream: {<<: {bootstrap: 'a:1'}, bootstrap: 'b:2'}\n")
    assert load_config(path).upstream_bootstrap == (HostPort("b", 2),)


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_file_must_be_a_mapping(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    assert caught.value.key == "<file>"
    assert "mapping" in caught.value.expected
