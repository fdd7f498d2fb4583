"""Turn the raw `quota:` mapping into QuotaSettings, or raise ConfigError naming the full key.

Rules are checked in a fixed order (the order of QUOTA_KEYS, then entity by entity, user before
client_id before the quota keys), so the same bad file always reports the same first problem.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from enum import StrEnum
from functools import partial
from typing import TypeVar

from sluice.config.broker_protection import parse_broker_protection
from sluice.config.errors import MISSING, ConfigError
from sluice.config.quota_admin_section import (
    parse_admin_mode,
    parse_admin_principals,
    parse_ip_rule,
    parse_store,
    parse_topics,
)
from sluice.config.quota_settings import (
    FetchThrottle,
    IpQuotaRule,
    MutationSettings,
    MuteScope,
    QuotaRule,
    QuotaSettings,
    ThrottleMode,
    ValidateOnly,
)
from sluice.config.values import (
    parse_bool,
    parse_choice,
    parse_int,
    parse_section,
    reject_unknown_keys,
    value_at,
)
from sluice.quota import DEFAULT, QuotaConfig, QuotaEntity, QuotaKey, QuotaWindow, SensorKind, sanitize_user
from sluice.quota.entities import EntityName
from sluice.quota.quota_config import DEFAULT_MAX_ENTITIES

QUOTA_KEYS = (
    "window",
    "controller_window",
    "legacy_windows",
    "sensor",
    "throttle_mode",
    "fetch_throttle",
    "mute_scope",
    "mutations",
    "max_entities",
    "entities",
    "topics",
    "broker_protection",
    "admin",
    "admin_principals",
    "store",
)
MUTATION_KEYS = ("validate_only", "num_partitions")
WINDOW_KEYS = ("samples", "size_seconds")
ENTITY_NAME_KEYS = ("user", "client_id")
QUOTA_KEY_NAMES = tuple(key.value for key in QuotaKey)
# The three quotas a scalar `quota.sensor` applies to; controller mutations are always a token bucket.
CLIENT_QUOTA_KEYS = (QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE, QuotaKey.REQUEST_PERCENTAGE)

DEFAULT_NAME = "<default>"
INT_MAX = 2**31 - 1  # Kafka's window settings are Java ints
LONG_MAX = 2**63 - 1  # and the byte rates Java longs
# Kafka's AlterClientQuotas accepts a LONG quota within this distance of a whole number (spec §7.5).
FRACTION_TOLERANCE = 1e-6
ENTITY_EXAMPLE = "{client_id: pump, producer_byte_rate: 100000}"

Choice = TypeVar("Choice", bound=StrEnum)

_window_int = partial(parse_int, low=1, high=INT_MAX)
# Kafka writes a throttle as an int32 of milliseconds (throttle_time_ms) and wraps a longer one to a
# negative number, which brokers and clients read as "no throttle". A window longer than that (samples x
# size_seconds) could owe throttles no response can carry; a mutation rate so small that one partition
# earns more than that gives a throttle that wraps at the first mutation: quotas that cannot work.
MAX_WINDOW_S = INT_MAX // 1000
MIN_MUTATION_RATE = 1000 / INT_MAX


def parse_quota_section(raw: object, key: str = "quota") -> QuotaSettings:
    """The `quota` section (MISSING or null: every default) as validated QuotaSettings."""
    if raw is MISSING or raw is None:
        return QuotaSettings()
    raw = parse_section(raw, key, QUOTA_KEYS)
    client_window = _window(value_at(raw, "window"), f"{key}.window")
    controller_window = _window(value_at(raw, "controller_window"), f"{key}.controller_window")
    legacy = value_at(raw, "legacy_windows")
    legacy_windows = False if legacy is MISSING else parse_bool(legacy, f"{key}.legacy_windows")
    sensor_kinds = _sensor_kinds(value_at(raw, "sensor"), f"{key}.sensor")
    mode = _enum_choice(value_at(raw, "throttle_mode"), f"{key}.throttle_mode", ThrottleMode.KIP219)
    fetch = _enum_choice(value_at(raw, "fetch_throttle"), f"{key}.fetch_throttle", FetchThrottle.EMPTY)
    mute_scope = _enum_choice(value_at(raw, "mute_scope"), f"{key}.mute_scope", MuteScope.ENTITY)
    mutations = _mutations(value_at(raw, "mutations"), f"{key}.mutations")
    max_entities_raw = value_at(raw, "max_entities")
    max_entities = (
        DEFAULT_MAX_ENTITIES
        if max_entities_raw is MISSING
        else parse_int(max_entities_raw, f"{key}.max_entities", 1, INT_MAX)
    )
    rules, ip_rules = _rules(value_at(raw, "entities"), f"{key}.entities")
    topics = parse_topics(value_at(raw, "topics"), f"{key}.topics")
    brokers = parse_broker_protection(value_at(raw, "broker_protection"), f"{key}.broker_protection")
    admin = parse_admin_mode(value_at(raw, "admin"), f"{key}.admin")
    principals = parse_admin_principals(value_at(raw, "admin_principals"), f"{key}.admin_principals")
    store = parse_store(value_at(raw, "store"), f"{key}.store")
    engine = QuotaConfig(
        client_window=client_window,
        controller_window=controller_window,
        legacy_windows=legacy_windows,
        sensor_kinds=sensor_kinds,
        max_entities=max_entities,
    )
    return QuotaSettings(
        engine=engine,
        rules=rules,
        throttle_mode=mode,
        fetch_throttle=fetch,
        mutations=mutations,
        mute_scope=mute_scope,
        ip_rules=ip_rules,
        topics=topics,
        broker_protection=brokers,
        admin=admin,
        admin_principals=principals,
        store=store,
    )


def _mutations(raw: object, key: str) -> MutationSettings:
    if raw is MISSING:
        return MutationSettings()
    raw = parse_section(raw, key, MUTATION_KEYS)
    partitions = value_at(raw, "num_partitions")
    return MutationSettings(
        validate_only=_enum_choice(
            value_at(raw, "validate_only"), f"{key}.validate_only", ValidateOnly.EXEMPT
        ),
        num_partitions=None
        if partitions is MISSING
        else parse_int(partitions, f"{key}.num_partitions", 1, INT_MAX),
    )


def _enum_choice(raw: object, key: str, default: Choice) -> Choice:
    """One of the values of `default`'s enum, case-insensitively; `default` when not given."""
    if raw is MISSING:
        return default
    choices = type(default)
    return choices(parse_choice(raw, key, [choice.value for choice in choices]))


def _window(raw: object, key: str) -> QuotaWindow:
    default = QuotaWindow()
    if raw is MISSING:
        return default
    raw = parse_section(raw, key, WINDOW_KEYS)
    samples = value_at(raw, "samples")
    size = value_at(raw, "size_seconds")
    window = QuotaWindow(
        num_samples=default.num_samples if samples is MISSING else _window_int(samples, f"{key}.samples"),
        size_s=default.size_s if size is MISSING else _window_int(size, f"{key}.size_seconds"),
    )
    if window.num_samples * window.size_s > MAX_WINDOW_S:
        raise ConfigError(
            key,
            {"samples": window.num_samples, "size_seconds": window.size_s},
            f"samples x size_seconds at most {MAX_WINDOW_S} s (24.8 days, the longest throttle Kafka's "
            f"int32 throttle_time_ms can carry); this window is {window.num_samples * window.size_s} s",
        )
    return window


def _sensor_kinds(raw: object, key: str) -> dict[QuotaKey, SensorKind]:
    kinds = [kind.value for kind in SensorKind]
    if raw is MISSING:
        return {}
    if isinstance(raw, str):
        kind = SensorKind(parse_choice(raw, key, kinds))
        return dict.fromkeys(CLIENT_QUOTA_KEYS, kind)
    if not isinstance(raw, Mapping):
        raise ConfigError(key, raw, f"one of {', '.join(kinds)}, or a mapping from quota key to one of them")
    reject_unknown_keys(raw, QUOTA_KEY_NAMES, prefix=f"{key}.")
    chosen: dict[QuotaKey, SensorKind] = {}
    for quota_key in QuotaKey:
        value = value_at(raw, quota_key.value)
        if value is MISSING:
            continue
        entry_key = f"{key}.{quota_key.value}"
        kind = SensorKind(parse_choice(value, entry_key, kinds))
        if quota_key is QuotaKey.CONTROLLER_MUTATION_RATE and kind is not SensorKind.TOKEN_BUCKET:
            raise ConfigError(
                entry_key, value, "token_bucket (Kafka's mutation quota is always a token bucket)"
            )
        chosen[quota_key] = kind
    return chosen


def _rules(raw: object, key: str) -> tuple[tuple[QuotaRule, ...], tuple[IpQuotaRule, ...]]:
    if raw is MISSING:
        return (), ()
    if not isinstance(raw, list | tuple):
        raise ConfigError(key, raw, f"a list of entities, each a mapping such as {ENTITY_EXAMPLE}")
    rules: list[QuotaRule] = []
    ip_rules: list[IpQuotaRule] = []
    seen_ips: dict[object, int] = {}
    # Kafka keys users by their sanitised (URL-encoded) name, so two spellings that encode alike
    # would be one entity there; compare the same way so neither silently replaces the other.
    seen: dict[tuple[object, object], int] = {}
    for index, entry in enumerate(raw):
        entry_key = f"{key}[{index}]"
        if isinstance(entry, Mapping) and "ip" in entry:
            ip_rule = parse_ip_rule(entry, entry_key)
            if ip_rule.ip in seen_ips:
                raise ConfigError(
                    entry_key, entry, f"an ip not configured before: {key}[{seen_ips[ip_rule.ip]}] sets it"
                )
            seen_ips[ip_rule.ip] = index
            ip_rules.append(ip_rule)
            continue
        rule = _rule(entry, entry_key)
        user = rule.entity.user
        identity = (sanitize_user(user) if isinstance(user, str) else user, rule.entity.client_id)
        if identity in seen:
            raise ConfigError(
                entry_key,
                entry,
                f"an entity not configured before: {key}[{seen[identity]}] already sets quotas on "
                f"{_describe(rule.entity)}; put all of an entity's quota keys in one entry",
            )
        seen[identity] = index
        rules.append(rule)
    return tuple(rules), tuple(ip_rules)


def _describe(entity: QuotaEntity) -> str:
    """The entity in the file's own words: `user=alice, client_id=<default>`."""
    named = (("user", entity.user), ("client_id", entity.client_id))
    return ", ".join(f"{name}={value!r}" for name, value in named if value is not None)


def _rule(entry: object, key: str) -> QuotaRule:
    if not isinstance(entry, Mapping):
        expected = f"a mapping with user and/or client_id and at least one quota key, e.g. {ENTITY_EXAMPLE}"
        raise ConfigError(key, entry, expected)
    reject_unknown_keys(entry, ENTITY_NAME_KEYS + QUOTA_KEY_NAMES, prefix=f"{key}.")
    user = _entity_name(value_at(entry, "user"), f"{key}.user", "user")
    client_id = _entity_name(value_at(entry, "client_id"), f"{key}.client_id", "client-id")
    if user is None and client_id is None:
        raise ConfigError(key, entry, "a user, a client_id, or both (either may be <default>)")
    values: dict[QuotaKey, float] = {}
    for quota_key in QuotaKey:
        value = value_at(entry, quota_key.value)
        if value is not MISSING:
            values[quota_key] = _quota_value(value, f"{key}.{quota_key.value}", quota_key)
    if not values:
        raise ConfigError(key, entry, f"at least one quota key: {', '.join(QUOTA_KEY_NAMES)}")
    return QuotaRule(QuotaEntity(user=user, client_id=client_id), values)


def _entity_name(raw: object, key: str, kafka_name: str) -> EntityName | None:
    """A name, DEFAULT for the string `<default>`, or None when not given."""
    if raw is MISSING:
        return None
    if isinstance(raw, str):
        if not raw:
            raise ConfigError(
                key,
                raw,
                f"a non-empty name or <default> (Kafka: 'Empty {kafka_name} not supported'); "
                "leave the key out for a rule that does not depend on it",
            )
        return DEFAULT if raw == DEFAULT_NAME else raw
    if isinstance(raw, bool | int | float | datetime.date):
        # Stringifying is lossy (0x10 -> 16, 1_000 -> 1000, yes -> True), so ask for quotes instead.
        raise ConfigError(
            key,
            raw,
            f"a name or <default> as a string: YAML read this value as a number, boolean or date "
            f'({type(raw).__name__}), so put the name in quotes as the client sends it, e.g. "123"',
        )
    raise ConfigError(key, raw, "a name (a string) or <default>")


def _quota_value(raw: object, key: str, quota_key: QuotaKey) -> float:
    """A positive, finite quota; byte rates must be whole numbers, as Kafka stores them as LONG."""
    if quota_key.is_long:
        expected = f"a whole number in 1..{LONG_MAX} ({quota_key.value} is a LONG in Kafka, no fractions)"
    else:
        expected = "a finite number > 0"
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ConfigError(key, raw, expected + _string_number_hint(raw))
    if quota_key.is_long:
        return _whole_rate(raw, key, expected)
    try:
        number = float(raw)
    except OverflowError:  # an int too large for a float
        raise ConfigError(key, raw, expected) from None
    if not math.isfinite(number) or not number > 0:
        raise ConfigError(key, raw, expected)
    if quota_key is QuotaKey.CONTROLLER_MUTATION_RATE and number < MIN_MUTATION_RATE:
        raise ConfigError(
            key,
            raw,
            f"at least {MIN_MUTATION_RATE:.3g} (one partition mutation per {MAX_WINDOW_S} s): below it, "
            "the throttle one mutation earns is longer than Kafka's int32 throttle_time_ms can carry and "
            "wraps to no throttle at all",
        )
    return number


def _whole_rate(raw: int | float, key: str, expected: str) -> float:
    if isinstance(raw, int):
        if not 1 <= raw <= LONG_MAX:
            raise ConfigError(key, raw, expected)
        return float(raw)
    if not math.isfinite(raw):
        raise ConfigError(key, raw, expected)
    whole = round(raw)
    # Kafka's check (spec §7.5); 2**63 is float(LONG_MAX), which Kafka's Math.round clamps to LONG_MAX.
    if abs(whole - raw) > FRACTION_TOLERANCE or not 1 <= whole <= 2**63:
        raise ConfigError(key, raw, expected)
    return float(whole)


def _string_number_hint(raw: object) -> str:
    """PyYAML follows YAML 1.1, where 1e5 (no dot) is a string: say so rather than just 'not a number'."""
    if not isinstance(raw, str):
        return ""
    try:
        float(raw)
    except ValueError:
        return ""
    return (
        "; YAML read this as a string (it was quoted, or an exponent without a dot such as 1e5): "
        "write 100000 or 1.0e+5"
    )
