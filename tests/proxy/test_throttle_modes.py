"""kip219, delay and auto throttle modes, observed on the wire with pinned request versions.

One Produce of ~400 kB against a 100 kB/s token bucket holding 2 x 1 s x Q = 200 kB drives the bucket to
about -200 kB: a throttle of ~2,000 ms. In kip219 mode the answer comes at once and the *next* request
waits; in delay mode the answer itself waits; auto picks by the request version (Produce clients back off
from v6, spec 5).
"""

from __future__ import annotations

import time

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from rawclient import RawClient
from records import one_batch_produce

pytestmark = pytest.mark.slow  # end to end: real processes, real clients

TOPIC = "modes"
QUOTA = 100_000
EXPECTED_THROTTLE_MS = 2_000
PRE_KIP219_PRODUCE, KIP219_PRODUCE = 3, 7


@pytest.fixture(scope="module")
def cluster():
    with MockCluster(brokers=3, topics={TOPIC: 1}) as c:
        yield c


def big_produce() -> ProduceRequest:
    return one_batch_produce(TOPIC, [bytes([i]) * 10_000 for i in range(40)])


def proxy_in_mode(cluster, mode: str) -> ProxyProcess:
    quota = {
        "throttle_mode": mode,
        "sensor": "token_bucket",
        "window": {"samples": 2, "size_seconds": 1},
        "entities": [{"client_id": "raw", "producer_byte_rate": QUOTA}],
    }
    return ProxyProcess(cluster.bootstrap, extra_config={"quota": quota})


def produce_and_follow_up(proxy: ProxyProcess, version: int) -> tuple[int, float, float]:
    """(throttle_time_ms in the answer, seconds until that answer, seconds until the next answer after it)."""
    # Partition 0 of a single-replica topic is led by broker 1.
    with RawClient("127.0.0.1", proxy.broker_port(1), client_id="raw") as client:
        started = time.monotonic()
        response = client.call(big_produce(), version, ProduceResponse)
        answered = time.monotonic()
        assert response.responses[0].partition_responses[0].error_code == 0
        client.call(ApiVersionsRequest[0](), 0, ApiVersionsResponse)
        followed = time.monotonic()
    return response.throttle_time_ms, answered - started, followed - answered


def assert_throttle(throttle_ms: int) -> None:
    assert abs(throttle_ms - EXPECTED_THROTTLE_MS) <= 100, throttle_ms


@pytest.mark.parametrize(
    ("mode", "version", "delayed"),
    [
        ("kip219", PRE_KIP219_PRODUCE, False),  # a >= 2.0 broker mutes every version
        ("kip219", KIP219_PRODUCE, False),
        ("delay", KIP219_PRODUCE, True),
        ("auto", PRE_KIP219_PRODUCE, True),
        ("auto", KIP219_PRODUCE, False),
    ],
)
def test_throttle_mode(cluster, mode: str, version: int, delayed: bool) -> None:
    with proxy_in_mode(cluster, mode) as proxy:
        throttle_ms, to_answer, to_next = produce_and_follow_up(proxy, version)
    assert_throttle(throttle_ms)
    held = EXPECTED_THROTTLE_MS / 1000 * 0.9
    if delayed:
        # The answer itself was held back for the throttle.
        assert to_answer >= held, to_answer
    else:
        # The answer came at once; the mute held the next request instead.
        assert to_answer < held / 2, to_answer
        assert to_next >= held - to_answer, to_next
