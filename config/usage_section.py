"""The `usage` and `fleet` sections: usage records published to Kafka, and one quota shared by a fleet.

usage:                      # docs/usage-records.md
  enabled: false            # publish a batch of usage records once per interval
  topic: _sluice_usage      # created if missing, with the retention below
  interval_ms: 1000         # the publish interval (also how often a fleet hears of each instance)
  retention_ms: 604800000   # retention.ms of the topic Sluice creates (7 days)
  partitions: 1             # of the topic Sluice creates
  replication_factor: -1    # of the topic Sluice creates; -1 = the brokers' default
  max_entities: 10000       # entities per interval; the rest are counted, not published
  buffer_batches: 300       # batches kept while Kafka cannot take them; older ones are dropped, counted
  instance_id: null         # default: <advertised host>:<listen port>/<pid>
fleet:                      # docs/fleet.md
  enabled: false            # charge other instances' usage to this one's quotas (needs usage.enabled)
  share: [producer_byte_rate, consumer_byte_rate, controller_mutation_rate]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import TypeVar

from sluice.config.errors import MISSING, ConfigError
from sluice.config.usage_settings import FleetSettings, UsageSettings
from sluice.config.values import parse_bool, parse_choice, parse_int, parse_section, value_at
from sluice.quota import QuotaKey
from sluice.quota.fleet import DEFAULT_SHARED_KEYS

USAGE_KEYS = (
    "enabled",
    "topic",
    "interval_ms",
    "retention_ms",
    "partitions",
    "replication_factor",
    "max_entities",
    "buffer_batches",
    "instance_id",
    "compression",
)
FLEET_KEYS = ("enabled", "share")
COMPRESSIONS = ("gzip", "none")
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# Kafka's own rule for topic names (Topic.validate): at most 249 of these characters, not "." or "..".
_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_TOPIC_MAX = 249

_T = TypeVar("_T")


def _topic(raw: object, key: str) -> str:
    expected = f"a Kafka topic name: 1..{_TOPIC_MAX} of a-z A-Z 0-9 . _ -, not '.' or '..'"
    if not isinstance(raw, str) or not 0 < len(raw) <= _TOPIC_MAX or raw in (".", ".."):
        raise ConfigError(key, raw, expected)
    if not set(raw) <= _TOPIC_CHARS:
        raise ConfigError(key, raw, expected)
    return raw


def _instance_id(raw: object, key: str) -> str:
    if isinstance(raw, str) and raw.strip() and len(raw) <= 255:
        return raw.strip()
    raise ConfigError(key, raw, "a non-empty name of at most 255 characters, unique in the fleet")


def parse_usage_section(raw: object, key: str = "usage") -> UsageSettings:
    section = parse_section(raw, key, USAGE_KEYS)
    defaults = UsageSettings()

    def get(name: str, parse: Callable[[object, str], _T], default: _T) -> _T:
        value = value_at(section, name)
        return default if value is MISSING else parse(value, f"{key}.{name}")

    return UsageSettings(
        enabled=get("enabled", parse_bool, defaults.enabled),
        topic=get("topic", _topic, defaults.topic),
        # Ten intervals a second is the finest that makes sense; a minute the coarsest (docs/fleet.md).
        interval_ms=get("interval_ms", partial(parse_int, low=100, high=60_000), defaults.interval_ms),
        retention_ms=get("retention_ms", partial(parse_int, low=-1, high=INT64_MAX), defaults.retention_ms),
        partitions=get("partitions", partial(parse_int, low=1, high=INT32_MAX), defaults.partitions),
        replication_factor=_replication(value_at(section, "replication_factor"), f"{key}.replication_factor"),
        max_entities=get("max_entities", partial(parse_int, low=1, high=10_000_000), defaults.max_entities),
        buffer_batches=get(
            "buffer_batches", partial(parse_int, low=1, high=100_000), defaults.buffer_batches
        ),
        instance_id=get("instance_id", _instance_id, None),
        compression=get("compression", partial(parse_choice, choices=COMPRESSIONS), defaults.compression),
    )


def _replication(raw: object, key: str) -> int:
    if raw is MISSING:
        return -1
    value = parse_int(raw, key, -1, 32767)
    if value == 0:
        raise ConfigError(key, raw, "-1 (the brokers' default) or a replication factor of at least 1")
    return value


def parse_fleet_section(raw: object, usage: UsageSettings, key: str = "fleet") -> FleetSettings:
    section = parse_section(raw, key, FLEET_KEYS)
    enabled_raw = value_at(section, "enabled")
    enabled = False if enabled_raw is MISSING else parse_bool(enabled_raw, f"{key}.enabled")
    if enabled and not usage.enabled:
        raise ConfigError(
            f"{key}.enabled", True, "usage.enabled: true as well: a fleet shares quotas through usage records"
        )
    share_raw = value_at(section, "share")
    share = DEFAULT_SHARED_KEYS if share_raw is MISSING else _share(share_raw, f"{key}.share")
    return FleetSettings(enabled, share)


def _share(raw: object, key: str) -> frozenset[QuotaKey]:
    names = ", ".join(k.value for k in QuotaKey)
    if not isinstance(raw, list | tuple) or isinstance(raw, Mapping):
        raise ConfigError(key, raw, f"a list of quota keys ({names})")
    keys = set()
    for i, item in enumerate(raw):
        try:
            keys.add(QuotaKey(item))
        except ValueError:
            raise ConfigError(f"{key}[{i}]", item, f"one of {names}") from None
    return frozenset(keys)
