"""The usage ledger: counters per entity and topic, drained once per interval into a UsageBatch, bounded."""

from __future__ import annotations

from sluice.quota import QuotaEntity, QuotaKey, QuotaManagers
from sluice.quota.usage_ledger import UsageLedger, bounds_in_force
from sluice.quota.usage_records import UsageRow, decode_batch, encode_batch

NAMES = {0: "Produce", 1: "Fetch", 3: "Metadata"}


def test_an_interval_drains_into_one_row_per_entity_and_one_per_topic() -> None:
    ledger = UsageLedger("sluice-a")
    pump = ledger.entity("ANONYMOUS", "pump")
    pump.produce_bytes += 1_000
    pump.add_request(0)
    pump.add_request(0)
    pump.add_request(3)
    pump.add_topics([("orders", 600), ("audit", 300), ("orders", 50)], fetched=False)
    pump.add_throttle("Produce", 120)
    pump.add_throttle("Produce", 30)
    pump.cpu_time_ns += 5_000
    reader = ledger.entity("alice", None)
    reader.fetch_bytes += 44
    reader.add_request(1)
    reader.add_topics([("orders", 40)], fetched=True)
    reader.partition_mutations += 3

    batch = ledger.drain(1_700_000_000_000, 1000, api_name=NAMES.__getitem__)

    assert (batch.instance, batch.interval_start_ms, batch.interval_ms) == (
        "sluice-a",
        1_700_000_000_000,
        1000,
    )
    assert batch.rows == (
        UsageRow(
            "ANONYMOUS",
            "pump",
            produce_bytes=1_000,
            requests={"Produce": 2, "Metadata": 1},
            throttle_time_ms={"Produce": 150},
            throttle_count={"Produce": 2},
            cpu_time_ns=5_000,
        ),
        UsageRow("ANONYMOUS", "pump", "orders", produce_bytes=650),
        UsageRow("ANONYMOUS", "pump", "audit", produce_bytes=300),
        UsageRow("alice", None, fetch_bytes=44, requests={"Fetch": 1}, partition_mutations=3),
        UsageRow("alice", None, "orders", fetch_bytes=40),
    )
    assert decode_batch(encode_batch(batch)) == batch


def test_drain_starts_a_fresh_interval() -> None:
    ledger = UsageLedger("a")
    first = ledger.entity("u", "c")
    first.produce_bytes += 10
    generation = ledger.generation
    ledger.drain(0, 1000)
    assert ledger.generation == generation + 1
    assert len(ledger) == 0
    assert ledger.drain(1000, 1000).rows == ()
    second = ledger.entity("u", "c")
    assert second is not first and second.produce_bytes == 0


def test_an_entity_that_did_nothing_gets_no_row() -> None:
    ledger = UsageLedger("a")
    ledger.entity("u", "idle")
    assert ledger.drain(0, 1000).rows == ()


def test_entities_beyond_the_cap_are_counted_not_kept() -> None:
    ledger = UsageLedger("a", max_entities=2)
    for i in range(5):
        usage = ledger.entity("u", f"c{i}")
        usage.produce_bytes += 100
        usage.add_request(0)
    assert ledger.entity("u", "c0") is not ledger.entity("u", "c4")  # kept entities are still found
    assert ledger.overflow_entities == 3  # c2, c3, c4, each counted once
    batch = ledger.drain(0, 1000)
    assert [row.client_id for row in batch.rows] == ["c0", "c1"]
    assert ledger.overflow_entities_total == 3
    assert ledger.overflow_bytes_total == 300
    assert ledger.overflow_entities == 0  # per interval


def test_topics_beyond_the_cap_are_counted_not_kept() -> None:
    ledger = UsageLedger("a", max_topics=2)
    usage = ledger.entity("u", "c")
    usage.produce_bytes += 60
    usage.add_topics([("t1", 10), ("t2", 20), ("t3", 30), ("t1", 1)], fetched=False)
    batch = ledger.drain(0, 1000)
    assert [(row.topic, row.produce_bytes) for row in batch.rows] == [(None, 60), ("t1", 11), ("t2", 20)]
    assert ledger.overflow_topics_total == 1
    assert ledger.overflow_bytes_total == 30


def test_the_bounds_in_force_are_reported_per_entity() -> None:
    managers = QuotaManagers()
    managers.set_quota(QuotaEntity(client_id="pump"), QuotaKey.PRODUCER_BYTE_RATE, 100_000)
    managers.set_quota(QuotaEntity(user="alice"), QuotaKey.CONSUMER_BYTE_RATE, 50_000)
    managers.set_quota(QuotaEntity(user="alice"), QuotaKey.CONTROLLER_MUTATION_RATE, 5)
    ledger = UsageLedger("a")
    for user, client_id in (("ANONYMOUS", "pump"), ("alice", "pump"), ("bob", "other")):
        ledger.entity(user, client_id).add_request(3)
    rows = ledger.drain(0, 1000, bounds_in_force(managers)).rows
    assert [dict(row.quotas) for row in rows] == [
        {"producer_byte_rate": 100_000},
        {"producer_byte_rate": 100_000, "consumer_byte_rate": 50_000, "controller_mutation_rate": 5},
        {},
    ]


def test_topic_bytes_are_kept_per_broker() -> None:
    ledger = UsageLedger("i")
    usage = ledger.entity("ANONYMOUS", "pump")
    usage.add_topics([("orders", 600)], False, 1)
    usage.add_topics([("orders", 100)], False, 2)
    usage.add_topics([("orders", 50)], False, 1)
    usage.add_topics([("orders", 7)], False)  # a bootstrap connection to no known broker
    rows = {(r.topic, r.broker): r.produce_bytes for r in ledger.drain(0, 1000).rows if r.topic}
    assert rows == {("orders", 1): 650, ("orders", 2): 100, ("orders", None): 7}
