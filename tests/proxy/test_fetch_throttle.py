"""A throttled Fetch, seen on the wire: Kafka's empty answer (`fetch_throttle: empty`, the default) or the
data with the field set (`pass`), and in both cases nothing is lost.

The partition holds one ~50.5 kB batch, which every fetch from offset 0 returns. It is written with one raw
Produce straight to the partition's leader: a producer's linger can split it under load, and the mock
broker answers a fetch with one batch, so the fetches would return a part of it (seen in CI).

60 kB/s with N = 2 samples of 1 s: the token bucket holds 120 kB (the fetch cap, Q x (N-1) x W = 60 kB,
lets the batch through), so two fetches pass and the third overdraws by ~31.5 kB: a throttle of ~525 ms,
less what the bucket refilled (60 bytes a millisecond) while the three fetches took their round trips.
"""

from __future__ import annotations

import time

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceResponse
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from rawclient import RawClient
from records import one_batch_produce

pytestmark = pytest.mark.slow  # end to end: real processes, real clients

TOPIC = "fetch-throttle"
RECORDS = 50
QUOTA = 60_000


@pytest.fixture(scope="module")
def cluster():
    with MockCluster(brokers=3, topics={TOPIC: 1}) as c:
        # Partition 0 of a single-replica topic is led by broker 1, the first address of the bootstrap.
        with RawClient(*c.addresses[0]) as direct:
            answer = direct.call(
                one_batch_produce(TOPIC, [bytes([i]) * 1000 for i in range(RECORDS)]), 7, ProduceResponse
            )
            assert answer.responses[0].partition_responses[0].error_code == 0, answer
            stored = fetch(direct)
        assert record_bytes(stored) >= RECORDS * 1000, stored
        yield c


def fetch(client: RawClient) -> FetchResponse:
    partition = FetchRequest.FetchTopic.FetchPartition(
        partition=0, fetch_offset=0, partition_max_bytes=1 << 20
    )
    request = FetchRequest[11](
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[partition])],
        forgotten_topics_data=[],
    )
    return client.call(request, 11, FetchResponse)


def record_bytes(response: FetchResponse) -> int:
    return sum(len(p.records or b"") for t in response.responses for p in t.partitions)


@pytest.mark.parametrize("mode", ["empty", "pass"])
def test_throttled_fetch(cluster, mode: str) -> None:
    quota = {
        "fetch_throttle": mode,
        "sensor": "token_bucket",
        "window": {"samples": 2, "size_seconds": 1},
        "entities": [{"client_id": "raw-test", "consumer_byte_rate": QUOTA}],
    }
    # Partition 0 of a single-replica topic is led by broker 1 (the proxy's listener base + 1).
    with (
        ProxyProcess(cluster.bootstrap, extra_config={"quota": quota}) as proxy,
        RawClient("127.0.0.1", proxy.broker_port(1)) as client,
    ):
        started = time.monotonic()
        answers = [fetch(client) for _ in range(3)]
        # The bucket refilled for at most this long between the first charge and the third.
        refill_ms = (time.monotonic() - started) * 1000
        after = fetch(client)  # held by the mute until the throttle has passed
    unthrottled, throttled = answers[:2], answers[2]
    seen = [(a.throttle_time_ms, record_bytes(a)) for a in answers]
    assert all(a.throttle_time_ms == 0 and record_bytes(a) >= RECORDS * 1000 for a in unthrottled), seen
    assert 450 - refill_ms <= throttled.throttle_time_ms <= 600, (throttled.throttle_time_ms, refill_ms)
    assert throttled.error_code == 0
    if mode == "empty":
        # Kafka's throttled answer: no data at all, and the bytes were not charged...
        assert throttled.responses == []
        # ...so the same offsets are read again, in full, once the throttle has passed.
        assert record_bytes(after) == record_bytes(unthrottled[0])
        assert after.throttle_time_ms == 0
    else:
        assert record_bytes(throttled) == record_bytes(unthrottled[0])
        # The data went out and stays charged: the next fetch is throttled again.
        assert after.throttle_time_ms > 0
