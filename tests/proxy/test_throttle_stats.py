"""Per-entity throttle metrics exist from the first charged request; throttle episodes are logged."""

from __future__ import annotations

from prometheus_client.core import CollectorRegistry
from structlog.testing import capture_logs

from sluice.proxy.observability.quota_metrics import QuotaCollector, ThrottleStats
from sluice.proxy.observability.throttle_episodes import ThrottleEpisodes
from sluice.quota import QuotaEntity, QuotaKey, QuotaManagers, QuotaTags

PUMP = QuotaTags("", "pump")


def _scrape(stats: ThrottleStats) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(QuotaCollector(QuotaManagers(), stats, lambda: 0))
    return registry


def test_an_entity_has_throttle_series_at_zero_from_its_first_charge() -> None:
    stats = ThrottleStats()
    labels = {"type": "Produce", "user": "", "client_id": "pump"}
    assert _scrape(stats).get_sample_value("sluice_throttles_total", labels) is None
    stats.touch("Produce", PUMP)
    registry = _scrape(stats)
    assert registry.get_sample_value("sluice_throttles_total", labels) == 0
    assert registry.get_sample_value("sluice_throttle_time_ms_total", labels) == 0
    stats.record_quota("Produce", PUMP, 250)
    stats.touch("Produce", PUMP)  # touching again keeps the counts
    assert _scrape(stats).get_sample_value("sluice_throttle_time_ms_total", labels) == 250


def test_episodes_are_logged_when_they_start_and_stop() -> None:
    stats = ThrottleStats(ThrottleEpisodes(quiet_ms=1_000))
    with capture_logs() as logs:
        for t in range(0, 3_000, 100):
            stats.record_quota("Produce", PUMP, 300, now_ms=t)
        stats.sweep_episodes(3_000)
        stats.sweep_episodes(4_201)  # the last throttle ends at 3,200, then 1,000 quiet
    assert [entry["event"] for entry in logs] == ["throttle_started", "throttle_stopped"]
    assert logs[1]["throttles"] == 30
    assert logs[1]["client_id"] == "pump"


def test_the_bound_in_force_comes_with_the_metrics() -> None:
    managers = QuotaManagers()
    managers.set_quota(QuotaEntity(client_id="pump"), QuotaKey.PRODUCER_BYTE_RATE, 1000)
    managers.produce.record_and_get_throttle_ms("", "pump", 10, 0)
    registry = CollectorRegistry()
    registry.register(QuotaCollector(managers, ThrottleStats(), lambda: 0))
    labels = {"type": "Produce", "user": "", "client_id": "pump"}
    assert registry.get_sample_value("sluice_quota_bound", labels) == 1000
