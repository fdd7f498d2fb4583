"""Fleet-wide enforcement: other instances' usage charged into this instance's sensors, on a manual clock."""

from __future__ import annotations

import pytest
from fleet_sim import simulate_fleet

from sluice.quota import QuotaConfig, QuotaEntity, QuotaKey, QuotaManagers, SensorKind
from sluice.quota.fleet import LIVENESS_INTERVALS, FleetQuotas, PeerEstimate
from sluice.quota.usage_records import UsageBatch, UsageRow

Q = 100_000
WALL = 1_800_000_000_000


def _managers(sensor: str = "window") -> QuotaManagers:
    managers = QuotaManagers(QuotaConfig(sensor_kinds={QuotaKey.PRODUCER_BYTE_RATE: SensorKind(sensor)}))
    managers.set_quota(QuotaEntity(client_id="pump"), QuotaKey.PRODUCER_BYTE_RATE, Q)
    managers.set_quota(QuotaEntity(client_id="pump"), QuotaKey.REQUEST_PERCENTAGE, 50)
    return managers


def _batch(instance: str, end_ms: int, *rows: UsageRow, interval_ms: int = 1000) -> UsageBatch:
    return UsageBatch(instance, WALL + end_ms - interval_ms, interval_ms, rows)


def _fleet(sensor: str = "window") -> FleetQuotas:
    fleet = FleetQuotas(_managers(sensor), "me")
    fleet.install()
    return fleet


def test_another_instances_usage_is_recorded_not_throttled_on() -> None:
    fleet = _fleet()
    produce = fleet.managers.produce
    # 1.5 MB from elsewhere: over the quota's window (10 s x 100 kB/s), yet the charge throttles no one.
    charged = fleet.charge(
        _batch("other", 1000, UsageRow("ANONYMOUS", "pump", produce_bytes=1_500_000)), 1000, WALL + 1000
    )
    assert charged == 1
    sensor = produce.sensor_for("ANONYMOUS", "pump", 1000)
    assert sensor.measure(1000) == pytest.approx(150_000)
    # ... it weighs on this instance's own client at its next request.
    assert produce.record_and_get_throttle_ms("ANONYMOUS", "pump", 100, 1000) > 0


def test_every_delivery_delay_is_counted_in_its_bucket_and_the_latest_is_kept() -> None:
    fleet = _fleet()
    row = UsageRow("ANONYMOUS", "pump", produce_bytes=10)
    delays = (300, 1200, 100, 10_001, 0)  # a bucket's bound is in it; past the last, the overflow's
    for i, delay_ms in enumerate(delays):
        end_ms = 1000 * (i + 1)
        fleet.charge(_batch("other", end_ms, row), end_ms + delay_ms, WALL + end_ms + delay_ms)
    assert fleet.last_delay_ms == 0
    # buckets: <=100, 250, 500, 1000, 2000, 5000, 10000, more
    assert fleet.delay_counts == [2, 0, 1, 0, 1, 0, 0, 1]
    assert fleet.delay_sum_ms == sum(delays)


@pytest.mark.parametrize("sensor", ["window", "token_bucket"])
def test_the_same_entity_is_charged_by_its_raw_identity(sensor: str) -> None:
    fleet = _fleet(sensor)
    fleet.charge(_batch("other", 0, UsageRow("alice", "pump", produce_bytes=5_000)), 0, WALL)
    # A client-id quota: alice/pump and bob/pump share one sensor here, as on the instance that admitted it.
    assert fleet.managers.produce.sensor_for("bob", "pump", 0) is fleet.managers.produce.sensor_for(
        "alice", "pump", 0
    )
    untouched = _managers(sensor).produce.sensor_for("bob", "pump", 0).measure(0)
    assert fleet.managers.produce.sensor_for("bob", "pump", 0).measure(0) != untouched


def test_own_batches_topic_rows_and_unshared_keys_are_not_charged() -> None:
    fleet = _fleet()
    own = _batch("me", 1000, UsageRow("ANONYMOUS", "pump", produce_bytes=9_999))
    assert fleet.charge(own, 1000, WALL + 1000) == 0
    other = _batch(
        "other",
        1000,
        UsageRow("ANONYMOUS", "pump", topic="orders", produce_bytes=7_000),
        UsageRow("ANONYMOUS", "pump", cpu_time_ns=900_000_000),  # request_percentage is per instance
    )
    assert fleet.charge(other, 1000, WALL + 1000) == 0
    assert fleet.managers.produce.sensor_for("ANONYMOUS", "pump", 1000).measure(1000) == 0
    assert fleet.managers.request.sensor_for("ANONYMOUS", "pump", 1000).measure(1000) == 0


def test_request_time_is_charged_when_shared() -> None:
    fleet = FleetQuotas(_managers(), "me", {QuotaKey.REQUEST_PERCENTAGE})
    fleet.charge(_batch("other", 0, UsageRow("ANONYMOUS", "pump", cpu_time_ns=2_000_000_000)), 0, WALL)
    # 2 s of CPU time = 200 % of one thread-second, over the minimum window of 10 s.
    assert fleet.managers.request.sensor_for("ANONYMOUS", "pump", 0).measure(0) == pytest.approx(20.0)


def test_nothing_is_charged_without_a_quota() -> None:
    managers = QuotaManagers()
    fleet = FleetQuotas(managers, "me")
    assert fleet.charge(_batch("other", 0, UsageRow("u", "c", produce_bytes=10)), 0, WALL) == 0
    assert list(managers.produce.sensors()) == []


def test_a_batch_older_than_the_quota_window_is_skipped() -> None:
    fleet = _fleet()
    old = _batch("other", 0, UsageRow("ANONYMOUS", "pump", produce_bytes=50_000))
    # N x W = 11 s: a batch that ended 11.001 s ago holds nothing a window still counts.
    assert fleet.charge(old, 20_000, WALL + 11_001) == 0
    assert fleet.batches_stale == 1
    assert fleet.charge(old, 20_000, WALL + 11_000) == 1
    assert fleet.batches_charged == 1


def test_remote_charges_age_out_of_the_window_within_one_quota_window() -> None:
    fleet = _fleet("window")
    fleet.charge(_batch("other", 0, UsageRow("ANONYMOUS", "pump", produce_bytes=500_000)), 0, WALL)
    sensor = fleet.managers.produce.sensor_for("ANONYMOUS", "pump", 0)
    assert sensor.measure(10_999) > 0
    assert sensor.measure(11_000) == 0  # N x W after its last event


def test_a_silent_peer_is_forgotten_and_its_estimates_stop_counting() -> None:
    fleet = _fleet()
    for t in range(0, 5000, 1000):
        fleet.charge(_batch("other", t, UsageRow("ANONYMOUS", "pump", produce_bytes=50_000)), t, WALL + t)
    assert fleet.live == ("other",)
    produce = fleet.managers.produce
    produce.record_and_get_throttle_ms("ANONYMOUS", "pump", 10_000, 4500)
    estimate = produce.sensor_for("ANONYMOUS", "pump", 4500).peers
    assert isinstance(estimate, PeerEstimate)
    assert estimate.pending(4500, fleet) == pytest.approx(3 * 10_000)  # its share is 5x ours, capped at 3x
    # Its batch covering 4500 arrives (nothing for this entity in it): the estimate is replaced by it.
    fleet.charge(
        _batch("other", 5000, UsageRow("ANONYMOUS", "other-client", produce_bytes=1)), 5000, WALL + 5000
    )
    assert estimate.pending(5000, fleet) == 0
    produce.record_and_get_throttle_ms("ANONYMOUS", "pump", 10_000, 5500)
    assert estimate.pending(5500, fleet) > 0
    # Then it stops publishing: after three of its intervals it is gone, and so is what was estimated.
    assert fleet.expire_peers(5000 + LIVENESS_INTERVALS * 1000) == []
    assert fleet.expire_peers(5001 + LIVENESS_INTERVALS * 1000) == ["other"]
    assert fleet.live == ()
    assert estimate.pending(8001, fleet) == 0


def test_an_empty_batch_keeps_a_peer_alive() -> None:
    fleet = _fleet()
    for t in range(0, 10_000, 1000):
        fleet.charge(_batch("idle-peer", t), t, WALL + t)
    assert fleet.live == ("idle-peer",)
    assert fleet.peers() == {"idle-peer": 9000}


def test_without_the_fleet_installed_the_managers_are_kafkas() -> None:
    """Sharing off: the same records give exactly the throttles of managers that never heard of a fleet."""
    plain = _managers()
    fleet = FleetQuotas(_managers(), "me")  # built, never installed
    for t in range(0, 30_000, 7):
        expected = plain.produce.record_and_get_throttle_ms("u", "pump", 1_000, t)
        assert fleet.managers.produce.record_and_get_throttle_ms("u", "pump", 1_000, t) == expected


# ---- the fleet on a simulated clock (tests/fleet_sim.py) ----------------------------------------

STEADY = (30_000, 150_000)  # after the initial allowances, 120 s


@pytest.mark.parametrize("sensor", ["window", "token_bucket"])
@pytest.mark.parametrize("seed", range(8))
def test_three_flat_out_instances_share_one_quota(sensor: str, seed: int) -> None:
    run = simulate_fleet(sensor, seed=seed)
    assert run.slope(*STEADY) == pytest.approx(Q, rel=0.05)


@pytest.mark.parametrize("sensor", ["window", "token_bucket"])
def test_without_sharing_three_instances_admit_three_quotas(sensor: str) -> None:
    run = simulate_fleet(sensor, sharing=False)
    assert run.slope(*STEADY) == pytest.approx(3 * Q, rel=0.05)


@pytest.mark.parametrize("sensor", ["window", "token_bucket"])
def test_the_window_sensor_needs_the_estimate_of_unreported_usage(sensor: str) -> None:
    """Without the estimate, each instance spends the headroom it sees before hearing of the others."""
    slopes = [simulate_fleet(sensor, seed=seed, estimate=False).slope(*STEADY) for seed in range(8)]
    if sensor == "window":
        assert max(slopes) > 1.15 * Q
    else:
        # A token bucket conserves: late charges still count in full.
        assert all(slope == pytest.approx(Q, rel=0.05) for slope in slopes)


@pytest.mark.parametrize("sensor", ["window", "token_bucket"])
def test_one_instance_dies_and_the_others_converge_within_one_quota_window(sensor: str) -> None:
    kill = 60_000
    run = simulate_fleet(sensor, stop={0: kill}, duration_ms=160_000)
    assert run.rate(kill + 1000, 160_000, {0}) == 0
    # One quota window (N x W = 11 s) after the death, the two survivors hold the quota between them.
    assert run.slope(kill + 11_000, 160_000) == pytest.approx(Q, rel=0.05)


@pytest.mark.parametrize("sensor", ["window", "token_bucket"])
def test_uneven_traffic_is_held_to_the_quota(sensor: str) -> None:
    run = simulate_fleet(sensor, paces=[0.11, 200.0, 1000.0])
    assert run.slope(*STEADY) == pytest.approx(Q, rel=0.05)
    assert run.rate(*STEADY, {0}) > run.rate(*STEADY, {1}) > run.rate(*STEADY, {2})
