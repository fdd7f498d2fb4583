"""The validated `quota` section: the engine's settings, the configured quotas and how throttles are applied.

Build it with `config.load_config` (or `config.quota_section.parse_quota_section`), which checks every rule
and names the offending key; the constructors here trust their arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from sluice.quota import OverflowReport, QuotaConfig, QuotaEntity, QuotaKey, QuotaManagers
from sluice.quota.broker_shield import ShieldLimits
from sluice.quota.entities import DefaultEntity


class ThrottleMode(StrEnum):
    """How a throttled client is held (`quota.throttle_mode`, spec §2.8, §2.9)."""

    # Kafka >= 2.0: answer at once with throttle_time_ms set, then mute the client until the deadline.
    KIP219 = "kip219"
    # Kafka <= 1.1: hold the response until the deadline; the field carries the summed throttles.
    DELAY = "delay"
    # kip219 for request versions whose clients back off on their own, delay for older versions.
    AUTO = "auto"


class FetchThrottle(StrEnum):
    """What a throttled Fetch gets back in kip219 mode (`quota.fetch_throttle`, spec §2.7, §8.4)."""

    # Kafka's behaviour: the response is un-charged and replaced by an empty one keeping the session id.
    EMPTY = "empty"
    # Forward the broker's response as it is (charged), with throttle_time_ms set.
    PASS = "pass"


class MuteScope(StrEnum):
    """Who a throttle holds (`quota.mute_scope`, docs/quotas.md)."""

    # Every connection of the throttled entity (one quota however many connections).
    ENTITY = "entity"
    # Only the connection that earned the throttle, as a Kafka broker does.
    CONNECTION = "connection"


class ValidateOnly(StrEnum):
    """Whether a validate-only CreateTopics/CreatePartitions is charged to controller_mutation_rate."""

    # KIP-599's text and ZooKeeper-mode brokers: nothing is created, so nothing is charged.
    EXEMPT = "exempt"
    # KRaft controllers: the quota applies whether or not the change is applied.
    CHARGE = "charge"


@dataclass(frozen=True, slots=True)
class MutationSettings:
    """`quota.mutations.*`: how partition mutations are counted (spec §4)."""

    validate_only: ValidateOnly = ValidateOnly.EXEMPT
    # The partitions a CreateTopics with num_partitions -1 creates; None asks the cluster (num.partitions).
    num_partitions: int | None = None


@dataclass(frozen=True, slots=True)
class QuotaRule:
    """One entry of `quota.entities`: an entity and the quotas configured on it.

    `entity.user` / `entity.client_id` is a name, `quota.DEFAULT` (`<default>` in the file) or None when
    that component is not part of the rule. `values` holds at least one key; byte rates are whole numbers.
    """

    entity: QuotaEntity
    # Not part of the hash (a read-only mapping is unhashable); equal rules still hash equal by entity.
    values: Mapping[QuotaKey, float] = field(hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))


@dataclass(frozen=True, slots=True)
class IpQuotaRule:
    """An `ip` entry of `quota.entities`: new connections per second from one address (KIP-612).

    `ip` is an address in canonical form, or `quota.DEFAULT` (`<default>`: every address without one).
    """

    ip: str | DefaultEntity
    connection_creation_rate: float


@dataclass(frozen=True, slots=True)
class TopicQuotaSettings:
    """`quota.topics`: produce byte rates per topic under a total (quota/topic_quotas.py)."""

    total_bytes_per_s: float
    thresholds: Mapping[str, float] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "thresholds", MappingProxyType(dict(self.thresholds)))


class AdminMode(StrEnum):
    """Who answers DescribeClientQuotas and AlterClientQuotas (`quota.admin`)."""

    # Sluice answers them from its own store: kafka-configs.sh manages the quotas Sluice enforces.
    PROXY = "proxy"
    # Forwarded to the brokers, which then enforce quotas of their own (for broker-side quotas).
    BROKER = "broker"


@dataclass(frozen=True, slots=True)
class AdminPrincipals:
    """`quota.admin_principals`: who may alter and who may describe quotas, as `User:<name>` strings.

    None for a list means the section was not given at all: quota admin is open, as on a Kafka cluster
    without an authorizer. Given, a list missing is empty. Alter implies describe, as Kafka's
    ALTER_CONFIGS implies DESCRIBE_CONFIGS.
    """

    alter: frozenset[str] | None = None
    describe: frozenset[str] | None = None

    @property
    def open(self) -> bool:
        return self.alter is None and self.describe is None

    def may_alter(self, user: str) -> bool:
        return self.open or _listed(self.alter, user)

    def may_describe(self, user: str) -> bool:
        return self.open or _listed(self.describe, user) or _listed(self.alter, user)


def _listed(principals: frozenset[str] | None, user: str) -> bool:
    return principals is not None and ("User:*" in principals or f"User:{user}" in principals)


DEFAULT_STORE_TOPIC = "_sluice_quotas"


@dataclass(frozen=True, slots=True)
class QuotaStoreSettings:
    """`quota.store`: the compacted topic on the fronted cluster that holds quotas set through the API."""

    topic: str = DEFAULT_STORE_TOPIC
    # Replication of the topic Sluice creates when it is missing; -1 takes the cluster's default.
    replication_factor: int = -1
    # How long an alter waits for the store to acknowledge its write before it fails (REQUEST_TIMED_OUT).
    write_timeout_ms: int = 5000


@dataclass(frozen=True, slots=True)
class QuotaSettings:
    """Everything under `quota:` in the configuration file."""

    # Windows (quota.window.*, quota.controller_window.*), legacy_windows and sensor kinds.
    # QuotaConfig holds a read-only mapping, so it is left out of the hash like QuotaRule.values.
    engine: QuotaConfig = field(default_factory=QuotaConfig, hash=False)
    rules: tuple[QuotaRule, ...] = ()
    throttle_mode: ThrottleMode = ThrottleMode.KIP219
    fetch_throttle: FetchThrottle = FetchThrottle.EMPTY
    mutations: MutationSettings = MutationSettings()
    mute_scope: MuteScope = MuteScope.ENTITY
    ip_rules: tuple[IpQuotaRule, ...] = ()
    topics: TopicQuotaSettings | None = None
    # `quota.broker_protection` (config/broker_protection.py): the engine's own limits, None when absent.
    broker_protection: ShieldLimits | None = None
    admin: AdminMode = AdminMode.PROXY
    admin_principals: AdminPrincipals = AdminPrincipals()
    store: QuotaStoreSettings = QuotaStoreSettings()

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))
        object.__setattr__(self, "ip_rules", tuple(self.ip_rules))

    def apply_to(self, managers: QuotaManagers) -> None:
        """Set every configured quota on `managers` (which should be built from `self.engine`).

        Only sets: a quota the managers already hold for an entity or key not listed here is left as it
        is. To start from exactly this configuration use `new_managers`.
        """
        for rule in self.rules:
            for key, value in rule.values.items():
                managers.set_quota(rule.entity, key, value)

    def new_managers(self, on_overflow: OverflowReport | None = None) -> QuotaManagers:
        """Fresh managers built from `self.engine`, with every configured quota set."""
        managers = QuotaManagers(self.engine, on_overflow)
        self.apply_to(managers)
        return managers
