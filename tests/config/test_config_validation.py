"""Every validation rule: the first problem raises ConfigError naming the key, the value and the rule."""

from pathlib import Path

import pytest

from sluice.config import ConfigError, load_config

BASE = {"listen": "127.0.0.1:9092", "upstream.bootstrap": ["kafka:19092"]}


def error_for(overrides: dict[object, object], path: Path | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(path, {**BASE, **overrides})  # type: ignore[dict-item]
    return caught.value


def check(error: ConfigError, key: str, fragment: str) -> None:
    assert error.key == key
    assert str(error).startswith(f"config error: {key}=")
    assert fragment in str(error)


@pytest.mark.parametrize(
    ("overrides", "key", "fragment"),
    [
        ({"lisen": "x:1"}, "lisen", "did you mean 'listen'?"),
        (
            {"upstream.bootstap": "a:1"},
            "upstream.bootstap",
            "known keys under upstream: bootstrap, bind_address",
        ),
        ({"log.levle": "info"}, "log.levle", "known keys under log: level, format"),
        ({"metrics.port": 9404}, "metrics.port", "known keys under metrics: listen"),
        ({"zzz": 1}, "zzz", "known keys at the top level: listen, advertised_host, broker_port_base"),
    ],
)
def test_unknown_keys_are_named_with_the_known_keys_at_that_level(
    overrides: dict[object, object], key: str, fragment: str
) -> None:
    check(error_for(overrides), key, fragment)


def test_unknown_key_is_reported_before_a_missing_required_key() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides={"lisen": "127.0.0.1:9092"})
    check(caught.value, "lisen", "unknown")


def test_unknown_key_in_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("upstream:\n  bootstrap: ['a:1']\n  boostrap: ['b:2']\n")
    check(error_for({}, path), "upstream.boostrap", "'boostrap' is unknown")


@pytest.mark.parametrize(
    ("overrides", "key"),
    [({"log": "debug"}, "log"), ({"upstream": ["a:1"]}, "upstream"), ({"metrics": 9404}, "metrics")],
)
def test_sections_must_be_mappings(overrides: dict[object, object], key: str) -> None:
    check(error_for(overrides), key, "a mapping")


def test_quota_section_must_be_a_mapping() -> None:
    check(error_for({"quota": [1, 2]}), "quota", "a mapping")


def test_listen_is_required() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides={"upstream.bootstrap": "a:1"})
    check(caught.value, "listen", "listen=<missing>: expected a value")


def test_bootstrap_is_required() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides={"listen": "127.0.0.1:9092"})
    check(caught.value, "upstream.bootstrap", "<missing>")


@pytest.mark.parametrize("value", [[], "", (), 5, {"a": 1}])
def test_bootstrap_must_be_a_non_empty_list_or_string(value: object) -> None:
    check(error_for({"upstream.bootstrap": value}), "upstream.bootstrap", "non-empty list of host:port")


@pytest.mark.parametrize(
    ("value", "key"),
    [
        (["a:1", "b"], "upstream.bootstrap[1]"),
        ("a:1,", "upstream.bootstrap[1]"),
        ([5], "upstream.bootstrap[0]"),
    ],
)
def test_bootstrap_entries_are_host_port(value: object, key: str) -> None:
    check(error_for({"upstream.bootstrap": value}), key, "host:port")


BAD_HOST_PORTS = [
    "9092",
    ":9092",
    "host:",
    "host:0",
    "host:65536",
    "host:abc",
    "host:-1",
    "host:²",
    "h:1:2",
    "ho st:9092",
    "[::1]",
    "[::1]9092",
    "[nothost]:9092",
    "",
    " ",
    9092,
    True,
    ["h:1"],
]


@pytest.mark.parametrize("value", BAD_HOST_PORTS)
def test_listen_must_be_host_port(value: object) -> None:
    check(
        error_for({"listen": value}),
        "listen",
        "expected host:port with a non-empty host and a port in 1..65535",
    )


@pytest.mark.parametrize("value", BAD_HOST_PORTS)
def test_metrics_listen_must_be_host_port(value: object) -> None:
    check(error_for({"metrics.listen": value}), "metrics.listen", "host:port")


def test_unbracketed_ipv6_gets_a_hint() -> None:
    check(error_for({"listen": "::1:9092"}), "listen", "put IPv6 addresses in brackets")


def test_metrics_port_must_differ_from_listen_port() -> None:
    check(
        error_for({"metrics.listen": "127.0.0.1:9092"}), "metrics.listen", "other than the listen port 9092"
    )


@pytest.mark.parametrize("listen", ["0.0.0.0:9092", "[::]:9092"])
def test_wildcard_listen_requires_advertised_host(listen: str) -> None:
    check(error_for({"listen": listen}), "advertised_host", "clients cannot connect to")


@pytest.mark.parametrize("value", ["0.0.0.0", "::", "[::]"])
def test_advertised_host_must_not_be_a_wildcard(value: str) -> None:
    check(error_for({"advertised_host": value}), "advertised_host", "not a wildcard")


@pytest.mark.parametrize("value", ["", "a b", "host:9092", 5, ["h"]])
def test_advertised_host_must_be_a_host(value: object) -> None:
    check(error_for({"advertised_host": value}), "advertised_host", "a host name or IP address")


@pytest.mark.parametrize("value", [0, 65536, -1, True, "9100", 9100.0])
def test_broker_port_base_must_be_a_port(value: object) -> None:
    check(error_for({"broker_port_base": value}), "broker_port_base", "an integer in 1..65535")


def test_broker_port_base_must_not_be_the_listen_port() -> None:
    check(error_for({"broker_port_base": 9092}), "broker_port_base", "other than the listen port 9092")


def test_broker_port_base_must_not_be_the_metrics_port() -> None:
    error = error_for({"broker_port_base": 9404, "metrics.listen": "127.0.0.1:9404"})
    check(error, "broker_port_base", "other than the metrics port 9404")


def test_default_broker_port_base_must_fit() -> None:
    check(error_for({"listen": "127.0.0.1:65535"}), "broker_port_base", "listen port + 1, is above 65535")


@pytest.mark.parametrize(
    ("value", "key", "fragment"),
    [
        ([9200], "broker_ports", "a mapping of broker node id to port"),
        ({-1: 9200}, "broker_ports.-1", "broker node id"),
        ({"x": 9200}, "broker_ports.x", "broker node id"),
        ({True: 9200}, "broker_ports.True", "broker node id"),
        ({2**31: 9200}, f"broker_ports.{2**31}", "broker node id"),
        ({1: 0}, "broker_ports.1", "an integer in 1..65535"),
        ({1: 65536}, "broker_ports.1", "an integer in 1..65535"),
        ({1: True}, "broker_ports.1", "an integer in 1..65535"),
        ({1: "9200"}, "broker_ports.1", "an integer in 1..65535"),
        ({1: 9092}, "broker_ports.1", "other than the listen port"),
        ({1: 9404}, "broker_ports.1", "other than the metrics port"),
        ({1: 9200, 2: 9200}, "broker_ports.2", "no other broker_ports entry uses"),
    ],
)
def test_broker_ports_rules(value: object, key: str, fragment: str) -> None:
    check(error_for({"broker_ports": value, "metrics.listen": "127.0.0.1:9404"}), key, fragment)


def test_broker_ports_same_node_as_int_and_string_key(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("broker_ports:\n  3: 9200\n  '3': 9201\n")
    check(error_for({}, path), "broker_ports.3", "node 3 is listed twice")


@pytest.mark.parametrize("value", [1023, 2**31, 0, -1, True, 2048.0, "2048"])
def test_max_frame_bytes_range(value: object) -> None:
    check(error_for({"max_frame_bytes": value}), "max_frame_bytes", "an integer in 1024..2147483647")


@pytest.mark.parametrize("value", [1024, 2**31 - 1])
def test_max_frame_bytes_bounds_are_accepted(value: int) -> None:
    assert load_config(overrides={**BASE, "max_frame_bytes": value}).max_frame_bytes == value


@pytest.mark.parametrize(
    "value", [0, -1, 0.0, 1e-9, 0.099, float("nan"), float("inf"), True, "5", 10**400, 2147483.648]
)
def test_idle_timeout_must_be_a_workable_number(value: object) -> None:
    # 1e-9 (issue 14 item 7) closed every connection the moment it opened.
    check(error_for({"idle_timeout_s": value}), "idle_timeout_s", "a finite number in 0.1..2147483.647")


@pytest.mark.parametrize("value", [0.1, 2147483.647])
def test_idle_timeout_bounds_are_accepted(value: float) -> None:
    assert load_config(overrides={**BASE, "idle_timeout_s": value}).idle_timeout_s == value


@pytest.mark.parametrize("value", [-0.1, -1, float("nan"), float("-inf"), False, "0", 1e300])
def test_shutdown_timeout_must_be_a_non_negative_number(value: object) -> None:
    check(error_for({"shutdown_timeout_s": value}), "shutdown_timeout_s", "a finite number in 0..2147483.647")


def test_timeouts_accept_ints_and_zero_grace() -> None:
    config = load_config(overrides={**BASE, "idle_timeout_s": 5, "shutdown_timeout_s": 0})
    assert (config.idle_timeout_s, config.shutdown_timeout_s) == (5.0, 0.0)
    assert isinstance(config.idle_timeout_s, float)


@pytest.mark.parametrize("value", ["verbose", "", 1, True, ["info"]])
def test_log_level_choices(value: object) -> None:
    check(error_for({"log.level": value}), "log.level", "one of debug, info, warning, error")


@pytest.mark.parametrize("value", ["text", 0])
def test_log_format_choices(value: object) -> None:
    check(error_for({"log.format": value}), "log.format", "one of json, console")


def test_yaml_boolean_is_not_a_port(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("broker_port_base: true\n")
    check(error_for({}, path), "broker_port_base", "broker_port_base=True")


@pytest.mark.parametrize("key", ["", "a..b", ".listen", 5])
def test_override_keys_must_be_dotted_names(key: object) -> None:
    check(error_for({key: "x"}), str(key), "a dotted key")


def test_override_cannot_set_inside_a_non_mapping(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("log: loud\n")
    check(error_for({"log.level": "debug"}, path), "log", "a mapping, to set log.level inside it")


def test_first_problem_in_stable_order_is_reported() -> None:
    # listen is checked before log.level, whatever the order the keys were given in.
    error = error_for({"log.level": "loud", "listen": "nope"})
    assert error.key == "listen"


@pytest.mark.parametrize("value", [0, -1, 65536, True, "4096", 10.5])
def test_listen_backlog_range(value: object) -> None:
    check(error_for({"listen_backlog": value}), "listen_backlog", "an integer in 1..65535")


def test_listen_backlog_default_and_value() -> None:
    assert load_config(overrides=BASE).listen_backlog == 4096
    assert load_config(overrides={**BASE, "listen_backlog": 50}).listen_backlog == 50


def test_protocol_unvetted_apis_is_hide_by_default_pass_on_request_and_nothing_else() -> None:
    from sluice.config.protocol_settings import UnvettedApis

    assert load_config(None, dict(BASE)).protocol.unvetted_apis is UnvettedApis.HIDE
    assert (
        load_config(None, {**BASE, "protocol.unvetted_apis": "PASS"}).protocol.unvetted_apis
        is UnvettedApis.PASS
    )
    check(error_for({"protocol.unvetted_apis": "allow"}), "protocol.unvetted_apis", "one of hide, pass")
    check(
        error_for({"protocol.unvetted": "pass"}),
        "protocol.unvetted",
        "known keys under protocol: unvetted_apis",
    )
    check(error_for({"protocol": "hide"}), "protocol", "a mapping")


@pytest.mark.parametrize("value", [-1, 1_000_001, True, "128", 1.5])
def test_reserved_open_files_range(value: object) -> None:
    check(error_for({"reserved_open_files": value}), "reserved_open_files", "an integer in 0..1000000")


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("upstream.max_in_flight_bytes_per_broker", 1023, "an integer in 1024.."),
        ("upstream.max_in_flight_bytes_per_broker", "256MiB", "an integer in 1024.."),
        ("upstream.learn_limits", "maybe", "true or false"),
    ],
)
def test_broker_limits_keys_are_checked(key: str, value: object, fragment: str) -> None:
    check(error_for({key: value}), key, fragment)


def test_broker_limits_defaults_and_values() -> None:
    config = load_config(overrides=BASE)
    assert (
        config.max_in_flight_bytes_per_broker,
        config.learn_broker_limits,
        config.reserved_open_files,
    ) == (
        None,
        True,
        128,
    )
    config = load_config(
        overrides={
            **BASE,
            "upstream.max_in_flight_bytes_per_broker": 4096,
            "upstream.learn_limits": False,
            "reserved_open_files": 0,
        }
    )
    assert (
        config.max_in_flight_bytes_per_broker,
        config.learn_broker_limits,
        config.reserved_open_files,
    ) == (
        4096,
        False,
        0,
    )


def test_upstream_bind_address_is_an_ip_address_without_a_port_or_none() -> None:
    assert load_config(None, dict(BASE)).upstream_bind_address is None
    assert (
        load_config(None, {**BASE, "upstream.bind_address": "127.0.0.2"}).upstream_bind_address == "127.0.0.2"
    )
    assert load_config(None, {**BASE, "upstream.bind_address": "[::1]"}).upstream_bind_address == "::1"
    for bad in ("kafka-proxy.example", "127.0.0.2:0", "0.0.0.0", "::", 7):
        check(
            error_for({"upstream.bind_address": bad}),
            "upstream.bind_address",
            "an IP address of this machine",
        )
