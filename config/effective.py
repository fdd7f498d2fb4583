"""The effective configuration: a validated ProxyConfig written back in the file's own shape.

Every key appears with the value Sluice uses, defaults filled in, so the result loads back to the same
configuration (`sluice check-config` prints it). Values under keys that name a credential are replaced by
`[hidden]`, as Kafka prints its password settings, before anything is shown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sluice.config.client_settings import ClientSettings, Secret
from sluice.config.identity_settings import SaslSettings, TlsSettings
from sluice.config.model import ProxyConfig
from sluice.config.quota_settings import QuotaSettings
from sluice.config.usage_settings import UsageSettings
from sluice.quota import DEFAULT, QuotaKey, QuotaWindow
from sluice.quota.broker_shield import ShieldLimits

HIDDEN = "[hidden]"
DEFAULT_NAME = "<default>"
# Key names whose values are secrets, whatever section they sit in (the proxy's own SASL password, a key
# store password, a token...). Paths to PEM files are not secrets and stay visible.
_CREDENTIAL_KEY = re.compile(
    r"(^|[_.-])(pass(word|phrase)?|secret|token|credentials?|jaas(_config)?)$", re.IGNORECASE
)


def effective_config(config: ProxyConfig, reveal: bool = False) -> dict[str, Any]:
    """The configuration as a nested mapping shaped like the YAML file (null: not set).

    Secrets (the proxy's own password) are `[hidden]` unless `reveal` is set, which only a test that loads
    the result back should do."""
    return {
        "listen": str(config.listen),
        "advertised_host": config.advertised_host,
        "broker_port_base": config.broker_port_base,
        "broker_ports": dict(config.broker_ports),
        "upstream": {
            "bootstrap": [str(server) for server in config.upstream_bootstrap],
            "max_in_flight_bytes_per_broker": config.max_in_flight_bytes_per_broker,
            "learn_limits": config.learn_broker_limits,
            "bind_address": config.upstream_bind_address,
        },
        "listen_backlog": config.listen_backlog,
        "reserved_open_files": config.reserved_open_files,
        "max_frame_bytes": config.max_frame_bytes,
        "max_buffered_request_bytes": config.max_buffered_request_bytes,
        "idle_timeout_s": config.idle_timeout_s,
        "shutdown_timeout_s": config.shutdown_timeout_s,
        "metrics": {"listen": None if config.metrics_listen is None else str(config.metrics_listen)},
        "log": {"level": config.log.level, "format": config.log.format},
        "quota": _quota(config.quota),
        "tls": _tls(config.tls),
        "sasl": _sasl(config.sasl),
        "client": _client(config.client, reveal),
        "usage": _usage(config.usage),
        "fleet": {"enabled": config.fleet.enabled, "share": sorted(key.value for key in config.fleet.share)},
        "protocol": {"unvetted_apis": config.protocol.unvetted_apis.value},
    }


def mask_credentials(tree: object) -> object:
    """A copy of `tree` with every Secret, and the value of every credential-named key, as `[hidden]`."""
    if isinstance(tree, Secret):
        return HIDDEN
    if isinstance(tree, Mapping):
        return {
            key: HIDDEN
            if isinstance(key, str) and _CREDENTIAL_KEY.search(key) and value is not None
            else mask_credentials(value)
            for key, value in tree.items()
        }
    if isinstance(tree, list | tuple):
        return [mask_credentials(item) for item in tree]
    return tree


def _window(window: QuotaWindow) -> dict[str, int]:
    return {"samples": window.num_samples, "size_seconds": window.size_s}


def _quota_value(key: QuotaKey, value: float) -> int | float:
    return int(value) if key.is_long or value.is_integer() else value


def _name(name: object) -> object:
    return DEFAULT_NAME if name is DEFAULT else name


def _quota(quota: QuotaSettings) -> dict[str, Any]:
    engine = quota.engine
    entities = []
    for rule in quota.rules:
        entry: dict[str, Any] = {}
        if rule.entity.user is not None:
            entry["user"] = _name(rule.entity.user)
        if rule.entity.client_id is not None:
            entry["client_id"] = _name(rule.entity.client_id)
        for key, value in rule.values.items():
            entry[key.value] = _quota_value(key, value)
        entities.append(entry)
    for ip_rule in quota.ip_rules:
        entities.append(
            {"ip": _name(ip_rule.ip), "connection_creation_rate": int(ip_rule.connection_creation_rate)}
        )
    principals = quota.admin_principals
    return {
        "window": _window(engine.client_window),
        "controller_window": _window(engine.controller_window),
        "legacy_windows": engine.legacy_windows,
        "sensor": {key.value: engine.sensor_kind(key).value for key in QuotaKey},
        "throttle_mode": quota.throttle_mode.value,
        "fetch_throttle": quota.fetch_throttle.value,
        "mute_scope": quota.mute_scope.value,
        "max_entities": engine.max_entities,
        "mutations": {
            "validate_only": quota.mutations.validate_only.value,
            "num_partitions": quota.mutations.num_partitions,
        },
        "entities": entities,
        "topics": None
        if quota.topics is None
        else {
            "total_bytes_per_s": int(quota.topics.total_bytes_per_s),
            "thresholds": {topic: int(rate) for topic, rate in quota.topics.thresholds.items()},
        },
        "broker_protection": _broker_protection(quota.broker_protection),
        "admin": quota.admin.value,
        "admin_principals": None
        if principals.open
        else {
            "alter": sorted(principals.alter or ()),
            "describe": sorted(principals.describe or ()),
        },
        "store": {
            "topic": quota.store.topic,
            "replication_factor": quota.store.replication_factor,
            "write_timeout_ms": quota.store.write_timeout_ms,
        },
    }


def _tls(tls: TlsSettings) -> dict[str, Any]:
    listener = tls.listener
    upstream = tls.upstream
    return {
        "listener": None
        if listener is None
        else {"cert": listener.cert, "key": listener.key, "client_ca": listener.client_ca},
        "upstream": {"enabled": False}
        if upstream is None
        else {
            "enabled": True,
            "ca": upstream.ca,
            "server_hostname": upstream.server_hostname,
            "verify": upstream.verify,
        },
        "principal_mapping_rules": list(tls.principal_mapping_rules.rules),
    }


def _usage(usage: UsageSettings) -> dict[str, Any]:
    return {
        "enabled": usage.enabled,
        "topic": usage.topic,
        "interval_ms": usage.interval_ms,
        "retention_ms": usage.retention_ms,
        "partitions": usage.partitions,
        "replication_factor": usage.replication_factor,
        "max_entities": usage.max_entities,
        "buffer_batches": usage.buffer_batches,
        "instance_id": usage.instance_id,
        "compression": usage.compression,
    }


def _sasl(sasl: SaslSettings) -> dict[str, Any]:
    return {
        "oauthbearer": {"principal_claim": sasl.oauthbearer_principal_claim},
        "required": sasl.required,
        "max_receive_bytes": sasl.max_receive_bytes,
        "unauthenticated_frame_timeout_s": sasl.unauthenticated_frame_timeout_s,
    }


def _client(client: ClientSettings, reveal: bool) -> dict[str, Any]:
    sasl = client.sasl
    return {
        "client_id": client.client_id,
        "request_timeout_s": client.request_timeout_s,
        "sasl": None
        if sasl is None
        else {
            "mechanism": sasl.mechanism,
            "username": sasl.username,
            "password": sasl.password.reveal() if reveal else HIDDEN,
        },
    }


def _broker_protection(limits: ShieldLimits | None) -> dict[str, Any] | None:
    """Only the keys that are set: an absent one reads back as absent, which `null` would not."""
    if limits is None:
        return None
    latency = limits.latency
    out: dict[str, Any] = {"trigger": "bytes_in" if latency is None else "latency"}
    if limits.bytes_in_per_s is not None:
        out["bytes_in_per_s"] = int(limits.bytes_in_per_s)
    if limits.nodes:
        out["nodes"] = {node: int(rate) for node, rate in sorted(limits.nodes.items())}
    if limits.topic_thresholds:
        out["topic_thresholds"] = {topic: int(rate) for topic, rate in limits.topic_thresholds.items()}
    if latency is not None:
        out["latency"] = {
            "produce_p99_ms": latency.produce_p99_ms,
            "release_p99_ms": latency.release_p99_ms,
            "floor_bytes_in_per_s": int(latency.floor_bytes_per_s),
        }
    return out
