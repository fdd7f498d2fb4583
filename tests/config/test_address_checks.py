"""The start-up address checks: listen hosts resolve, no upstream bootstrap server is Sluice itself, and the
upstream bind address is this machine's."""

from __future__ import annotations

import pytest

from sluice.config.address_checks import check_addresses, is_local_address, resolve_addresses
from sluice.config.errors import ConfigError
from sluice.config.load import load_config

NAMES = {
    "localhost": ["127.0.0.1", "::1"],
    "kafka-1": ["10.0.0.5"],
    "me": ["192.0.2.7"],  # this machine's own address, by another name
}
LOCAL = {"127.0.0.1", "::1", "192.0.2.7"}


def resolve(host: str) -> list[str]:
    if host in NAMES:
        return NAMES[host]
    if host[0].isdigit() or ":" in host:
        return [host]
    raise OSError(f"{host} does not resolve")


def config(listen: str, upstream: str, **extra: object):
    return load_config(overrides={"listen": listen, "upstream.bootstrap": upstream, **extra})


def check(cfg) -> list[str]:
    return check_addresses(cfg, resolve, LOCAL.__contains__)


@pytest.mark.parametrize(
    ("listen", "upstream", "extra", "what"),
    [
        ("127.0.0.1:9092", "127.0.0.1:9092", {}, "bootstrap listener"),
        ("127.0.0.1:9092", "localhost:9092", {}, "bootstrap listener"),
        ("0.0.0.0:9092", "me:9092", {"advertised_host": "me"}, "bootstrap listener"),
        ("[::]:9092", "127.0.0.1:9092", {"advertised_host": "me"}, "bootstrap listener"),
        ("127.0.0.1:9092", "localhost:9093", {}, "node 0 (broker_port_base)"),
        ("127.0.0.1:9092", "127.0.0.1:9300", {"broker_ports": {4: 9300}}, "node 4 (broker_ports.4)"),
        ("127.0.0.1:9092", "127.0.0.1:9404", {"metrics.listen": "127.0.0.1:9404"}, "metrics endpoint"),
    ],
)
def test_an_upstream_that_is_sluice_itself_is_refused(
    listen: str, upstream: str, extra: dict, what: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        check(config(listen, f"kafka-1:9092,{upstream}", **extra))
    assert raised.value.key == "upstream.bootstrap[1]"
    assert what in raised.value.expected
    assert "loop back" in raised.value.expected


@pytest.mark.parametrize(
    ("listen", "upstream"),
    [
        ("127.0.0.1:9092", "kafka-1:9092"),  # same port, another machine
        ("127.0.0.1:9092", "127.0.0.2:9092"),  # a loopback address the listener is not bound to
        ("0.0.0.0:9092", "10.9.9.9:9092"),  # the wildcard, but not an address of this machine
        ("127.0.0.1:9092", "127.0.0.1:9095"),  # this machine, a port Sluice does not hold
    ],
)
def test_a_real_cluster_passes(listen: str, upstream: str) -> None:
    assert check(config(listen, upstream, advertised_host="me")) == []


def test_an_upstream_server_that_does_not_resolve_is_reported_when_another_does() -> None:
    # Kafka's Java client skips (and logs) a bootstrap name that does not resolve, and uses the others.
    assert check(config("127.0.0.1:9092", "kafka-1:9092,nowhere:9092")) == ["upstream.bootstrap[1]"]


def test_upstream_servers_of_which_none_resolves_are_refused() -> None:
    # ... and refuses to start when none does ("No resolvable bootstrap urls given in bootstrap.servers").
    with pytest.raises(ConfigError) as raised:
        check(config("127.0.0.1:9092", "nowhere:9092,nor-here:9092"))
    assert raised.value.key == "upstream.bootstrap"
    assert "none does" in raised.value.expected


@pytest.mark.parametrize(
    ("extra", "key", "expected"),
    [
        ({"listen": "nowhere:9092"}, "listen", "resolve"),
        ({"metrics.listen": "nowhere:9404"}, "metrics.listen", "resolve"),
        ({"listen": "10.1.2.3:9092", "advertised_host": "me"}, "listen", "an address of this machine"),
        # Resolves, but to another machine.
        ({"listen": "kafka-1:9092", "advertised_host": "me"}, "listen", "an address of this machine"),
        ({"metrics.listen": "10.1.2.3:9404"}, "metrics.listen", "an address of this machine"),
    ],
)
def test_a_listen_host_that_is_not_this_machines_is_refused(extra: dict, key: str, expected: str) -> None:
    cfg = load_config(overrides={"listen": "127.0.0.1:9092", "upstream.bootstrap": "kafka-1:9092", **extra})
    with pytest.raises(ConfigError) as raised:
        check(cfg)
    assert raised.value.key == key
    assert expected in raised.value.expected


def test_the_real_resolver_and_local_check() -> None:
    assert "127.0.0.1" in resolve_addresses("localhost")
    assert is_local_address("127.0.0.1")
    assert not is_local_address("192.0.2.1")  # TEST-NET-1: never assigned to a machine
    with pytest.raises(OSError):
        resolve_addresses("no-such-host.invalid")


def test_an_upstream_bind_address_that_is_not_this_machines_is_refused() -> None:
    check(config("127.0.0.1:9092", "kafka-1:9092", **{"upstream.bind_address": "192.0.2.7"}))
    with pytest.raises(ConfigError) as raised:
        check(config("127.0.0.1:9092", "kafka-1:9092", **{"upstream.bind_address": "198.51.100.1"}))
    assert raised.value.key == "upstream.bind_address"
    assert "an IP address of this machine" in raised.value.expected


def test_the_kernel_says_which_bind_addresses_are_this_machines() -> None:
    assert is_local_address("127.0.0.2")  # all of 127/8 is loopback on Linux
    assert not is_local_address("198.51.100.1")  # TEST-NET-2: on no machine
