"""The broker shield (quota/broker_shield.py): the seed's rule per broker, on an injected clock."""

from __future__ import annotations

import pytest

from sluice.quota.broker_shield import MAX_BROKERS, MAX_TOPICS, OTHER_TOPICS, BrokerShield, ShieldLimits
from sluice.quota.latency_trigger import LatencyTargets
from sluice.quota.topic_quotas import TopicQuotas

REQUEST = 10_000


def _drive(
    shield: BrokerShield, senders: dict[tuple[int, str], int], until_ms: int, start_ms: int = 0
) -> dict[tuple[int, str], int]:
    """Each (node, topic) sender sends REQUEST bytes every `gap` ms, or after its throttle if longer;
    returns the bytes each sent from `until_ms / 3` on (after the buckets' first second)."""
    next_at = dict.fromkeys(senders, start_ms)
    sent = dict.fromkeys(senders, 0)
    for now in range(start_ms, until_ms):
        for key, gap in senders.items():
            if now >= next_at[key]:
                node, topic = key
                throttle = shield.record(node, [(topic, REQUEST)], now)
                if now >= until_ms // 3:
                    sent[key] += REQUEST
                next_at[key] = now + max(gap, throttle)
    return sent


def test_a_hot_broker_is_held_at_its_threshold_and_the_others_are_untouched() -> None:
    shield = BrokerShield(ShieldLimits(bytes_in_per_s=300_000))
    # Broker 1: hot flat out (1 MB/s) and a cold topic at 50 kB/s; broker 2: 250 kB/s, under its threshold.
    sent = _drive(shield, {(1, "hot"): 10, (1, "cold"): 200, (2, "hot"): 40}, 30_000)
    seconds = 20
    assert (sent[(1, "hot")] + sent[(1, "cold")]) / seconds == pytest.approx(300_000, rel=0.02)
    assert sent[(1, "cold")] / seconds == pytest.approx(50_000, rel=0.02)
    assert sent[(2, "hot")] / seconds == pytest.approx(250_000, rel=0.02)
    assert shield.view(1, 30_000).held_topics == ("hot",)
    assert shield.view(2, 30_000).held_topics == ()
    assert shield.view(2, 30_000).throttles == 0


def test_a_topic_under_its_share_is_never_throttled_even_when_its_broker_is_over() -> None:
    shield = BrokerShield(ShieldLimits(bytes_in_per_s=300_000))
    for now in range(0, 20_000, 10):
        shield.record(1, [("hot", REQUEST)], now)  # 1 MB/s: the broker is far over
        if now % 200 == 0:
            assert shield.record(1, [("cold", REQUEST)], now) == 0


def test_the_same_traffic_through_the_proxy_wide_topic_quotas_is_not_held_per_broker() -> None:
    # The reason for the shield: a skewed cluster has headroom in total while one broker drowns.
    total = TopicQuotas(900_000)  # three brokers' worth
    throttles = sum(total.record_request([("hot", REQUEST)], now) for now in range(0, 20_000, 20))
    assert throttles == 0  # 500 kB/s in all: under the total, so never held
    shield = BrokerShield(ShieldLimits(bytes_in_per_s=300_000))
    held = sum(shield.record(1, [("hot", REQUEST)], now) for now in range(0, 20_000, 20))
    assert held > 0


def test_explicit_topic_thresholds_apply_on_each_broker_and_the_rest_share() -> None:
    shield = BrokerShield(ShieldLimits(bytes_in_per_s=1000, nodes={2: 2000}, topic_thresholds={"a": 400}))
    for node in (1, 2):
        shield.record(node, [("a", 1), ("b", 1), ("c", 1)], 0)
    one, two = shield._brokers[1].quotas, shield._brokers[2].quotas
    assert one is not None and two is not None
    assert [one.threshold(t) for t in "abc"] == [400, 300, 300]
    assert [two.threshold(t) for t in "abc"] == [400, 800, 800]


def test_node_overrides_and_open_brokers() -> None:
    shield = BrokerShield(ShieldLimits(nodes={3: 5000}))
    shield.record(1, [("t", 1)], 0)
    shield.record(3, [("t", 1)], 0)
    assert shield.view(1, 0).threshold is None  # no default: broker 1 is open
    assert shield.view(3, 0).threshold == 5000
    assert sum(shield.record(1, [("t", 1_000_000)], now) for now in range(1, 100)) == 0


def test_a_reload_changes_thresholds_in_place_and_keeps_the_buckets() -> None:
    shield = BrokerShield(ShieldLimits(bytes_in_per_s=100_000, topic_thresholds={"a": 50_000}))
    for now in range(0, 1000, 10):
        shield.record(1, [("a", 1000)], now)
    bucket = shield._brokers[1].quotas
    shield.configure(ShieldLimits(bytes_in_per_s=200_000))
    assert shield._brokers[1].quotas is bucket
    assert bucket is not None and bucket.total_bytes_per_s == 200_000
    assert bucket.threshold("a") == 200_000  # no longer explicit: it shares the total alone
    shield.configure(ShieldLimits(nodes={2: 1}))
    assert shield._brokers[1].quotas is None  # broker 1 has no threshold now: open


def test_fleet_charges_weigh_on_local_requests_without_throttling_themselves() -> None:
    shield = BrokerShield(ShieldLimits(bytes_in_per_s=100_000))
    shield.record_remote(1, [("t", 500_000)], 0)  # another instance sent 5 s worth
    assert shield.view(1, 0).produce_bytes == 0  # not this instance's
    throttle = shield.record(1, [("t", 1000)], 1)
    assert throttle == pytest.approx((500_000 + 1000 - 100_000) / 100_000 * 1000, abs=2)


def test_invented_topic_names_share_one_entry_past_the_cap() -> None:
    shield = BrokerShield(ShieldLimits(bytes_in_per_s=1e9))
    for i in range(MAX_TOPICS + 50):
        shield.record(1, [(f"t{i}", 1)], i)
    quotas = shield._brokers[1].quotas
    assert quotas is not None and len(quotas.topics) == MAX_TOPICS + 1
    assert OTHER_TOPICS in quotas.topics


def test_idle_topics_leave_the_share() -> None:
    shield = BrokerShield(ShieldLimits(bytes_in_per_s=1000))
    shield.record(1, [("old", 1), ("new", 1)], 0)
    shield.tick(1)
    hour = 3_600_000
    shield.record(1, [("new", 1)], hour)
    shield.tick(hour + 60_000)
    quotas = shield._brokers[1].quotas
    assert quotas is not None and quotas.topics == {"new"}
    assert quotas.threshold("new") == 1000


def test_holding_episodes_are_logged_once_at_start_and_once_at_the_end() -> None:
    shield = BrokerShield(ShieldLimits(bytes_in_per_s=100_000))
    events = []
    next_at = 0
    for now in range(0, 10_000):
        if now >= next_at:  # 1 MB/s, as the throttles let it
            next_at = now + max(10, shield.record(1, [("hot", 10_000)], now))
        if now % 1000 == 0:
            events += shield.tick(now)
    for now in range(10_000, 30_000, 1000):
        events += shield.tick(now)
    names = [e.event for e in events]
    assert names == ["broker_throttle_started", "broker_throttle_stopped"]
    assert events[0].fields["topics"] == ["hot"] and events[0].fields["node_id"] == 1
    assert events[1].fields["throttles"] > 0 and shield.view(1, 30_000).held_topics == ()


def test_the_latency_trigger_holds_a_slow_broker_at_its_current_ingress() -> None:
    targets = LatencyTargets(produce_p99_ms=50, release_p99_ms=40, floor_bytes_per_s=10_000)
    shield = BrokerShield(ShieldLimits(latency=targets))
    events: list[str] = []
    for now in range(0, 20_000, 10):
        throttle = shield.record(1, [("t", 1000)], now)  # 100 kB/s
        assert throttle == 0 or now >= 10_000
        shield.round_trip(1, 5 if now < 10_000 else 80, now)
        if now % 1000 == 0:
            events += [e.event for e in shield.tick(now)]
    assert events[0] == "broker_latency_engaged"
    view = shield.view(1, 20_000)
    assert view.threshold is not None and view.threshold <= 100_000
    assert 80 <= view.p99_ms <= 85  # to its histogram bucket's upper edge


@pytest.mark.parametrize(("stalled", "engaged"), [(1, False), (2, False), (3, True)])
def test_the_latency_trigger_judges_a_broker_of_few_round_trips_on_more_than_one_stall(
    stalled: int, engaged: bool
) -> None:
    # Five Produce requests a second (a broker leading one partition of a paced producer): 15 in the p99
    # window, whose plain p99 is the slowest. One or two stalled by the machine must not hold its topics.
    targets = LatencyTargets(produce_p99_ms=200, release_p99_ms=160, floor_bytes_per_s=10_000)
    shield = BrokerShield(ShieldLimits(latency=targets))
    events: list[str] = []
    for now in range(0, 10_000, 200):
        shield.record(1, [("t", 10_000)], now)
        slow = 5_000 <= now < 5_000 + 200 * stalled
        shield.round_trip(1, 500 if slow else 5, now)
        if now % 1000 == 0:
            events += [e.event for e in shield.tick(now)]
    assert ("broker_latency_engaged" in events) is engaged


def test_a_held_broker_answering_one_or_two_in_the_window_is_neither_raised_nor_released() -> None:
    # Held, then slowed to one answer every two seconds (each taking two): too few to judge, so the loop
    # stays where it is; read as none answered, it was raised and then released while the broker crawled.
    targets = LatencyTargets(produce_p99_ms=50, release_p99_ms=40, floor_bytes_per_s=1_000)
    shield = BrokerShield(ShieldLimits(latency=targets))
    events: list[tuple[int, str]] = []
    for now in range(0, 30_000, 10):
        if now < 10_000:
            shield.record(1, [("t", 1000)], now)  # 100 kB/s
            shield.round_trip(1, 5 if now < 5_000 else 80, now)
        elif now % 2_000 == 0:
            shield.record(1, [("t", 1000)], now)
            shield.round_trip(1, 2_000, now)
        if now % 1000 == 0:
            events += [(now, e.event) for e in shield.tick(now)]
    assert "broker_latency_engaged" in [e for _t, e in events], events
    after_slowing = [e for t, e in events if t >= 13_000 and e.startswith("broker_latency_")]
    assert after_slowing == [], after_slowing
    assert shield.view(1, 30_000).threshold is not None  # still held


def test_node_ids_from_other_instances_are_bounded() -> None:
    shield = BrokerShield(ShieldLimits(bytes_in_per_s=1000))
    for node in range(MAX_BROKERS + 10):
        shield.record_remote(node, [("t", 1)], 0)
    assert len(shield.nodes()) == MAX_BROKERS
    shield.record(MAX_BROKERS + 20, [("t", 1)], 0)  # a node this instance's own listeners reach counts
    assert len(shield.nodes()) == MAX_BROKERS + 1
