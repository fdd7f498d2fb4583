"""The parts of the `quota` section added for quota admin and topic quotas, each checked with the key named.

* `quota.admin`: `proxy` (default) or `broker`;
* `quota.admin_principals`: `{alter: [User:...], describe: [User:...]}`;
* `quota.store`: `{topic, replication_factor, write_timeout_ms}`;
* `quota.topics`: `{total_bytes_per_s, thresholds: {topic: bytes_per_s}}`;
* an `ip` entry of `quota.entities`: `{ip: <address or <default>>, connection_creation_rate: N}`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from sluice.config.errors import MISSING, ConfigError
from sluice.config.quota_settings import (
    AdminMode,
    AdminPrincipals,
    IpQuotaRule,
    QuotaStoreSettings,
    TopicQuotaSettings,
)
from sluice.config.values import parse_choice, parse_int, parse_section, reject_unknown_keys, value_at
from sluice.quota import DEFAULT, QuotaConfigError
from sluice.quota.connection_rate import canonical_ip
from sluice.quota.entities import DefaultEntity

PRINCIPAL_KEYS = ("alter", "describe")
STORE_KEYS = ("topic", "replication_factor", "write_timeout_ms")
TOPICS_KEYS = ("total_bytes_per_s", "thresholds")
IP_ENTITY_KEYS = ("ip", "connection_creation_rate")
INT_MAX = 2**31 - 1
DEFAULT_NAME = "<default>"
# Kafka's legal topic names (org.apache.kafka.common.internals.Topic).
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_PRINCIPAL = re.compile(r"User:.+")


def parse_admin_mode(raw: object, key: str) -> AdminMode:
    if raw is MISSING:
        return AdminMode.PROXY
    return AdminMode(parse_choice(raw, key, [mode.value for mode in AdminMode]))


def parse_admin_principals(raw: object, key: str) -> AdminPrincipals:
    """Absent: open. Given: each list missing is empty (nobody), `User:*` is everyone."""
    if raw is MISSING:
        return AdminPrincipals()
    section = parse_section(raw, key, PRINCIPAL_KEYS)
    lists = [_principals(value_at(section, name), f"{key}.{name}") for name in PRINCIPAL_KEYS]
    return AdminPrincipals(alter=lists[0], describe=lists[1])


def _principals(raw: object, key: str) -> frozenset[str]:
    if raw is MISSING:
        return frozenset()
    expected = 'a list of principals such as ["User:alice", "User:CN=admin,O=example"], or ["User:*"]'
    if not isinstance(raw, list | tuple):
        raise ConfigError(key, raw, expected)
    found = set()
    for index, entry in enumerate(raw):
        if not isinstance(entry, str) or _PRINCIPAL.fullmatch(entry) is None:
            raise ConfigError(f"{key}[{index}]", entry, f"'User:<name>' as in Kafka's ACLs; {expected}")
        found.add(entry)
    return frozenset(found)


def parse_store(raw: object, key: str) -> QuotaStoreSettings:
    section = parse_section(raw, key, STORE_KEYS)
    default = QuotaStoreSettings()
    topic = value_at(section, "topic")
    if topic is MISSING:
        topic = default.topic
    elif not isinstance(topic, str) or TOPIC_NAME.fullmatch(topic) is None or topic in (".", ".."):
        raise ConfigError(f"{key}.topic", topic, "a Kafka topic name: 1-249 of a-z A-Z 0-9 . _ -")
    replication = value_at(section, "replication_factor")
    timeout = value_at(section, "write_timeout_ms")
    return QuotaStoreSettings(
        topic=topic,
        replication_factor=default.replication_factor
        if replication is MISSING
        else _replication(replication, f"{key}.replication_factor"),
        write_timeout_ms=default.write_timeout_ms
        if timeout is MISSING
        else parse_int(timeout, f"{key}.write_timeout_ms", 1, INT_MAX),
    )


def _replication(raw: object, key: str) -> int:
    if raw == -1 and not isinstance(raw, bool):
        return -1
    return parse_int(raw, key, 1, 32767)


def parse_topics(raw: object, key: str) -> TopicQuotaSettings | None:
    if raw is MISSING:
        return None
    section = parse_section(raw, key, TOPICS_KEYS)
    total_raw = value_at(section, "total_bytes_per_s")
    if total_raw is MISSING:
        raise ConfigError(
            f"{key}.total_bytes_per_s", MISSING, "a byte rate: required when quota.topics is set"
        )
    total = parse_rate(total_raw, f"{key}.total_bytes_per_s")
    thresholds_raw = value_at(section, "thresholds")
    thresholds: dict[str, float] = {}
    if thresholds_raw is not MISSING:
        if not isinstance(thresholds_raw, Mapping):
            raise ConfigError(
                f"{key}.thresholds", thresholds_raw, "a mapping of topic name to bytes per second"
            )
        for topic, value in thresholds_raw.items():
            entry_key = f"{key}.thresholds.{topic}"
            if not isinstance(topic, str) or TOPIC_NAME.fullmatch(topic) is None:
                raise ConfigError(entry_key, topic, "a Kafka topic name as the key")
            thresholds[topic] = parse_rate(value, entry_key)
    explicit = sum(thresholds.values())
    if explicit > total:
        raise ConfigError(
            f"{key}.thresholds",
            thresholds_raw,
            f"explicit thresholds summing to <= total_bytes_per_s {total:g} (they sum to {explicit:g})",
        )
    return TopicQuotaSettings(total_bytes_per_s=total, thresholds=thresholds)


def parse_rate(raw: object, key: str) -> float:
    expected = "a whole number of bytes per second > 0"
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ConfigError(key, raw, expected)
    if not math.isfinite(raw) or raw <= 0 or raw != int(raw):
        raise ConfigError(key, raw, expected)
    return float(raw)


def parse_ip_rule(entry: Mapping[object, object], key: str) -> IpQuotaRule:
    """An `ip` entry: an address or <default>, and connection_creation_rate (a whole number > 0)."""
    reject_unknown_keys(entry, IP_ENTITY_KEYS, prefix=f"{key}.")
    raw_ip = value_at(entry, "ip")
    ip: str | DefaultEntity
    if raw_ip == DEFAULT_NAME:
        ip = DEFAULT
    else:
        try:
            ip = canonical_ip(raw_ip)
        except QuotaConfigError:
            raise ConfigError(
                f"{key}.ip", raw_ip, "an IP address (IPv4 or IPv6; host names are not resolved) or <default>"
            ) from None
    rate = value_at(entry, "connection_creation_rate")
    rate_key = f"{key}.connection_creation_rate"
    if rate is MISSING:
        raise ConfigError(rate_key, MISSING, "new connections per second: required for an ip entity")
    if isinstance(rate, bool) or not isinstance(rate, int) or not 1 <= rate <= INT_MAX:
        raise ConfigError(rate_key, rate, f"a whole number in 1..{INT_MAX} (an INT in Kafka, no fractions)")
    return IpQuotaRule(ip=ip, connection_creation_rate=float(rate))
