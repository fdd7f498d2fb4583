"""Start-up checks that need the machine's view of names: the listen hosts resolve to an address of this
machine, the upstream bootstrap servers resolve, none of them is Sluice itself, and `upstream.bind_address`
is an address of this machine.

They run once, when the proxy starts (`sluice run`), not in `load_config`: a configuration file can be
validated on a machine where its names do not resolve. An upstream pointing at Sluice's own listener
made one client connection loop back through the proxy until file descriptors ran out (~10,000
self-connections in 0.5 s); it is refused with exit 2 like any other configuration error.

Upstream names follow Kafka's Java client (`ClientUtils.parseAndValidateAddresses`): a bootstrap server
whose name does not resolve is reported and skipped for now (each connection resolves the names again,
so it is used once it resolves), but a list of which none resolves is refused, as the Java client refuses
to start with "No resolvable bootstrap urls".
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable

from sluice.config.errors import ConfigError
from sluice.config.model import HostPort, ProxyConfig

Resolve = Callable[[str], list[str]]  # host -> its IP addresses; raises OSError when it does not resolve
IsLocal = Callable[[str], bool]  # is this IP address one of this machine's?


def resolve_addresses(host: str) -> list[str]:
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    # Strip an IPv6 scope ("fe80::1%eth0"): the address alone is what a listener is bound to.
    return sorted({str(info[4][0]).split("%")[0] for info in infos})


def is_local_address(ip: str) -> bool:
    """True when a socket can bind `ip`: the kernel's own answer to "is this address mine"."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((ip, 0))
    except OSError:
        return False
    return True


def check_addresses(
    config: ProxyConfig, resolve: Resolve = resolve_addresses, is_local: IsLocal = is_local_address
) -> list[str]:
    """Raise ConfigError for a listen host that does not resolve to an address of this machine, an upstream
    list of which no server resolves, an upstream that is Sluice itself, or a bind address that is not this
    machine's. Returns the keys of the upstream servers that do not resolve now (to be logged: they are
    tried again on every connection)."""
    bind = config.upstream_bind_address
    if bind is not None and not is_local(bind):
        raise ConfigError(
            "upstream.bind_address", bind, "an IP address of this machine: no socket here can bind it"
        )
    listen_ips = _resolve_listen(config.listen, "listen", resolve, is_local)
    own: dict[int, tuple[str, list[str]]] = {
        config.listen.port: ("bootstrap listener", listen_ips),
        config.broker_port_base: ("broker listener for node 0 (broker_port_base)", listen_ips),
    }
    for node_id, port in config.broker_ports.items():
        own[port] = (f"broker listener for node {node_id} (broker_ports.{node_id})", listen_ips)
    if config.metrics_listen is not None:
        metrics_ips = _resolve_listen(config.metrics_listen, "metrics.listen", resolve, is_local)
        own[config.metrics_listen.port] = ("metrics endpoint", metrics_ips)
    unresolved: list[str] = []
    for index, upstream in enumerate(config.upstream_bootstrap):
        try:
            upstream_ips = resolve(upstream.host)
        except OSError:
            unresolved.append(f"upstream.bootstrap[{index}]")
            continue
        found = own.get(upstream.port)
        if found is None:
            continue
        what, bound_ips = found
        for ip in upstream_ips:
            if _bound_by(ip, bound_ips, is_local):
                raise ConfigError(
                    f"upstream.bootstrap[{index}]",
                    str(upstream),
                    f"an address of the Kafka cluster, not Sluice's own {what} ({ip} port {upstream.port}): "
                    "every client connection would loop back into Sluice",
                )
    if len(unresolved) == len(config.upstream_bootstrap):
        servers = ", ".join(str(server) for server in config.upstream_bootstrap)
        raise ConfigError(
            "upstream.bootstrap",
            servers,
            "at least one server whose name resolves (none does; Kafka's clients refuse to start alike)",
        )
    return unresolved


def _resolve_listen(listen: HostPort, key: str, resolve: Resolve, is_local: IsLocal) -> list[str]:
    try:
        ips = resolve(listen.host)
    except OSError as exc:
        raise ConfigError(key, str(listen), f"a host this machine can resolve and bind ({exc})") from None
    if not ips:
        raise ConfigError(key, str(listen), "a host this machine can resolve and bind (no address)")
    # The wildcard is every address; otherwise one of them must be this machine's, or bind() fails.
    if not any(ipaddress.ip_address(ip).is_unspecified or is_local(ip) for ip in ips):
        raise ConfigError(
            key, str(listen), f"an address of this machine to bind ({listen.host} is {', '.join(ips)})"
        )
    return ips


def _bound_by(ip: str, bound_ips: list[str], is_local: IsLocal) -> bool:
    """Does a listener bound to `bound_ips` accept connections made to `ip`?"""
    if ip in bound_ips:
        return True
    address = ipaddress.ip_address(ip)
    for bound in bound_ips:
        wildcard = ipaddress.ip_address(bound)
        # 0.0.0.0 takes every local IPv4 address; :: every local address (Linux binds it dual-stack).
        if wildcard.is_unspecified and (wildcard.version == 6 or address.version == 4) and is_local(ip):
            return True
    return False
