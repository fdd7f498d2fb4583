"""`quota.broker_protection`: a bytes-in threshold per broker, or one found by the latency it protects.

    broker_protection:
      trigger: bytes_in              # or latency
      bytes_in_per_s: 50000000       # every broker's threshold (with trigger latency: a ceiling)
      nodes: {3: 20000000}           # overrides by broker node id
      topic_thresholds: {orders: 20000000}   # per broker; the other topics share the rest
      latency:                       # trigger latency only
        produce_p99_ms: 50           # hold a broker whose Produce p99 passes this
        release_p99_ms: 40           # raise its threshold again below this (default 80 % of the target)
        floor_bytes_in_per_s: 5000000  # never hold a broker below this

Read into the engine's own `ShieldLimits` (quota/broker_shield.py). Every error names its key. The topic
thresholds must fit under every threshold a broker can have (each static one, and the floor), since the
seed refuses explicit topic thresholds that add up to more than the broker's total.
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.config.errors import MISSING, ConfigError
from sluice.config.quota_admin_section import TOPIC_NAME, parse_rate
from sluice.config.values import parse_choice, parse_node_map, parse_number, parse_section, value_at
from sluice.quota.broker_shield import ShieldLimits
from sluice.quota.latency_trigger import LatencyTargets

KEYS = ("trigger", "bytes_in_per_s", "nodes", "topic_thresholds", "latency")
LATENCY_KEYS = ("produce_p99_ms", "release_p99_ms", "floor_bytes_in_per_s")
TRIGGERS = ("bytes_in", "latency")
# Without release_p99_ms, the threshold rises again once the p99 is under this share of the target.
DEFAULT_RELEASE_SHARE = 0.8
# A p99 target beyond a minute is no latency target (and past what the round-trip histogram resolves).
MAX_P99_MS = 60_000


def parse_broker_protection(raw: object, key: str) -> ShieldLimits | None:
    if raw is MISSING or raw is None:
        return None
    section = parse_section(raw, key, KEYS)
    trigger_raw = value_at(section, "trigger")
    trigger = "bytes_in" if trigger_raw is MISSING else parse_choice(trigger_raw, f"{key}.trigger", TRIGGERS)
    default_raw = value_at(section, "bytes_in_per_s")
    default = None if default_raw is MISSING else parse_rate(default_raw, f"{key}.bytes_in_per_s")
    nodes = _nodes(value_at(section, "nodes"), f"{key}.nodes")
    topics = _topic_thresholds(value_at(section, "topic_thresholds"), f"{key}.topic_thresholds")
    latency_raw = value_at(section, "latency")
    latency = None
    if trigger == "latency":
        if latency_raw is MISSING:
            raise ConfigError(
                f"{key}.latency",
                MISSING,
                "{produce_p99_ms, floor_bytes_in_per_s}: required with trigger: latency",
            )
        latency = _latency(latency_raw, f"{key}.latency")
    elif latency_raw is not MISSING:
        raise ConfigError(f"{key}.latency", latency_raw, "nothing unless trigger: latency")
    elif default is None and not nodes:
        raise ConfigError(
            f"{key}.bytes_in_per_s", MISSING, "a byte rate (or per-node ones in nodes) with trigger: bytes_in"
        )
    _check_topics_fit(topics, default, nodes, latency, key)
    return ShieldLimits(bytes_in_per_s=default, nodes=nodes, topic_thresholds=topics, latency=latency)


def _nodes(raw: object, key: str) -> dict[int, float]:
    return {} if raw is MISSING else parse_node_map(raw, key, "bytes per second", parse_rate)


def _topic_thresholds(raw: object, key: str) -> dict[str, float]:
    if raw is MISSING:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(key, raw, "a mapping of topic name to bytes per second")
    found: dict[str, float] = {}
    for topic, value in raw.items():
        entry_key = f"{key}.{topic}"
        if not isinstance(topic, str) or TOPIC_NAME.fullmatch(topic) is None:
            raise ConfigError(entry_key, topic, "a Kafka topic name as the key")
        found[topic] = parse_rate(value, entry_key)
    return found


def _latency(raw: object, key: str) -> LatencyTargets:
    section = parse_section(raw, key, LATENCY_KEYS)
    target_raw = value_at(section, "produce_p99_ms")
    if target_raw is MISSING:
        raise ConfigError(f"{key}.produce_p99_ms", MISSING, "milliseconds: required with trigger: latency")
    target = parse_number(target_raw, f"{key}.produce_p99_ms", above=0, at_most=MAX_P99_MS)
    release_raw = value_at(section, "release_p99_ms")
    if release_raw is MISSING:
        release = target * DEFAULT_RELEASE_SHARE
    else:
        release = parse_number(release_raw, f"{key}.release_p99_ms", above=0)
        if release >= target:
            raise ConfigError(
                f"{key}.release_p99_ms", release_raw, f"milliseconds below produce_p99_ms ({target:g})"
            )
    floor_raw = value_at(section, "floor_bytes_in_per_s")
    if floor_raw is MISSING:
        raise ConfigError(
            f"{key}.floor_bytes_in_per_s", MISSING, "a byte rate: required with trigger: latency"
        )
    floor = parse_rate(floor_raw, f"{key}.floor_bytes_in_per_s")
    return LatencyTargets(target, release, floor)


def _check_topics_fit(
    topics: dict[str, float],
    default: float | None,
    nodes: dict[int, float],
    latency: LatencyTargets | None,
    key: str,
) -> None:
    explicit = sum(topics.values())
    if not explicit:
        return
    reachable = {"bytes_in_per_s": default} if default is not None else {}
    reachable.update({f"nodes.{node}": value for node, value in nodes.items()})
    if latency is not None:
        reachable["latency.floor_bytes_in_per_s"] = latency.floor_bytes_per_s
    where, lowest = min(reachable.items(), key=lambda item: item[1])
    if explicit > lowest:
        raise ConfigError(
            f"{key}.topic_thresholds",
            dict(topics),
            f"thresholds summing to <= every broker threshold: {where} is {lowest:g}, "
            f"they sum to {explicit:g}",
        )
