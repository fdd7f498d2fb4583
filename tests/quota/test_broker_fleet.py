"""One broker shield for a fleet (quota/broker_fleet.py): other instances' bytes per broker, from their
usage records, weigh on this instance's shield; on a simulated clock, a fleet holds a broker at its
threshold as one instance does."""

from __future__ import annotations

import heapq
import random

import pytest

from sluice.quota.broker_fleet import STALE_MS, charge_brokers
from sluice.quota.broker_shield import BrokerShield, ShieldLimits
from sluice.quota.usage_ledger import UsageLedger
from sluice.quota.usage_records import UsageBatch, UsageRow, decode_batch, encode_batch

THRESHOLD = 300_000
WALL = 1_800_000_000_000  # the wall clock at simulated time 0


def _batch(instance: str, start_ms: int, rows: tuple[UsageRow, ...]) -> UsageBatch:
    return UsageBatch(instance, WALL + start_ms, 1000, rows)


def test_other_instances_topic_rows_are_charged_to_their_broker() -> None:
    shield = BrokerShield(ShieldLimits(bytes_in_per_s=THRESHOLD))
    rows = (
        UsageRow("u", "c", produce_bytes=900_000),  # an entity row: its bytes are in the topic rows
        UsageRow("u", "c", topic="hot", broker=1, produce_bytes=600_000),
        UsageRow("u", "c", topic="hot", broker=2, produce_bytes=100_000),
        UsageRow("u", "c", topic="hot", produce_bytes=200_000),  # no broker known: nowhere to charge
        UsageRow("u", "c", topic="hot", broker=3, fetch_bytes=5),  # fetched, not produced
    )
    assert charge_brokers(shield, _batch("peer", 0, rows), "me", 1000, WALL + 1100) == 2
    assert shield.nodes() == [1, 2]
    assert shield.view(1, 1000).produce_bytes == 0  # charged, not this instance's own
    assert shield.record(1, [("hot", 1000)], 1001) > 0  # 600 kB in a second: broker 1 is in debt
    assert shield.record(2, [("hot", 1000)], 1001) == 0


def test_own_and_stale_batches_are_skipped() -> None:
    shield = BrokerShield(ShieldLimits(bytes_in_per_s=THRESHOLD))
    rows = (UsageRow("u", "c", topic="hot", broker=1, produce_bytes=600_000),)
    assert charge_brokers(shield, _batch("me", 0, rows), "me", 1000, WALL + 1100) == 0
    assert charge_brokers(shield, _batch("peer", 0, rows), "me", 1000, WALL + 1000 + STALE_MS + 1) == 0
    assert shield.nodes() == []


def _fleet(instances: int, sharing: bool, seed: int) -> float:
    """Each instance has a producer sending 10 kB to broker 1 as fast as its shield lets it, records it in
    its ledger, publishes a batch every second that reaches the others 0-200 ms later; the fleet's bytes
    into broker 1 per second, from 30 s to 90 s."""
    rng = random.Random(seed)
    shields = [BrokerShield(ShieldLimits(bytes_in_per_s=THRESHOLD)) for _ in range(instances)]
    ledgers = [UsageLedger(f"i{i}") for i in range(instances)]
    events: list[tuple[float, int, int, object]] = [
        (rng.uniform(0, 10), 0, i, None) for i in range(instances)
    ]
    events += [(1000.0 + rng.uniform(0, 5), 1, i, None) for i in range(instances)]
    heapq.heapify(events)
    admitted = 0
    while events:
        at, kind, i, payload = heapq.heappop(events)
        if at >= 90_000:
            break
        now = int(at)
        if kind == 0:  # a Produce
            throttle = shields[i].record(1, [("hot", 10_000)], now)
            ledgers[i].entity("u", "c").add_topics([("hot", 10_000)], False, 1)
            if at >= 30_000:
                admitted += 10_000
            heapq.heappush(events, (at + max(1.0, throttle), 0, i, None))
        elif kind == 1:  # publish
            message = encode_batch(ledgers[i].drain(WALL + now - 1000, 1000))
            if sharing:
                for other in range(instances):
                    if other != i:
                        heapq.heappush(events, (at + rng.uniform(0, 200), 2, other, message))
            heapq.heappush(events, (at + 1000, 1, i, None))
        else:  # a batch reaches instance i
            charge_brokers(shields[i], decode_batch(payload), f"i{i}", now, WALL + now)  # type: ignore[arg-type]
    return admitted / 60


@pytest.mark.parametrize("seed", range(3))
def test_a_fleet_holds_a_broker_at_its_threshold_as_one_instance_does(seed: int) -> None:
    assert _fleet(3, sharing=True, seed=seed) == pytest.approx(THRESHOLD, rel=0.05)


def test_without_sharing_each_instance_admits_a_whole_threshold() -> None:
    assert _fleet(3, sharing=False, seed=0) == pytest.approx(3 * THRESHOLD, rel=0.05)
