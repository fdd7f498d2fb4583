"""The proxy's own Kafka client against the real test broker (librdkafka's mock cluster): records go in and
come back byte for byte, offsets add up, and a broker going down or a leader moving costs only a retry."""

from __future__ import annotations

import asyncio
import os

import pytest
import structlog
from mock_cluster_process import MockCluster

from sluice.proxy.kafka_client import (
    BrokerUnavailable,
    GaveUp,
    KafkaClient,
    KafkaErrorCode,
    OffsetOutOfRange,
    Record,
    RetryPolicy,
    TopicCreation,
)

TOPIC = "own-client"
PARTITIONS = 3
# Short waits so retries across a broker restart take a fraction of a second, not Kafka's full second.
FAST_RETRY = RetryPolicy(initial_s=0.02, max_s=0.2)


@pytest.fixture(scope="module")
def cluster():
    with MockCluster(brokers=3, topics={TOPIC: PARTITIONS, "moving": 1, "downed": 1}) as c:
        yield c


def new_client(cluster: MockCluster, **kwargs) -> KafkaClient:
    kwargs.setdefault("request_timeout_s", 10.0)
    kwargs.setdefault("retry", FAST_RETRY)
    return KafkaClient(cluster.addresses, **kwargs)


def sample_records(count: int, salt: bytes = b"") -> list[Record]:
    records = []
    for i in range(count):
        key = None if i % 7 == 3 else b"key-%d" % i + salt
        value = None if i % 11 == 5 else os.urandom(1 + i % 300) + b"\x00\xff" + salt
        headers = (("h", b"%d" % i), ("empty", b""), ("none", None)) if i % 2 else ()
        records.append(Record(key, value, headers, timestamp_ms=1_700_000_000_000 + i))
    return records


def same(fetched, sent) -> bool:
    return [(r.key, r.value, r.headers, r.timestamp_ms) for r in fetched] == [
        (r.key, r.value, tuple(r.headers), r.timestamp_ms) for r in sent
    ]


async def fetch_all(client: KafkaClient, topic: str, partition: int, start: int, end: int, **kw):
    out, offset = [], start
    while offset < end:
        result = await client.fetch(topic, partition, offset, max_wait_ms=50, **kw)
        out += result.records
        offset = result.next_offset
    return out, offset


async def test_metadata_names_every_broker_and_every_partition_leader(cluster) -> None:
    client = new_client(cluster)
    try:
        answer = await client.metadata([TOPIC])
        assert {(b.host, b.port) for b in answer.brokers.values()} == set(cluster.addresses)
        assert sorted(answer.topics[TOPIC].partitions) == list(range(PARTITIONS))
        # The mock places partition p of a replication-1 topic on broker p % N + 1.
        assert {p: i.leader_id for p, i in answer.topics[TOPIC].partitions.items()} == {0: 1, 1: 2, 2: 3}
        assert await client.partitions(TOPIC) == list(range(PARTITIONS))
    finally:
        await client.stop()


async def test_produced_records_come_back_byte_for_byte_with_their_offsets(cluster) -> None:
    client = new_client(cluster)
    try:
        before = await client.latest_offsets(TOPIC, [1])
        first, second = sample_records(150, b"a"), sample_records(250, b"b")
        base1 = await client.produce(TOPIC, 1, first)
        base2 = await client.produce(TOPIC, 1, second)
        assert base1 == before[1] and base2 == base1 + len(first)
        latest = await client.latest_offsets(TOPIC)
        assert latest[1] == base2 + len(second)
        assert (await client.earliest_offsets(TOPIC, [1])) == {1: 0}
        # Small max_bytes: many fetches, each returning whole batches, none lost or repeated.
        fetched, end = await fetch_all(client, TOPIC, 1, base1, latest[1], max_bytes=1024)
        assert end == latest[1]
        assert [r.offset for r in fetched] == list(range(base1, latest[1]))
        assert same(fetched, first + second)
        # From the middle of a batch: only the records at or after the offset asked for.
        middle = await client.fetch(TOPIC, 1, base1 + 100, max_wait_ms=0)
        assert middle.records[0].offset == base1 + 100 and same(middle.records[:50], first[100:])
    finally:
        await client.stop()


async def test_a_fetch_at_the_end_waits_and_returns_nothing_new(cluster) -> None:
    client = new_client(cluster)
    try:
        end = (await client.latest_offsets(TOPIC, [2]))[2]
        result = await client.fetch(TOPIC, 2, end, max_wait_ms=100)
        assert result.records == [] and result.next_offset == end and result.high_watermark == end
        with pytest.raises(OffsetOutOfRange):
            await client.fetch(TOPIC, 2, end + 1000, max_wait_ms=0)
    finally:
        await client.stop()


async def test_a_long_poll_fetch_does_not_hold_up_a_produce_to_the_same_broker(cluster) -> None:
    client = new_client(cluster)
    try:
        end = (await client.latest_offsets(TOPIC, [0]))[0]
        loop = asyncio.get_running_loop()
        polling = loop.create_task(client.fetch(TOPIC, 0, end, max_wait_ms=3000))

        def fetch_in_flight() -> bool:
            return any(
                lane.startswith("fetch:") and connection.in_flight
                for (_node, lane), connection in client.cluster._connections.items()
            )

        async with asyncio.timeout(10):
            while not fetch_in_flight():  # the long poll is at the broker: a produce could queue behind it
                await asyncio.sleep(0.005)
        # Same leader (broker 1). A broker answers one connection's requests in order, so on a shared
        # connection this produce would wait out the poll.
        offset = await client.produce(TOPIC, 0, [Record(b"k", b"not held up")])
        assert offset == end and not polling.done()
        await asyncio.wait_for(polling, 10)
    finally:
        await client.stop()


async def test_a_leader_that_moves_is_found_again(cluster) -> None:
    client = new_client(cluster)
    try:
        assert (await client.metadata(["moving"])).topics["moving"].partitions[0].leader_id == 1
        await client.produce("moving", 0, [Record(b"k", b"before")])
        await asyncio.to_thread(cluster.set_leader, "moving", 0, 3)
        # The client still believes broker 1 leads: it gets NOT_LEADER_OR_FOLLOWER, asks again, retries.
        with structlog.testing.capture_logs() as logs:
            assert await client.produce("moving", 0, [Record(b"k", b"after")]) == 1
        retries = [e for e in logs if e["event"] == "kafka_client_retry"]
        assert retries and "NOT_LEADER" in retries[0]["error"]
        assert client.cluster.leader_for("moving", 0) == 3
        fetched, _ = await fetch_all(client, "moving", 0, 0, 2)
        assert [r.value for r in fetched] == [b"before", b"after"]
    finally:
        await client.stop()


async def test_a_leader_that_goes_down_is_retried_until_it_is_back(cluster) -> None:
    client = new_client(cluster)
    leader = 1  # "downed" partition 0 lives on broker 1
    try:
        await client.produce("downed", 0, [Record(b"k", b"one")])
        await asyncio.to_thread(cluster.broker_down, leader)
        try:
            with structlog.testing.capture_logs() as logs:
                producing = asyncio.get_running_loop().create_task(
                    client.produce("downed", 0, [Record(b"k", b"two")], timeout_s=20)
                )
                async with asyncio.timeout(20):
                    while not [e for e in logs if e["event"] == "kafka_client_retry"]:
                        await asyncio.sleep(0.01)  # a poll: the failed attempt's retry is the event
            assert not producing.done()  # it failed once and is retrying with backoff, not failed
        finally:
            await asyncio.to_thread(cluster.broker_up, leader)
        offset = await asyncio.wait_for(producing, 20)
        assert offset == 1
        fetched, _ = await fetch_all(client, "downed", 0, 0, 2)
        assert [r.value for r in fetched] == [b"one", b"two"]
    finally:
        await client.stop()


async def test_a_broker_down_for_longer_than_the_budget_gives_up_naming_the_failure(cluster) -> None:
    client = new_client(cluster)
    try:
        await client.metadata([TOPIC])
        await asyncio.to_thread(cluster.broker_down, 3)
        try:
            with pytest.raises(GaveUp) as caught:
                await client.produce(TOPIC, 2, [Record(None, b"x")], timeout_s=0.5)
            assert isinstance(caught.value.last, BrokerUnavailable | TimeoutError)
            assert f"Produce to {TOPIC}-2" in str(caught.value)
        finally:
            await asyncio.to_thread(cluster.broker_up, 3)
        # The same client reconnects once the broker is back.
        assert await client.produce(TOPIC, 2, [Record(None, b"y")], timeout_s=20) >= 0
    finally:
        await client.stop()


async def test_an_unreachable_cluster_neither_blocks_start_nor_hangs_a_call() -> None:
    from sluice.proxy.listeners.ports import free_port_block

    port = free_port_block(1)  # nothing listens there
    client = KafkaClient([("127.0.0.1", port)], request_timeout_s=5, retry=FAST_RETRY)
    await asyncio.wait_for(client.start(), 1)
    with pytest.raises(GaveUp) as caught:
        await client.metadata(timeout_s=0.3)
    assert isinstance(caught.value.last, BrokerUnavailable) and f"127.0.0.1:{port}" in str(caught.value)
    await client.stop()


async def test_create_topic_falls_back_to_auto_creation_where_create_topics_is_missing(cluster) -> None:
    client = new_client(cluster)
    try:
        with structlog.testing.capture_logs() as logs:
            outcome = await client.create_topic(
                "auto-made", partitions=1, configs={"cleanup.policy": "compact"}
            )
        assert outcome is TopicCreation.AUTO_CREATED
        event = next(e for e in logs if e["event"] == "kafka_client_topic_auto_created")
        assert event["topic"] == "auto-made" and event["configs_not_applied"] == ["cleanup.policy"]
        assert "CreateTopics" in event["reason"]
        # Leaders are known by the time create_topic returns: a produce goes straight through.
        assert await client.produce("auto-made", 0, [Record(b"k", b"v")]) == 0
        assert await client.create_topic("auto-made") is TopicCreation.EXISTED
    finally:
        await client.stop()


async def test_an_unknown_topic_is_named_not_retried_for_partitions(cluster) -> None:
    client = new_client(cluster)
    try:
        with pytest.raises(KafkaErrorCode) as caught:
            await client.partitions("never-made")
        assert caught.value.code == 3 and "never-made" in str(caught.value)
    finally:
        await client.stop()


async def test_a_stopped_client_refuses_calls(cluster) -> None:
    from sluice.proxy.kafka_client import ClientClosed

    client = new_client(cluster)
    await client.metadata()
    await client.stop()
    with pytest.raises(ClientClosed):
        await client.metadata()


def test_the_client_runs_on_uvloop_as_the_proxy_does(cluster) -> None:
    uvloop = pytest.importorskip("uvloop")  # the proxy's loop wherever uvloop installs (not Windows)

    async def round_trip() -> list[bytes | None]:
        client = new_client(cluster)
        try:
            base = await client.produce(TOPIC, 0, [Record(b"k", b"on uvloop"), Record(None, b"too")])
            return [r.value for r in (await client.fetch(TOPIC, 0, base, max_wait_ms=0)).records]
        finally:
            await client.stop()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(round_trip()) == [b"on uvloop", b"too"]
