"""The fleet follower with a stand-in for the proxy's own Kafka client: where it starts reading, what it
charges, what it skips."""

from __future__ import annotations

import asyncio

from sluice.protocol.record_batches import FetchedRecord
from sluice.proxy.kafka_client import FetchResult, OffsetOutOfRange
from sluice.proxy.usage_plane.fleet_follower import FleetFollower
from sluice.quota import QuotaEntity, QuotaKey, QuotaManagers
from sluice.quota.fleet import FleetQuotas
from sluice.quota.usage_records import UsageBatch, UsageRow, encode_batch

WALL = 1_800_000_000_000
TOPIC = "_sluice_usage"


class FakeTopic:
    """A usage topic: partition -> list of record values, from offset `start` on."""

    def __init__(self, logs: dict[int, list[bytes | None]], start: int = 0, by_time: int = -1) -> None:
        self.logs = logs
        self.start = start
        self.by_time = by_time
        self.fetches: list[tuple[int, int]] = []
        self.asked_times: list[int] = []
        self.out_of_range_once = False

    async def partitions(self, topic, *, timeout_s=None):
        return sorted(self.logs)

    async def offsets_for_time(self, topic, timestamp_ms, partitions=None):
        self.asked_times.append(timestamp_ms)
        return {p: self.by_time for p in self.logs}

    async def earliest_offsets(self, topic, partitions=None):
        return {p: self.start for p in self.logs}

    async def latest_offsets(self, topic, partitions=None):
        return {p: self.start + len(log) for p, log in self.logs.items()}

    async def fetch(self, topic, partition, offset, *, max_wait_ms=500):
        self.fetches.append((partition, offset))
        if self.out_of_range_once:
            self.out_of_range_once = False
            raise OffsetOutOfRange(f"Fetch {topic}-{partition}@{offset}")
        log = self.logs[partition]
        index = offset - self.start
        if index >= len(log):
            await asyncio.sleep(0.001)  # a broker's long poll at the log's end, made short
            return FetchResult([], offset, self.start + len(log), self.start)
        value = log[index]
        return FetchResult([FetchedRecord(offset, WALL, b"k", value, ())], offset + 1, 0, self.start)


def batch(instance: str, end_ms: int, produced: int) -> bytes:
    row = UsageRow("ANONYMOUS", "pump", produce_bytes=produced)
    return encode_batch(UsageBatch(instance, WALL + end_ms - 1000, 1000, (row,)))


def fleet() -> FleetQuotas:
    managers = QuotaManagers()
    managers.set_quota(QuotaEntity(client_id="pump"), QuotaKey.PRODUCER_BYTE_RATE, 100_000)
    quotas = FleetQuotas(managers, "me")
    quotas.install()
    return quotas


async def follow(topic: FakeTopic, quotas: FleetQuotas, **kwargs) -> FleetFollower:
    follower = FleetFollower(
        topic, quotas, TOPIC, catch_up_ms=11_000, now_ms=lambda: 5_000, wall_ms=lambda: WALL + 5_000, **kwargs
    )
    await follower.start()
    # Until every partition has been read to its end (the follower then long-polls there).
    ends = {(p, topic.start + len(log)) for p, log in topic.logs.items()}
    async with asyncio.timeout(30):
        while not ends <= set(topic.fetches):
            await asyncio.sleep(0.001)  # a poll: the fetch at the end is the event
    await follower.stop()
    return follower


async def test_others_batches_are_charged_its_own_and_foreign_records_skipped() -> None:
    quotas = fleet()
    topic = FakeTopic(
        {
            0: [batch("peer-a", 4000, 30_000), batch("me", 4000, 999_999)],
            1: [b"not json", batch("peer-b", 5000, 20_000)],
        }
    )
    follower = await follow(topic, quotas)
    sensor = quotas.managers.produce.sensor_for("ANONYMOUS", "pump", 5_000)
    assert sensor.measure(5_000) == 50_000 / 10  # 50 kB over the minimum 10 s window
    assert follower.stats.rows_charged == 2
    assert follower.stats.bad_records == 1
    assert set(quotas.live) == {"peer-a", "peer-b"}


async def test_a_message_written_twice_by_a_retried_produce_is_charged_once() -> None:
    quotas = fleet()
    written = batch("peer-a", 4000, 30_000)
    later = batch("peer-a", 5000, 10_000)
    # The retry re-sends what the failed produce held: the copy follows, after the next interval's too.
    topic = FakeTopic({0: [written, later, written]})
    follower = await follow(topic, quotas)
    sensor = quotas.managers.produce.sensor_for("ANONYMOUS", "pump", 5_000)
    assert sensor.measure(5_000) == 40_000 / 10  # 40 kB over the minimum 10 s window, not 70
    assert follower.stats.rows_charged == 2
    assert follower.stats.duplicates == 1


async def test_reading_starts_at_the_quota_window_by_time_where_the_broker_can() -> None:
    quotas = fleet()
    topic = FakeTopic({0: [batch("peer", 1000, 1)] * 10}, by_time=7)
    await follow(topic, quotas)
    assert topic.asked_times == [WALL + 5_000 - 11_000]
    assert topic.fetches[0] == (0, 7)


async def test_without_a_look_up_by_time_the_last_records_are_read() -> None:
    quotas = fleet()
    topic = FakeTopic({0: [batch("peer", 1000, 1)] * 50}, start=100)
    await follow(topic, quotas, catch_up_records=20)
    assert topic.fetches[0] == (0, 100 + 50 - 20)
    short = FakeTopic({0: [batch("peer", 1000, 1)] * 5}, start=100)
    await follow(short, fleet(), catch_up_records=20)
    assert short.fetches[0] == (0, 100)  # not before the log's start


async def test_an_offset_out_of_range_starts_again_at_the_log_start() -> None:
    quotas = fleet()
    topic = FakeTopic({0: [batch("peer", 4000, 10_000)]}, start=40)
    topic.out_of_range_once = True
    follower = await follow(topic, quotas)
    assert topic.fetches[1] == (0, 40)
    assert follower.stats.rows_charged == 1
