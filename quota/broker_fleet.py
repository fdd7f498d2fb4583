"""One broker shield for a fleet: other instances' Produce bytes per broker, charged to this one's shield.

Every instance's usage records name the broker of each topic row (docs/usage-records.md, version 2). An
instance that reads another's batch charges those rows' produce bytes to the same broker and topic in its
own shield, *recorded, not throttled on* (as the fleet's client quotas, quota/fleet.py): they weigh on
this instance's next Produce to that broker. So each broker's total, and each topic's share on it, is
the fleet's.

The shield's sensors are token buckets, which conserve: a charge that arrives late (the publish interval
plus the delivery) still lands in full, so no estimate of unreported usage is needed, as for client quotas
on token buckets. A batch whose interval ended more than ``STALE_MS`` ago (a new instance reading the
topic's recent past) is skipped: the broker's measured rate no longer holds it, and a debt for traffic
that passed before this instance could hold anything back would only throttle its clients for nothing.
"""

from __future__ import annotations

from sluice.quota.broker_shield import RATE_SAMPLES, RATE_WINDOW_MS, BrokerShield
from sluice.quota.usage_records import UsageBatch

STALE_MS = RATE_SAMPLES * RATE_WINDOW_MS


def charge_brokers(
    shield: BrokerShield, batch: UsageBatch, instance: str, now_ms: int, wall_now_ms: int
) -> int:
    """Charge another instance's batch to `shield`; the topic rows charged (0 for our own or a stale batch).

    `now_ms` is the shield's clock, `wall_now_ms` the wall clock the batch's interval is stamped in."""
    if batch.instance == instance:
        return 0
    if wall_now_ms - (batch.interval_start_ms + batch.interval_ms) > STALE_MS:
        return 0
    by_broker: dict[int, list[tuple[str, int]]] = {}
    for row in batch.rows:
        if row.topic is not None and row.broker is not None and row.produce_bytes:
            by_broker.setdefault(row.broker, []).append((row.topic, row.produce_bytes))
    for node, sizes in by_broker.items():
        shield.record_remote(node, sizes, now_ms)
    return sum(len(sizes) for sizes in by_broker.values())
