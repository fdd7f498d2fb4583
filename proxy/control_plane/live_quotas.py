"""The quotas in force on one instance, pushed into its running quota engine as they change.

`LiveQuotas.apply` takes the whole set of quotas that should be in force (file plus store, see
proxy/control_plane/quota_store.py) and changes only what differs from what it applied last, so a reload or a
store record touches only the quotas it changes. Every change goes through the engine's own update, which
keeps Kafka's live-update semantics (spec V16): an existing sensor keeps its samples and takes the new
bound at once; a quota that appears where there was none starts to apply on the next request, and one
that disappears stops applying (the engine reference-counts entity shapes, docs/quotas.md).

The engine objects are built once, from the start-up configuration's windows, and then only updated:
the filters hold on to them. Topic quotas (`quota.topics`) are a `TopicQuotas`, replaced by None when the
section goes away; the broker shield (`quota.broker_protection`) a `BrokerShield`, likewise, whose
limits change in place (its sensors keep their history).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from sluice.config.quota_settings import TopicQuotaSettings
from sluice.proxy.control_plane.client_quota_entity import ClientQuotaEntity
from sluice.proxy.control_plane.quota_store import CONNECTION_CREATION_RATE
from sluice.quota import ConnectionRateQuotas, QuotaKey, QuotaManagers, TopicQuotas
from sluice.quota.broker_shield import BrokerShield, ShieldLimits

QuotaMap = Mapping[ClientQuotaEntity, Mapping[str, float]]


class QuotaChange(NamedTuple):
    """One quota that changed in the engine: None for `old` (it appeared) or `new` (it went away)."""

    entity: ClientQuotaEntity
    key: str
    old: float | None
    new: float | None


class LiveQuotas:
    """The running engine (managers, connection rates, topic quotas) and what has been applied to it."""

    __slots__ = ("_applied", "_topic_settings", "brokers", "connections", "managers", "topics")

    def __init__(
        self, managers: QuotaManagers | None = None, connections: ConnectionRateQuotas | None = None
    ) -> None:
        self.managers = QuotaManagers() if managers is None else managers
        config = self.managers.config
        self.connections = (
            ConnectionRateQuotas(config.client_window, legacy_windows=config.legacy_windows)
            if connections is None
            else connections
        )
        self.topics: TopicQuotas | None = None
        self.brokers: BrokerShield | None = None
        self._topic_settings: TopicQuotaSettings | None = None
        self._applied: dict[ClientQuotaEntity, dict[str, float]] = {}

    def apply(self, quotas: QuotaMap) -> list[QuotaChange]:
        """Make `quotas` the quotas in force, changing only what differs; returns the changes made."""
        changes: list[QuotaChange] = []
        for entity in self._applied.keys() | quotas.keys():
            old_values = self._applied.get(entity, {})
            new_values = quotas.get(entity, {})
            for key in old_values.keys() | new_values.keys():
                old, new = old_values.get(key), new_values.get(key)
                if old != new:
                    self._set(entity, key, new)
                    changes.append(QuotaChange(entity, key, old, new))
        self._applied = {entity: dict(values) for entity, values in quotas.items() if values}
        changes.sort(key=lambda change: (change.entity.sort_key(), change.key))
        return changes

    def apply_entity(self, entity: ClientQuotaEntity, values: Mapping[str, float]) -> list[QuotaChange]:
        """Make `values` the quotas in force for one entity (empty: none); the others stay as they are."""
        old_values = self._applied.get(entity, {})
        changes = []
        for key in sorted(old_values.keys() | values.keys()):
            old, new = old_values.get(key), values.get(key)
            if old != new:
                self._set(entity, key, new)
                changes.append(QuotaChange(entity, key, old, new))
        if values:
            self._applied[entity] = dict(values)
        else:
            self._applied.pop(entity, None)
        return changes

    def apply_topics(self, settings: TopicQuotaSettings | None) -> bool:
        """Make `settings` the topic quotas in force; True if anything changed.

        Thresholds that go away or shrink are changed before the total, and those that grow after it,
        so every step keeps the explicit thresholds within the total, as the engine requires.
        """
        previous = self._topic_settings
        if settings == previous:
            return False
        self._topic_settings = settings
        if settings is None:
            self.topics = None
            return True
        if self.topics is None or previous is None:
            config = self.managers.config
            self.topics = TopicQuotas(
                settings.total_bytes_per_s,
                config.client_window,
                config.sensor_kind(QuotaKey.PRODUCER_BYTE_RATE),
                legacy_windows=config.legacy_windows,
            )
            for topic, threshold in settings.thresholds.items():
                self.topics.set_threshold(topic, threshold)
            return True
        topics = self.topics
        current = dict(previous.thresholds)
        wanted = dict(settings.thresholds)
        for topic in current.keys() - wanted.keys():
            topics.set_threshold(topic, None)
        for topic, value in wanted.items():
            if topic in current and value < current[topic]:
                topics.set_threshold(topic, value)
        topics.set_total(settings.total_bytes_per_s)
        for topic, value in wanted.items():
            if topics.threshold(topic) != value:
                topics.set_threshold(topic, value)
        return True

    def apply_brokers(self, limits: ShieldLimits | None) -> bool:
        """Make `limits` the broker shield's; True if anything changed (sensors keep their history)."""
        shield = self.brokers
        if limits is None:
            self.brokers = None
            return shield is not None
        if shield is None:
            self.brokers = BrokerShield(limits)
            return True
        if shield.limits == limits:
            return False
        shield.configure(limits)
        return True

    def expire_idle_sensors(self, now_ms: int) -> int:
        """Drop sensors idle for an hour (client quotas and connection rates); how many went."""
        return self.managers.expire_idle_sensors(now_ms) + self.connections.expire_idle_sensors(now_ms)

    def _set(self, entity: ClientQuotaEntity, key: str, value: float | None) -> None:
        if entity.ip is not None:  # an ip entity has nothing else
            if key == CONNECTION_CREATION_RATE:
                self.connections.set_quota(entity.ip, value)
            return
        try:
            quota_key = QuotaKey(key)
        except ValueError:
            return  # validated before it got here; nothing else the engine knows
        self.managers.set_quota(entity.engine_entity(), quota_key, value)
