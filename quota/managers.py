"""The quota managers, one per quota key (spec §2, §3, §4), and how their throttles combine.

Per request the proxy asks a manager: record ``value`` for (user, client-id) at ``now_ms``, and how long
must this client be throttled? The manager resolves the entity to its shared sensor (cached), records,
checks, and returns the throttle in ms as Kafka would put it in the response: an int32, 0 when within
quota or when no quota of this key is configured at all (then nothing is recorded and no sensor exists).

* :class:`ClientQuotaManager` - ``producer_byte_rate`` and ``consumer_byte_rate``: unbounded throttles.
* :class:`RequestQuotaManager` - ``request_percentage``: the throttle is bounded by one window (1000 ms).
* :class:`ControllerMutationQuotaManager` - ``controller_mutation_rate``: token buckets, strict or
  permissive per request (see :mod:`quota.mutations`).
* :class:`QuotaManagers` - the four together, routing each configured quota to its manager.

Do not keep a sensor across requests: always go through the manager, which swaps in a fresh sensor when
the tags change or the old one expired. The manager's own lookup is a dict hit when warm.

Each manager tracks at most ``max_entities`` sensors. A new entity beyond that shares an **overflow
sensor** with every other overflowed entity that matches the same quota rule (tags
``(<overflow>, <the rule>)``): memory stays bounded, and a flood of new client-ids shares one quota
instead of escaping it (fail closed; entities already tracked keep their own sensors). Each overflow is
counted and reported through ``on_overflow``; the entity gets its own sensor again once expiry makes room.
In fleet mode (quota/fleet.py) a manager's ``fleet`` adds other instances' unreported usage to each check.

Why this module is long: one manager per quota key, and the rules that combine their throttles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final, Protocol

from sluice.quota.entities import QuotaEntity, QuotaRules, QuotaTags, Resolution
from sluice.quota.keys import QuotaKey, SensorKind, parse_quota_key, parse_sensor_kind
from sluice.quota.mutations import (
    UNBOUNDED_CONTROLLER_MUTATION_QUOTA,
    ControllerMutationQuota,
    PermissiveControllerMutationQuota,
    StrictControllerMutationQuota,
    is_strict,
)
from sluice.quota.quota_config import DEFAULT_MAX_ENTITIES, QuotaConfig, QuotaWindow
from sluice.quota.sensor import INACTIVE_SENSOR_EXPIRATION_MS, QuotaSensor, new_quota_sensor
from sluice.quota.throttle import DOUBLE_MAX, LONG_MAX, UNLIMITED, to_int32, token_bucket_throttle_time

OVERFLOW_USER: Final = "<overflow>"
# (quota key, the overflowed client's (user, client-id)): told once per entity sent to an overflow sensor.
OverflowReport = Callable[[QuotaKey, str, "str | None"], None]


class FleetHook(Protocol):
    """What a manager asks in fleet mode (quota/fleet.py's FleetQuotas)."""

    def on_local(self, sensor: QuotaSensor, value: float, now_ms: int) -> float:
        """Account a local record; return the other instances' estimated unreported usage."""
        ...


# ClientQuotaManagerConfig.NanosToPercentagePerSecond: a recorded ns of thread time, in "% of a thread".
NANOS_TO_PERCENTAGE_PER_SECOND: Final = 100.0 / 1_000_000_000


def kip219_throttle_ms(*throttles_ms: int) -> int:
    """KIP-219 (Kafka >= 2.0): the response carries the largest applicable throttle; 0 if none is positive."""
    return max(0, *throttles_ms)


def pre_kip219_throttle_ms(*throttles_ms: int) -> int:
    """Kafka <= 1.1 ("delay" mode): each quota delays the response in turn, so the field carries the sum.

    Produce and fetch are delayed by the bandwidth throttle, then the request quota is evaluated and
    delays them further (spec §2.9, V23). Non-positive throttles delay nothing.
    """
    return sum(t for t in throttles_ms if t > 0)


def _overflow_tags(resolution: Resolution) -> QuotaTags:
    return QuotaTags(OVERFLOW_USER, "unlimited" if resolution.rule is None else str(resolution.rule))


class ClientQuotaManager:
    """Byte-rate quotas for one key (``producer_byte_rate`` or ``consumer_byte_rate``).

    ``sensor_kind`` picks Kafka's sampled window (default) or a token bucket with the same N and W;
    ``legacy_windows`` picks Kafka <= 3.7 sampled windows.
    """

    __slots__ = (
        "_kind",
        "_legacy",
        "_lookup",
        "_lookup_limit",
        "_max_entities",
        "_max_throttle_ms",
        "_num_samples",
        "_on_overflow",
        "_rules",
        "_sensors",
        "_window",
        "_window_ms",
        "fleet",
        "key",
        "overflows",
    )

    def __init__(
        self,
        key: QuotaKey,
        window: QuotaWindow | None = None,
        sensor_kind: SensorKind = SensorKind.WINDOW,
        *,
        legacy_windows: bool = False,
        lookup_limit: int = 100_000,
        max_entities: int = DEFAULT_MAX_ENTITIES,
        on_overflow: OverflowReport | None = None,
    ) -> None:
        self.key = parse_quota_key(key)
        self._window = QuotaWindow() if window is None else window
        self._num_samples = self._window.num_samples
        self._window_ms = self._window.window_ms
        self._kind = parse_sensor_kind(sensor_kind)
        self._legacy = bool(legacy_windows)
        self._rules = QuotaRules()
        self._sensors: dict[QuotaTags, QuotaSensor] = {}
        # (user, client-id) -> its sensor. Cleared on any configuration change and on expiry sweeps.
        self._lookup: dict[tuple[str, str | None], QuotaSensor] = {}
        self._lookup_limit = lookup_limit
        self._max_throttle_ms = LONG_MAX
        self._max_entities = max_entities
        self._on_overflow = on_overflow
        self.overflows = 0  # entities sent to an overflow sensor, ever
        # Fleet mode (quota/fleet.py): other instances' unreported usage, counted in every check.
        self.fleet: FleetHook | None = None

    # -- configuration -------------------------------------------------------------------------------

    @property
    def window(self) -> QuotaWindow:
        return self._window

    @property
    def sensor_kind(self) -> SensorKind:
        return self._kind

    @property
    def rules(self) -> QuotaRules:
        """The configured overrides (read them; change them through :meth:`update_quota`)."""
        return self._rules

    @property
    def quotas_enabled(self) -> bool:
        return self._rules.quotas_enabled

    def update_quota(self, entity: QuotaEntity, bound: float | None) -> None:
        """Set (``bound``) or remove (``None``) the quota of ``entity``.

        Existing sensors keep their samples and take their new bound at once. A client whose tags change
        (because a more specific quota appeared or went away) moves to another sensor, fresh if new.
        """
        if bound is None:
            self._rules.remove(entity)
        else:
            self._rules.set(entity, bound)
        self._lookup.clear()
        rules = self._rules
        for tags, sensor in self._sensors.items():
            limit, _ = rules.quota_limit(tags)
            new_bound = UNLIMITED if limit is None else limit
            if new_bound != sensor.bound:
                sensor.bound = new_bound

    def resolve(self, user: str, client_id: str | None) -> Resolution:
        """The tags (who shares), bound and matching rule for this client."""
        return self._rules.resolve(user, client_id)

    def tags_for(self, user: str, client_id: str | None) -> QuotaTags:
        """The tags of the sensor this client is charged to: its own, or its rule's overflow sensor's once
        max_entities is reached (what its metrics are labelled with, so they stay bounded too)."""
        resolution = self._rules.resolve(user, client_id)
        if resolution.tags in self._sensors or len(self._sensors) < self._max_entities:
            return resolution.tags
        return _overflow_tags(resolution)

    def quota(self, user: str, client_id: str | None) -> float:
        """The bound that applies to this client; ``Long.MAX_VALUE`` as a float when unlimited."""
        return self._rules.resolve(user, client_id).bound

    def max_value_in_quota_window(self, user: str, client_id: str | None) -> float:
        """``getMaxValueInQuotaWindow``: quota x (N - 1) x W(s), the most one fetch may return (spec §2.6).

        ``DOUBLE_MAX`` when no quota applies. Unlike Kafka this does not create the client's sensor.
        """
        if not self._rules.quotas_enabled:
            return DOUBLE_MAX
        resolution = self._rules.resolve(user, client_id)
        if resolution.rule is None:
            return DOUBLE_MAX
        return resolution.bound * (self._num_samples - 1) * self._window.size_s

    # -- recording -----------------------------------------------------------------------------------

    def record_and_get_throttle_ms(self, user: str, client_id: str | None, value: float, now_ms: int) -> int:
        """Record ``value`` for this client at ``now_ms``, check, and return the throttle (int32 ms)."""
        if not self._rules.enabled_bits:
            return 0
        sensor = self._lookup.get((user, client_id))
        if sensor is None or now_ms - sensor.last_record_ms > INACTIVE_SENSOR_EXPIRATION_MS:
            sensor = self._sensor(user, client_id, now_ms)
        fleet = self.fleet
        if fleet is None:
            throttle = sensor.record(value, now_ms)
        else:
            sensor.record(value, now_ms, False)
            throttle = sensor.throttle_ms(now_ms, fleet.on_local(sensor, value, now_ms))
        if not throttle:
            return 0
        max_throttle = self._max_throttle_ms
        return to_int32(throttle if throttle < max_throttle else max_throttle)

    def unrecord(self, user: str, client_id: str | None, value: float, now_ms: int) -> None:
        """Take a recorded value back (record ``-value`` without a check), as for a throttled fetch."""
        if self._rules.enabled_bits:
            sensor = self.sensor_for(user, client_id, now_ms)
            sensor.unrecord(value, now_ms)
            if self.fleet is not None:
                self.fleet.on_local(sensor, -value, now_ms)  # and its estimate of the peers

    def sensor_for(self, user: str, client_id: str | None, now_ms: int) -> QuotaSensor:
        """The sensor this client shares at ``now_ms`` (created, or renewed if expired). For inspection."""
        sensor = self._lookup.get((user, client_id))
        if sensor is None or sensor.is_expired(now_ms):
            sensor = self._sensor(user, client_id, now_ms)
        return sensor

    def sensors(self) -> Iterator[tuple[QuotaTags, QuotaSensor]]:
        """Every live sensor and its tags (for metrics)."""
        return iter(list(self._sensors.items()))

    @property
    def tracked(self) -> int:
        """How many sensors (entities) this manager holds now; at most max_entities + one per rule."""
        return len(self._sensors)

    def expire_idle_sensors(self, now_ms: int) -> int:
        """Drop sensors idle for more than an hour (Kafka's ExpireSensorTask); returns how many went.

        Optional for correctness (an expired sensor is renewed when next used) but keeps memory bounded
        when clients come and go; call it every 30 s or so.
        """
        expired = [tags for tags, sensor in self._sensors.items() if sensor.is_expired(now_ms)]
        for tags in expired:
            del self._sensors[tags]
        if expired:
            self._lookup.clear()
        return len(expired)

    def _sensor(self, user: str, client_id: str | None, now_ms: int) -> QuotaSensor:
        resolution = self._rules.resolve(user, client_id)
        tags = resolution.tags
        sensor = self._sensors.get(tags)
        if sensor is None and len(self._sensors) >= self._max_entities:
            tags = _overflow_tags(resolution)
            sensor = self._sensors.get(tags)
            self.overflows += 1
            if self._on_overflow is not None:
                self._on_overflow(self.key, user, client_id)
        if sensor is None:
            sensor = self._new_sensor(resolution.bound, now_ms)
            self._sensors[tags] = sensor
        elif sensor.is_expired(now_ms):
            # Kafka drops an expired sensor and makes a new, empty one on next use.
            sensor.reset(now_ms)
        if len(self._lookup) >= self._lookup_limit:
            self._lookup.clear()
        self._lookup[(user, client_id)] = sensor
        return sensor

    def _new_sensor(self, bound: float, now_ms: int) -> QuotaSensor:
        return new_quota_sensor(
            self._kind, bound, now_ms, self._num_samples, self._window_ms, legacy=self._legacy
        )


class RequestQuotaManager(ClientQuotaManager):
    """``request_percentage`` (KIP-124): thread time as a percentage of one thread, throttle <= one window."""

    __slots__ = ()

    def __init__(
        self,
        window: QuotaWindow | None = None,
        sensor_kind: SensorKind = SensorKind.WINDOW,
        *,
        legacy_windows: bool = False,
        lookup_limit: int = 100_000,
        max_entities: int = DEFAULT_MAX_ENTITIES,
        on_overflow: OverflowReport | None = None,
    ) -> None:
        super().__init__(
            QuotaKey.REQUEST_PERCENTAGE,
            window,
            sensor_kind,
            legacy_windows=legacy_windows,
            lookup_limit=lookup_limit,
            max_entities=max_entities,
            on_overflow=on_overflow,
        )
        # ClientRequestQuotaManager.maxThrottleTimeMs: quota.window.size.seconds in ms.
        self._max_throttle_ms = self._window_ms

    @property
    def max_throttle_ms(self) -> int:
        return self._max_throttle_ms

    def record_request_time_ns(self, user: str, client_id: str | None, time_ns: int, now_ms: int) -> int:
        """Record request-handling time (ns) with a check; returns the bounded throttle in ms."""
        return self.record_and_get_throttle_ms(
            user, client_id, time_ns * NANOS_TO_PERCENTAGE_PER_SECOND, now_ms
        )


class ControllerMutationQuotaManager(ClientQuotaManager):
    """``controller_mutation_rate`` (KIP-599): one token bucket per tags, B = N x W x Q permits."""

    __slots__ = ()

    def __init__(
        self,
        window: QuotaWindow | None = None,
        *,
        lookup_limit: int = 100_000,
        max_entities: int = DEFAULT_MAX_ENTITIES,
        on_overflow: OverflowReport | None = None,
    ) -> None:
        super().__init__(
            QuotaKey.CONTROLLER_MUTATION_RATE,
            window,
            SensorKind.TOKEN_BUCKET,
            lookup_limit=lookup_limit,
            max_entities=max_entities,
            on_overflow=on_overflow,
        )

    def new_quota(
        self, user: str, client_id: str | None, strict: bool, now_ms: int
    ) -> ControllerMutationQuota:
        """The quota object for one mutation request; unbounded when no mutation quota is configured."""
        if not self._rules.enabled_bits:
            return UNBOUNDED_CONTROLLER_MUTATION_QUOTA
        sensor = self.sensor_for(user, client_id, now_ms)
        if strict:
            return StrictControllerMutationQuota(sensor)
        return PermissiveControllerMutationQuota(sensor)

    def new_quota_for_request(
        self, user: str, client_id: str | None, api_key: int, api_version: int, now_ms: int
    ) -> ControllerMutationQuota:
        """Strict or permissive by version: CreateTopics >= 6, DeleteTopics >= 5, CreatePartitions >= 3."""
        return self.new_quota(user, client_id, is_strict(api_key, api_version), now_ms)

    def record_and_get_throttle_ms(self, user: str, client_id: str | None, value: float, now_ms: int) -> int:
        """Kafka's strict recording: refuse (return the throttle, record nothing) while tokens < 0."""
        if not self._rules.enabled_bits:
            return 0
        sensor = self.sensor_for(user, client_id, now_ms)
        tokens = sensor.measure(now_ms)
        if tokens < 0:
            return to_int32(token_bucket_throttle_time(tokens, sensor.bound))
        sensor.record(value, now_ms, False)
        return 0


class QuotaManagers:
    """The four managers built from one :class:`QuotaConfig`, with quotas routed by key.

    ``set_quota(entity, key, value)`` is what the configuration layer calls for each configured quota
    (``value=None`` removes it); a key only ever affects its own manager (spec §2.1).
    """

    __slots__ = ("config", "controller_mutation", "fetch", "produce", "request")

    def __init__(self, config: QuotaConfig | None = None, on_overflow: OverflowReport | None = None) -> None:
        self.config = QuotaConfig() if config is None else config
        cfg = self.config
        legacy = cfg.legacy_windows
        self.produce = ClientQuotaManager(
            QuotaKey.PRODUCER_BYTE_RATE,
            cfg.client_window,
            cfg.sensor_kind(QuotaKey.PRODUCER_BYTE_RATE),
            legacy_windows=legacy,
            max_entities=cfg.max_entities,
            on_overflow=on_overflow,
        )
        self.fetch = ClientQuotaManager(
            QuotaKey.CONSUMER_BYTE_RATE,
            cfg.client_window,
            cfg.sensor_kind(QuotaKey.CONSUMER_BYTE_RATE),
            legacy_windows=legacy,
            max_entities=cfg.max_entities,
            on_overflow=on_overflow,
        )
        self.request = RequestQuotaManager(
            cfg.client_window,
            cfg.sensor_kind(QuotaKey.REQUEST_PERCENTAGE),
            legacy_windows=legacy,
            max_entities=cfg.max_entities,
            on_overflow=on_overflow,
        )
        self.controller_mutation = ControllerMutationQuotaManager(
            cfg.controller_window, max_entities=cfg.max_entities, on_overflow=on_overflow
        )

    def manager(self, key: QuotaKey) -> ClientQuotaManager:
        key = parse_quota_key(key)
        if key is QuotaKey.PRODUCER_BYTE_RATE:
            return self.produce
        if key is QuotaKey.CONSUMER_BYTE_RATE:
            return self.fetch
        if key is QuotaKey.REQUEST_PERCENTAGE:
            return self.request
        return self.controller_mutation

    def report_overflows_to(self, on_overflow: OverflowReport | None) -> None:
        """Tell `on_overflow` of every entity sent to an overflow sensor, whichever manager it was."""
        for manager in (self.produce, self.fetch, self.request, self.controller_mutation):
            manager._on_overflow = on_overflow

    def set_quota(self, entity: QuotaEntity, key: QuotaKey, value: float | None) -> None:
        self.manager(key).update_quota(entity, value)

    def expire_idle_sensors(self, now_ms: int) -> int:
        return sum(
            m.expire_idle_sensors(now_ms)
            for m in (self.produce, self.fetch, self.request, self.controller_mutation)
        )
