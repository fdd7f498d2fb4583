"""Throttle episodes: one event when an entity starts being throttled and one when it stops, bounded."""

from __future__ import annotations

from sluice.proxy.observability.throttle_episodes import ThrottleEpisodes
from sluice.quota import QuotaTags

PUMP = QuotaTags("", "pump")


def test_an_episode_logs_its_start_and_its_end_not_every_throttle() -> None:
    episodes = ThrottleEpisodes(quiet_ms=5_000)
    (started,) = episodes.throttled("Produce", PUMP, 800, now_ms=1_000)
    assert started.event == "throttle_started"
    assert started.fields == {"quota_type": "Produce", "user": "", "client_id": "pump", "throttle_ms": 800}
    for t in range(2_000, 12_000, 1_000):
        assert episodes.throttled("Produce", PUMP, 900, now_ms=t) == ()
    assert episodes.sweep(16_000) == []  # 11,900 + 5,000 not passed yet
    (stopped,) = episodes.sweep(16_901)
    assert stopped.event == "throttle_stopped"
    assert stopped.fields == {
        "quota_type": "Produce",
        "user": "",
        "client_id": "pump",
        "duration_ms": 11_900 - 1_000,
        "throttles": 11,
        "throttle_ms_total": 800 + 10 * 900,
        "throttle_ms_max": 900,
    }
    assert len(episodes) == 0


def test_quota_types_and_entities_have_their_own_episodes() -> None:
    episodes = ThrottleEpisodes()
    assert len(episodes.throttled("Produce", PUMP, 10, 0)) == 1
    assert len(episodes.throttled("Fetch", PUMP, 10, 0)) == 1
    assert len(episodes.throttled("Produce", QuotaTags("alice", "pump"), 10, 0)) == 1
    assert len(episodes) == 3


def test_a_new_throttle_after_the_quiet_time_starts_a_new_episode_even_before_a_sweep() -> None:
    episodes = ThrottleEpisodes(quiet_ms=1_000)
    episodes.throttled("Produce", PUMP, 100, 0)
    stopped, started = episodes.throttled("Produce", PUMP, 50, 1_101)
    assert (stopped.event, stopped.fields["throttles"]) == ("throttle_stopped", 1)
    assert started.event == "throttle_started"


def test_starts_are_rate_limited_and_the_rest_counted() -> None:
    episodes = ThrottleEpisodes(quiet_ms=1_000, max_starts_per_s=3)
    logged = [e for i in range(10) for e in episodes.throttled("Produce", QuotaTags("", f"c{i}"), 10, 500)]
    assert len(logged) == 3
    # The next second has its own budget.
    assert len(episodes.throttled("Produce", QuotaTags("", "late"), 10, 1_000)) == 1
    events = episodes.sweep(2_100)
    assert [e.event for e in events].count("throttle_stopped") == 4  # only logged episodes say they stopped
    assert events[-1].event == "throttle_events_suppressed"
    assert events[-1].fields == {"episodes": 7}
    assert episodes.sweep(3_000) == []


def test_open_episodes_are_bounded() -> None:
    episodes = ThrottleEpisodes(max_starts_per_s=1_000, max_entities=5)
    for i in range(8):
        episodes.throttled("Produce", QuotaTags("", f"c{i}"), 10, 0)
    assert len(episodes) == 5
    assert episodes.sweep(0)[-1].fields == {"episodes": 3}
