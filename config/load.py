"""load_config: file, then flags on top, then every rule checked in a fixed order."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import partial
from typing import TypeVar

from sluice.config.client_section import parse_client_section
from sluice.config.errors import MISSING, ConfigError
from sluice.config.identity_section import parse_sasl_section, parse_tls_section
from sluice.config.model import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_LISTEN_BACKLOG,
    DEFAULT_MAX_BUFFERED_REQUEST_BYTES,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_RESERVED_OPEN_FILES,
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    MAX_LISTEN_BACKLOG,
    MAX_PORT,
    MAX_RESERVED_OPEN_FILES,
    HostPort,
    LogConfig,
    ProxyConfig,
)
from sluice.config.protocol_section import parse_protocol_section
from sluice.config.quota_section import parse_quota_section
from sluice.config.sources import apply_overrides, read_yaml_file
from sluice.config.usage_section import parse_fleet_section, parse_usage_section
from sluice.config.values import (
    is_ip_address,
    is_wildcard,
    parse_bool,
    parse_bootstrap,
    parse_broker_ports,
    parse_choice,
    parse_host,
    parse_host_port,
    parse_int,
    parse_number,
    parse_section,
    reject_unknown_keys,
    value_at,
)

TOP_LEVEL_KEYS = (
    "listen",
    "advertised_host",
    "broker_port_base",
    "broker_ports",
    "upstream",
    "max_frame_bytes",
    "listen_backlog",
    "reserved_open_files",
    "max_buffered_request_bytes",
    "idle_timeout_s",
    "shutdown_timeout_s",
    "metrics",
    "log",
    "quota",
    "tls",
    "sasl",
    "usage",
    "fleet",
    "client",
    "protocol",
)
# Sections whose keys we know here; broker_ports is keyed by node id, quota is checked by quota_section.
SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "upstream": ("bootstrap", "bind_address", "max_in_flight_bytes_per_broker", "learn_limits"),
    "metrics": ("listen",),
    "log": ("level", "format"),
}
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "console")
MIN_FRAME_BYTES = 1024
MAX_FRAME_BYTES = 2**31 - 1  # a Kafka frame length is an int32
# Below this an idle timeout closes a healthy client between two of its requests (1e-9 closed every
# connection at once); Kafka's own millisecond settings stop at int32 milliseconds.
MIN_IDLE_TIMEOUT_S = 0.1
MAX_TIMEOUT_S = (2**31 - 1) / 1000

T = TypeVar("T")


def load_config(
    path: str | os.PathLike[str] | None = None, overrides: Mapping[str, object] | None = None
) -> ProxyConfig:
    """Read the YAML file (if any), set the dotted-key overrides on top (flags beat the file), validate.

    Raises ConfigError for the first problem found. A key set to null (or an override set to None)
    counts as not given.
    """
    tree = read_yaml_file(path) if path is not None else {}
    if overrides:
        tree = apply_overrides(tree, overrides)
    return config_from_mapping(tree)


def config_from_mapping(tree: Mapping[object, object]) -> ProxyConfig:
    """Validate a nested mapping shaped like the YAML file and build the ProxyConfig."""
    reject_unknown_keys(tree, TOP_LEVEL_KEYS, prefix="")
    upstream = _section(tree, "upstream")
    metrics = _section(tree, "metrics")
    log = _section(tree, "log")
    # Checked with the sections, so a typo under quota is reported before a missing required key.
    quota = parse_quota_section(_get(tree, "quota"), "quota")
    tls = parse_tls_section(_get(tree, "tls"), "tls")
    sasl = parse_sasl_section(_get(tree, "sasl"), "sasl")
    usage = parse_usage_section(_get(tree, "usage"), "usage")
    fleet = parse_fleet_section(_get(tree, "fleet"), usage, "fleet")
    client = parse_client_section(_get(tree, "client"), "client")
    protocol = parse_protocol_section(_get(tree, "protocol"), "protocol")

    listen = parse_host_port(_required(tree, "listen"), "listen")
    bootstrap = parse_bootstrap(_required(upstream, "upstream.bootstrap"), "upstream.bootstrap")
    bind_address = _bind_address(upstream)
    metrics_listen = _metrics_listen(metrics, listen)
    advertised_host = _advertised_host(tree, listen)
    broker_port_base = _broker_port_base(tree, listen, metrics_listen)
    broker_ports = _broker_ports(tree, listen, metrics_listen)
    max_frame_bytes = _optional(
        tree,
        "max_frame_bytes",
        DEFAULT_MAX_FRAME_BYTES,
        partial(parse_int, low=MIN_FRAME_BYTES, high=MAX_FRAME_BYTES),
    )
    listen_backlog = _optional(
        tree, "listen_backlog", DEFAULT_LISTEN_BACKLOG, partial(parse_int, low=1, high=MAX_LISTEN_BACKLOG)
    )
    reserved_open_files = _optional(
        tree,
        "reserved_open_files",
        DEFAULT_RESERVED_OPEN_FILES,
        partial(parse_int, low=0, high=MAX_RESERVED_OPEN_FILES),
    )
    in_flight = _optional(
        upstream,
        "upstream.max_in_flight_bytes_per_broker",
        None,
        partial(parse_int, low=MIN_FRAME_BYTES, high=2**62),
    )
    learn_limits = _optional(upstream, "upstream.learn_limits", True, parse_bool)
    # Default: 256 MiB, or one whole frame when max_frame_bytes is larger.
    max_buffered = _optional(
        tree,
        "max_buffered_request_bytes",
        max(DEFAULT_MAX_BUFFERED_REQUEST_BYTES, max_frame_bytes),
        partial(parse_int, low=MIN_FRAME_BYTES, high=2**62),
    )
    if max_buffered < max_frame_bytes:
        raise ConfigError(
            "max_buffered_request_bytes",
            max_buffered,
            f"at least max_frame_bytes ({max_frame_bytes}): one whole frame must fit",
        )
    idle_timeout_s = _optional(
        tree,
        "idle_timeout_s",
        DEFAULT_IDLE_TIMEOUT_S,
        partial(parse_number, at_least=MIN_IDLE_TIMEOUT_S, at_most=MAX_TIMEOUT_S),
    )
    shutdown_timeout_s = _optional(
        tree,
        "shutdown_timeout_s",
        DEFAULT_SHUTDOWN_TIMEOUT_S,
        partial(parse_number, at_least=0, at_most=MAX_TIMEOUT_S),
    )
    log_level = _optional(log, "log.level", "info", partial(parse_choice, choices=LOG_LEVELS))
    log_format = _optional(log, "log.format", "json", partial(parse_choice, choices=LOG_FORMATS))
    return ProxyConfig(
        listen=listen,
        upstream_bootstrap=bootstrap,
        upstream_bind_address=bind_address,
        advertised_host=advertised_host,
        broker_port_base=broker_port_base,
        broker_ports=broker_ports,
        max_frame_bytes=max_frame_bytes,
        listen_backlog=listen_backlog,
        reserved_open_files=reserved_open_files,
        max_in_flight_bytes_per_broker=in_flight,
        learn_broker_limits=learn_limits,
        max_buffered_request_bytes=max_buffered,
        idle_timeout_s=idle_timeout_s,
        shutdown_timeout_s=shutdown_timeout_s,
        metrics_listen=metrics_listen,
        log=LogConfig(level=log_level, format=log_format),
        quota=quota,
        tls=tls,
        sasl=sasl,
        usage=usage,
        fleet=fleet,
        client=client,
        protocol=protocol,
    )


def _get(mapping: Mapping[object, object], key: str) -> object:
    """The value at `key` (the last part of a dotted key); null counts as not given."""
    return value_at(mapping, key.rpartition(".")[2])


def _required(mapping: Mapping[object, object], key: str) -> object:
    value = _get(mapping, key)
    if value is MISSING:
        raise ConfigError(key, MISSING, "a value: this key is required (see docs/config-example.yaml)")
    return value


def _optional(mapping: Mapping[object, object], key: str, default: T, parse: Callable[[object, str], T]) -> T:
    value = _get(mapping, key)
    return default if value is MISSING else parse(value, key)


def _section(tree: Mapping[object, object], name: str) -> Mapping[object, object]:
    return parse_section(_get(tree, name), name, SECTION_KEYS[name])


def _metrics_listen(metrics: Mapping[object, object], listen: HostPort) -> HostPort | None:
    raw = _get(metrics, "metrics.listen")
    if raw is MISSING:
        return None
    metrics_listen = parse_host_port(raw, "metrics.listen")
    if metrics_listen.port == listen.port:
        raise ConfigError("metrics.listen", raw, f"a port other than the listen port {listen.port}")
    return metrics_listen


def _bind_address(upstream: Mapping[object, object]) -> str | None:
    """The local IP address the connections to the brokers are made from (None: the kernel chooses)."""
    raw = _get(upstream, "upstream.bind_address")
    if raw is MISSING:
        return None
    host = raw.strip().removeprefix("[").removesuffix("]") if isinstance(raw, str) else ""
    if not is_ip_address(host) or is_wildcard(host):
        raise ConfigError("upstream.bind_address", raw, "an IP address of this machine (no name, no port)")
    return host


def _advertised_host(tree: Mapping[object, object], listen: HostPort) -> str:
    raw = _get(tree, "advertised_host")
    if raw is MISSING:
        if is_wildcard(listen.host):
            raise ConfigError(
                "advertised_host",
                MISSING,
                f"a host clients can reach: required because listen binds the wildcard address "
                f"{listen.host}, which clients cannot connect to",
            )
        return listen.host
    host = parse_host(raw, "advertised_host")
    if is_wildcard(host):
        raise ConfigError("advertised_host", raw, "a host clients can connect to, not a wildcard address")
    return host


def _broker_port_base(tree: Mapping[object, object], listen: HostPort, metrics: HostPort | None) -> int:
    """Node N gets port base + N; the default base is the listen port + 1."""
    raw = _get(tree, "broker_port_base")
    if raw is MISSING:
        if listen.port == MAX_PORT:
            raise ConfigError(
                "broker_port_base", MISSING, f"a value: the default, listen port + 1, is above {MAX_PORT}"
            )
        return listen.port + 1
    base = parse_int(raw, "broker_port_base", 1, MAX_PORT)
    # Only node 0 is checked: later ids are known at run time, where ProxyConfig.broker_port checks them.
    for port, name in ((listen.port, "listen"), (metrics.port if metrics else None, "metrics")):
        if base == port:
            raise ConfigError(
                "broker_port_base", raw, f"a port other than the {name} port {port} (node 0 would use it)"
            )
    return base


def _broker_ports(
    tree: Mapping[object, object], listen: HostPort, metrics: HostPort | None
) -> dict[int, int]:
    raw = _get(tree, "broker_ports")
    if raw is MISSING:
        return {}
    ports = parse_broker_ports(raw, "broker_ports")
    for node, port in ports.items():
        for taken, name in ((listen.port, "listen"), (metrics.port if metrics else None, "metrics")):
            if port == taken:
                raise ConfigError(f"broker_ports.{node}", port, f"a port other than the {name} port {taken}")
    return ports
