"""The usage ledger: what one Sluice process admitted per entity (and per topic) in the current interval.

The filters add to it as they forward requests and responses; the usage publisher drains it once per
interval into a :class:`~quota.usage_records.UsageBatch` (the schema of ``docs/usage-records.md``). Sans-IO
and clock-free: the caller says when the interval started and how long it was.

Bounded: at most ``max_entities`` entities and ``max_topics`` (topic, broker) pairs per entity are kept
per interval.
What does not fit is counted (``overflow_entities``, ``overflow_topics`` and the bytes they carried), never
kept, so a client that invents a new client-id per request cannot grow memory or the usage topic.

On the hot path a filter asks :meth:`UsageLedger.entity` once per request and adds to the returned
:class:`EntityUsage` directly. ``generation`` changes at every drain, so a caller may keep the
:class:`EntityUsage` it got until then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from sluice.quota.managers import QuotaManagers
from sluice.quota.usage_records import UsageBatch, UsageRow

DEFAULT_MAX_ENTITIES = 10_000
DEFAULT_MAX_TOPICS = 1_000
# Refused entities are remembered (to count each once) up to this many per interval.
_REFUSED_LIMIT = 10_000

EntityKey = tuple[str, str | None]
# (user, client_id) -> {quota key: bound}, the bounds in force for that entity (none when unlimited).
BoundsOf = Callable[[str, str | None], Mapping[str, float]]


class EntityUsage:
    """One entity's counters for the current interval. Add to the fields; the ledger reads them at drain."""

    __slots__ = (
        "_max_topics",
        "_overflow",
        "cpu_time_ns",
        "fetch_bytes",
        "partition_mutations",
        "produce_bytes",
        "requests",
        "throttle_count",
        "throttle_time_ms",
        "topics",
    )

    def __init__(self, max_topics: int, overflow: _Overflow) -> None:
        self.produce_bytes = 0
        self.fetch_bytes = 0
        self.partition_mutations = 0
        self.cpu_time_ns = 0
        self.requests: dict[int, int] = {}  # API key -> count
        self.throttle_time_ms: dict[str, int] = {}  # quota type -> ms
        self.throttle_count: dict[str, int] = {}
        # (topic, broker node or None) -> [produce bytes, fetch bytes]
        self.topics: dict[tuple[str, int | None], list[int]] = {}
        self._max_topics = max_topics
        self._overflow = overflow

    def add_request(self, api_key: int) -> None:
        requests = self.requests
        requests[api_key] = requests.get(api_key, 0) + 1

    def add_throttle(self, quota_type: str, throttle_ms: int) -> None:
        """One throttle handed out for `quota_type` (Produce, Fetch, Request, ControllerMutation)."""
        self.throttle_time_ms[quota_type] = self.throttle_time_ms.get(quota_type, 0) + throttle_ms
        self.throttle_count[quota_type] = self.throttle_count.get(quota_type, 0) + 1

    def add_topics(self, found: Iterable[tuple[str, int]], fetched: bool, broker: int | None = None) -> None:
        """Record-set bytes per topic, produced (`fetched` False) or fetched, through broker node `broker`
        (None: not known)."""
        topics = self.topics
        at = 1 if fetched else 0
        for topic, size in found:
            key = (topic, broker)
            counters = topics.get(key)
            if counters is None:
                if len(topics) >= self._max_topics:
                    self._overflow.topics += 1
                    self._overflow.bytes += size
                    continue
                counters = topics[key] = [0, 0]
            counters[at] += size

    def is_empty(self) -> bool:
        return not (
            self.produce_bytes
            or self.fetch_bytes
            or self.partition_mutations
            or self.cpu_time_ns
            or self.requests
            or self.throttle_count
            or self.topics
        )


class _Overflow:
    """What did not fit in one interval: counted, not kept."""

    __slots__ = ("bytes", "entities", "refused", "topics")

    def __init__(self) -> None:
        self.entities = 0
        self.topics = 0
        self.bytes = 0
        # Refused entities, to count each once; itself bounded (beyond it, every refused look-up counts).
        self.refused: set[EntityKey] = set()


class _OverflowSink(EntityUsage):
    """Stands in for entities beyond the cap, so callers never check for None; its bytes are counted."""

    __slots__ = ()

    def add_topics(self, found: Iterable[tuple[str, int]], fetched: bool, broker: int | None = None) -> None:
        return None


class UsageLedger:
    """Counters per (user, client-id) for the current interval, drained once per interval."""

    __slots__ = (
        "_entities",
        "_max_entities",
        "_max_topics",
        "_overflow",
        "_sink",
        "generation",
        "instance",
        "overflow_bytes_total",
        "overflow_entities_total",
        "overflow_topics_total",
    )

    def __init__(
        self,
        instance: str,
        *,
        max_entities: int = DEFAULT_MAX_ENTITIES,
        max_topics: int = DEFAULT_MAX_TOPICS,
    ) -> None:
        if max_entities < 1 or max_topics < 0:
            raise ValueError("max_entities must be >= 1 and max_topics >= 0")
        self.instance = instance
        self._max_entities = max_entities
        self._max_topics = max_topics
        self._entities: dict[EntityKey, EntityUsage] = {}
        self._overflow = _Overflow()
        self._sink = _OverflowSink(0, self._overflow)
        self.generation = 0
        # Cumulative, for metrics: what the cap kept out of the records since start.
        self.overflow_entities_total = 0
        self.overflow_topics_total = 0
        self.overflow_bytes_total = 0

    def __len__(self) -> int:
        return len(self._entities)

    @property
    def overflow_entities(self) -> int:
        """Distinct entities refused in the current interval."""
        return self._overflow.entities

    def entity(self, user: str, client_id: str | None) -> EntityUsage:
        """This interval's counters of (user, client-id); beyond the cap, a counted sink that is dropped."""
        key = (user, client_id)
        usage = self._entities.get(key)
        if usage is None:
            if len(self._entities) >= self._max_entities:
                overflow = self._overflow
                refused = overflow.refused
                if key not in refused:
                    overflow.entities += 1
                    if len(refused) < _REFUSED_LIMIT:
                        refused.add(key)
                return self._sink
            usage = self._entities[key] = EntityUsage(self._max_topics, self._overflow)
        return usage

    def drain(
        self,
        interval_start_ms: int,
        interval_ms: int,
        bounds: BoundsOf | None = None,
        api_name: Callable[[int], str] = str,
    ) -> UsageBatch:
        """The interval's rows as a batch, and a fresh interval. Entities that did nothing are left out.

        `interval_start_ms` is wall-clock (ms since the epoch, the schema's unit); `bounds` gives the quotas
        in force per entity, `api_name` Kafka's name of an API key.
        """
        rows: list[UsageRow] = []
        for (user, client_id), usage in self._entities.items():
            if usage.is_empty():
                continue
            rows.append(
                UsageRow(
                    user=user,
                    client_id=client_id,
                    produce_bytes=usage.produce_bytes,
                    fetch_bytes=usage.fetch_bytes,
                    requests={api_name(key): n for key, n in sorted(usage.requests.items())},
                    throttle_time_ms=dict(usage.throttle_time_ms),
                    throttle_count=dict(usage.throttle_count),
                    partition_mutations=usage.partition_mutations,
                    cpu_time_ns=usage.cpu_time_ns,
                    quotas=dict(bounds(user, client_id)) if bounds is not None else {},
                )
            )
            for (topic, broker), (produced, fetched) in usage.topics.items():
                if produced or fetched:
                    rows.append(
                        UsageRow(
                            user, client_id, topic, produce_bytes=produced, fetch_bytes=fetched, broker=broker
                        )
                    )
        sink = self._sink
        overflow = self._overflow
        overflow.bytes += sink.produce_bytes + sink.fetch_bytes
        self.overflow_entities_total += overflow.entities
        self.overflow_topics_total += overflow.topics
        self.overflow_bytes_total += overflow.bytes
        self._entities = {}
        self._overflow = _Overflow()
        self._sink = _OverflowSink(0, self._overflow)
        self.generation += 1
        return UsageBatch(self.instance, interval_start_ms, interval_ms, tuple(rows))


def bounds_in_force(managers: QuotaManagers) -> BoundsOf:
    """`bounds` for :meth:`UsageLedger.drain`: each quota key's bound for the entity, where one applies."""
    keyed = (managers.produce, managers.fetch, managers.request, managers.controller_mutation)

    def bounds(user: str, client_id: str | None) -> dict[str, float]:
        found: dict[str, float] = {}
        for manager in keyed:
            if manager.quotas_enabled:
                resolution = manager.resolve(user, client_id)
                if resolution.rule is not None:
                    found[manager.key.value] = resolution.bound
        return found

    return bounds
