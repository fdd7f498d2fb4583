"""Quota metrics named after Kafka's (`byte-rate`, `request-time`, `throttle-time`, `tokens`), per quota type
with `user` and `client_id` labels, read from the quota engine's sensors when Prometheus scrapes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sluice.quota import QuotaManagers, QuotaTags, QuotaWindow, SampledRate, WindowQuotaSensor
from sluice.quota.usage_ledger import EntityUsage

from .log import get_logger
from .metrics import api_name
from .throttle_episodes import ThrottleEpisodes

_MAX_ENTITIES = 10_000
# Sensors measured between two returns to the event loop during a scrape (~0.5 ms of work).
SCRAPE_CHUNK = 256
_KINDS = ("Produce", "Fetch", "Request", "ControllerMutation")
_Key = TypeVar("_Key")  # what a throttle count is kept by
_log = get_logger("sluice.throttle")


class UsageByEntity(Protocol):
    """Where throttles are added to the usage ledger (the usage recorder's `UsageRecording`). A protocol, so
    observability, below the filters and the data path, imports neither."""

    def usage(self, user: str, client_id: str | None) -> EntityUsage: ...


class WaitingRequests(Protocol):
    """The entity gates (proxy/data_path/entity_gate.py), as far as a scrape reads them."""

    @property
    def waiting(self) -> int:
        """Requests waiting for their turn now, at every gate."""
        ...


def _labels(kind: str, user: str, client_id: str | None) -> list[str]:
    return [kind, user, client_id or ""]


class ThrottleStats:
    """Throttles handed out.

    * per quota type (Produce, Fetch, Request) and entity: Kafka's `throttle-time`, the throttle each quota
      computed, as count, sum and max; from an entity's first charged request on (`touch`), so a series
      exists at 0 before the quota first binds;
    * per API: the `throttle_time_ms` values Sluice wrote into responses (what clients were told);
    * with `episodes`, a `throttle_started` log event when an entity starts being throttled (and the sweep
      logs `throttle_stopped`), never one per request;
    * with `usage` (usage records on), the quota filters also add what they charge to the usage ledger:
      throttles here, CPU time and partition mutations through `usage` directly;
    * `gate_timeouts`: Produce requests the entity gate answered REQUEST_TIMED_OUT, their client's timeout
      having passed while they waited (one count for the proxy: no label an entity could multiply);
    * `gates`: the entity gates, once made (how many requests wait at them now).
    """

    def __init__(self, episodes: ThrottleEpisodes | None = None) -> None:
        self.by_quota: dict[tuple[str, QuotaTags], list[int]] = {}
        self.by_response: dict[int, list[int]] = {}
        self.gate_timeouts = 0
        self.gates: WaitingRequests | None = None
        self.episodes = episodes
        self.usage: UsageByEntity | None = None

    def touch(self, kind: str, tags: QuotaTags) -> None:
        """An entity was charged: its throttle series exist (at 0) from now on."""
        key = (kind, tags)
        if key not in self.by_quota:
            self._make_room(key)
            self.by_quota[key] = [0, 0, 0]

    def record_quota(
        self,
        kind: str,
        tags: QuotaTags,
        throttle_ms: int,
        now_ms: int | None = None,
        entity: tuple[str, str | None] | None = None,
    ) -> None:
        """Keyed by the sensor's tags, as Kafka's throttle-time is, so label sets match sluice_byte_rate.
        `entity` (user, client-id) is who it was given to, for the usage records."""
        key = (kind, tags)
        self._make_room(key)
        _add(self.by_quota, key, throttle_ms)
        if self.usage is not None and entity is not None:
            self.usage.usage(*entity).add_throttle(kind, throttle_ms)
        if self.episodes is not None and now_ms is not None:
            for event in self.episodes.throttled(kind, tags, throttle_ms, now_ms):
                _log.info(event.event, **event.fields)

    def sweep_episodes(self, now_ms: int) -> None:
        """Log the episodes that ended (call about once a second)."""
        if self.episodes is not None:
            for event in self.episodes.sweep(now_ms):
                _log.info(event.event, **event.fields)

    def _make_room(self, key: tuple[str, QuotaTags]) -> None:
        if len(self.by_quota) >= _MAX_ENTITIES and key not in self.by_quota:
            # Per-instance client-ids (producer-1, producer-2, ...) must not grow memory without bound;
            # a counter that restarts is something Prometheus handles.
            self.by_quota.clear()

    def record_response(self, api_key: int, throttle_ms: int) -> None:
        _add(self.by_response, api_key, throttle_ms)


class MutationRates:
    """Kafka's informational `mutation-rate`: partitions created or deleted per second, per entity, over
    the controller quota window (the `tokens` bucket beside it is what enforces)."""

    def __init__(self, window: QuotaWindow) -> None:
        self._window = window
        self.by_tags: dict[QuotaTags, SampledRate] = {}

    def record(self, tags: QuotaTags, permits: int, now_ms: int) -> None:
        rate = self.by_tags.get(tags)
        if rate is None:
            if len(self.by_tags) >= _MAX_ENTITIES:
                self.by_tags.clear()  # bounded, as ThrottleStats
            rate = self.by_tags[tags] = SampledRate(self._window.num_samples, self._window.window_ms)
        rate.record(permits, now_ms)


def _add(stats: dict[_Key, list[int]], key: _Key, throttle_ms: int) -> None:
    entry = stats.get(key)
    if entry is None:
        stats[key] = [1, throttle_ms, throttle_ms]
    else:
        entry[0] += 1
        entry[1] += throttle_ms
        entry[2] = max(entry[2], throttle_ms)


class QuotaCollector(Collector):
    def __init__(
        self,
        managers: QuotaManagers,
        stats: ThrottleStats,
        now_ms: Callable[[], int],
        mutation_rates: MutationRates | None = None,
    ) -> None:
        self._managers = managers
        self._stats = stats
        self._now_ms = now_ms
        self._mutation_rates = mutation_rates

    def collect(self) -> Iterator[Any]:
        families: list[Any] = []
        for _ in self._collect_into(families):
            pass
        return iter(families)

    async def collect_async(self) -> list[Any]:
        """The same families, handing the loop back every SCRAPE_CHUNK sensors so clients are served."""
        families: list[Any] = []
        for _ in self._collect_into(families):
            await asyncio.sleep(0)
        return families

    def _collect_into(self, out: list[Any]) -> Iterator[None]:
        """Append the families to `out`; yields between chunks of sensors (the caller may pause there)."""
        now = self._now_ms()
        labels = ["type", "user", "client_id"]
        rate = GaugeMetricFamily(
            "sluice_byte_rate", "Measured bytes/s of a quota sensor (Kafka byte-rate)", labels=labels
        )
        request_time = GaugeMetricFamily(
            "sluice_request_time", "Measured % of a thread (Kafka request-time)", labels=labels
        )
        tokens = GaugeMetricFamily(
            "sluice_quota_tokens", "Tokens left in a token-bucket quota sensor", labels=labels
        )
        bound = GaugeMetricFamily("sluice_quota_bound", "The quota a sensor enforces", labels=labels)
        managers = self._managers
        by_kind = zip(
            _KINDS,
            (managers.produce, managers.fetch, managers.request, managers.controller_mutation),
            strict=True,
        )
        entities = GaugeMetricFamily(
            "sluice_quota_entities", "Quota sensors tracked now, by quota type", labels=["type"]
        )
        overflows = CounterMetricFamily(
            "sluice_quota_entities_overflow",
            "New entities that found quota.max_entities reached and shared an overflow sensor",
            labels=["type"],
        )
        done = 0
        for kind, manager in by_kind:
            entities.add_metric([kind], manager.tracked)
            overflows.add_metric([kind], manager.overflows)
            for tags, sensor in manager.sensors():
                done += 1
                if done % SCRAPE_CHUNK == 0:
                    yield
                values = _labels(kind, tags.user, tags.client_id)
                bound.add_metric(values, sensor.bound)
                if not isinstance(sensor, WindowQuotaSensor):
                    tokens.add_metric(values, sensor.measure(now))
                elif kind == "Request":
                    request_time.add_metric(values, sensor.measure(now))
                else:
                    rate.add_metric(values, sensor.measure(now))
        mutation_rate = GaugeMetricFamily(
            "sluice_mutation_rate",
            "Partitions created or deleted per second (Kafka mutation-rate)",
            labels=["user", "client_id"],
        )
        if self._mutation_rates is not None:
            for tags, sampled in list(self._mutation_rates.by_tags.items()):
                mutation_rate.add_metric([tags.user, tags.client_id or ""], sampled.measure(now))
        out += (entities, overflows, rate, request_time, tokens, bound, mutation_rate)
        count = CounterMetricFamily("sluice_throttles", "Throttles computed, by quota type", labels=labels)
        total = CounterMetricFamily(
            "sluice_throttle_time_ms", "Sum of throttles computed (Kafka throttle-time)", labels=labels
        )
        largest = GaugeMetricFamily("sluice_throttle_time_max_ms", "Largest throttle computed", labels=labels)
        for (kind, tags), (n, ms, most) in list(self._stats.by_quota.items()):
            values = _labels(kind, tags.user, tags.client_id)
            count.add_metric(values, n)
            total.add_metric(values, ms)
            largest.add_metric(values, most)
        out += (count, total, largest)
        told = CounterMetricFamily(
            "sluice_throttled_responses", "Responses whose throttle_time_ms Sluice set", labels=["api"]
        )
        told_ms = CounterMetricFamily(
            "sluice_throttled_response_ms", "Sum of the throttle_time_ms values Sluice set", labels=["api"]
        )
        for api_key, (n, ms, _most) in list(self._stats.by_response.items()):
            told.add_metric([api_name(api_key)], n)
            told_ms.add_metric([api_name(api_key)], ms)
        out += (told, told_ms)
        gate_timeouts = CounterMetricFamily(
            "sluice_gate_timed_out_requests",
            "Produce requests answered REQUEST_TIMED_OUT at the entity gate: their client's timeout_ms "
            "passed while they waited (quota.mute_scope: entity)",
        )
        gate_timeouts.add_metric([], self._stats.gate_timeouts)
        gates = self._stats.gates
        gate_waiting = GaugeMetricFamily(
            "sluice_gate_waiting_requests",
            "Produce requests waiting now for their turn at an entity's gate (quota.mute_scope: entity)",
            value=gates.waiting if gates is not None else 0,
        )
        out += (gate_timeouts, gate_waiting)
