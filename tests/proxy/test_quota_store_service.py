"""QuotaStoreService against the real test broker (librdkafka's mock cluster): the store topic is created,
an alter's records reach every follower, a restarted instance finds its quotas, bad records are skipped,
and an unreachable store fails a write instead of pretending."""

from __future__ import annotations

import asyncio
import time

import pytest
import structlog
from mock_cluster_process import MockCluster

from sluice.config import load_config
from sluice.config.quota_settings import QuotaStoreSettings
from sluice.proxy.control_plane.client_quota_entity import ClientQuotaEntity
from sluice.proxy.control_plane.quota_admin import StoreRecord
from sluice.proxy.control_plane.quota_records import encode_key, encode_value
from sluice.proxy.control_plane.quota_state import QuotaState
from sluice.proxy.control_plane.quota_store_service import QuotaStoreService, StoreUnavailable
from sluice.proxy.kafka_client import KafkaClient, Record, RetryPolicy

BASE = {"listen": "127.0.0.1:9092", "upstream.bootstrap": ["kafka:19092"]}
FAST_RETRY = RetryPolicy(initial_s=0.02, max_s=0.2)
PUMP = ClientQuotaEntity(client_id="pump")


@pytest.fixture(scope="module")
def cluster():
    with MockCluster(brokers=3, topics={}) as c:
        yield c


def state(quota: dict | None = None) -> QuotaState:
    return QuotaState(load_config(overrides={**BASE, "quota": quota or {}}).quota)


def instance(
    cluster: MockCluster, topic: str, quota: dict | None = None, **kw
) -> tuple[QuotaState, QuotaStoreService]:
    client = KafkaClient(cluster.addresses, request_timeout_s=10.0, retry=FAST_RETRY)
    own = state(quota)
    return own, QuotaStoreService(client, own, QuotaStoreSettings(topic=topic, write_timeout_ms=3000), **kw)


async def stop(*services: QuotaStoreService) -> None:
    for service in services:
        await service.stop()
        await service._client.stop()


async def wait_for(predicate, timeout_s: float = 5.0) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)  # a poll: the predicate is the event
    return time.monotonic() - start


def record(entity: ClientQuotaEntity, quotas: dict) -> StoreRecord:
    return StoreRecord(encode_key(entity), encode_value(quotas))


async def test_a_write_reaches_every_follower_and_survives_a_restart(cluster) -> None:
    a_state, a = instance(cluster, "store-basic")
    b_state, b = instance(cluster, "store-basic")
    await a.start()
    await b.start()
    assert a.caught_up and b.caught_up
    try:
        offset = await a.write([record(PUMP, {"producer_byte_rate": 2097152.0})])
        a_state.store_written({PUMP: {"producer_byte_rate": 2097152.0}}, offset)
        assert a_state.live.managers.produce.quota("ANONYMOUS", "pump") == 2097152.0
        waited = await wait_for(lambda: b_state.live.managers.produce.quota("ANONYMOUS", "pump") == 2097152.0)
        assert waited < 2.0
        # Removing the last quota is a tombstone, and it reaches the follower too.
        offset = await a.write([StoreRecord(encode_key(PUMP), None)])
        a_state.store_written({PUMP: {}}, offset)
        await wait_for(lambda: b_state.store.snapshot() == {})
        await a.write([record(PUMP, {"consumer_byte_rate": 1000.0})])
    finally:
        await stop(a, b)
    c_state, c = instance(cluster, "store-basic")
    await c.start()
    try:
        assert c.caught_up
        assert c_state.store.snapshot() == {PUMP: {"consumer_byte_rate": 1000.0}}
        assert c_state.live.managers.fetch.quota("ANONYMOUS", "pump") == 1000.0
    finally:
        await stop(c)


async def test_each_long_poll_asks_how_long_it_may_wait(cluster) -> None:
    # `sluice run` ends each poll on the background's grid (test_wake_grid): the wait is asked for every
    # poll, not once. Here 30 ms each: several polls come and go while nothing is written.
    asked = asyncio.get_running_loop().create_future()
    waits: list[int] = []

    def follow_wait_ms() -> int:
        waits.append(30)
        if len(waits) == 4 and not asked.done():
            asked.set_result(None)
        return 30

    _, service = instance(cluster, "store-waits", follow_wait_ms=follow_wait_ms)
    await service.start()
    try:
        await asyncio.wait_for(asked, timeout=30)  # the event: the fourth poll asked
        assert service.caught_up and service.records_applied == 0
    finally:
        await stop(service)


async def test_records_it_cannot_read_are_skipped(cluster) -> None:
    writer = KafkaClient(cluster.addresses, request_timeout_s=10.0, retry=FAST_RETRY)
    try:
        await writer.create_topic("store-junk")
        await writer.produce(
            "store-junk",
            0,
            [
                Record(b"not json", b"x"),
                Record(encode_key(PUMP), b'{"quotas":{"producer_byte_rate":-5},"v":1}'),
                Record(encode_key(PUMP), encode_value({"producer_byte_rate": 10.0})),
                Record(b'{"entity":{"user":"a"},"v":9}', b"{}"),
            ],
        )
    finally:
        await writer.stop()
    own, service = instance(cluster, "store-junk")
    await service.start()
    try:
        assert service.caught_up
        assert (service.records_applied, service.records_skipped) == (1, 3)
        assert own.store.snapshot() == {PUMP: {"producer_byte_rate": 10.0}}
    finally:
        await stop(service)


async def test_file_quotas_apply_when_the_store_cannot_be_reached() -> None:
    client = KafkaClient([("127.0.0.1", 1)], request_timeout_s=0.5, retry=FAST_RETRY)
    own = state({"entities": [{"client_id": "pump", "producer_byte_rate": 1000}]})
    service = QuotaStoreService(client, own, QuotaStoreSettings(write_timeout_ms=300), startup_wait_s=0.3)
    await service.start()
    try:
        assert not service.caught_up
        assert own.live.managers.produce.quota("ANONYMOUS", "pump") == 1000.0
        with pytest.raises(StoreUnavailable, match="_sluice_quotas"):
            await service.write([record(PUMP, {"producer_byte_rate": 5.0})])
        assert own.live.managers.produce.quota("ANONYMOUS", "pump") == 1000.0
    finally:
        await stop(service)


async def test_a_stop_asked_for_while_starting_ends_the_wait_for_an_unreachable_store() -> None:
    """SIGTERM while the store cannot be read: the proxy stops at once, not after the start-up wait."""
    client = KafkaClient([("127.0.0.1", 1)], request_timeout_s=0.5, retry=FAST_RETRY)
    stop_requested = asyncio.Event()
    service = QuotaStoreService(
        client, state(), QuotaStoreSettings(), startup_wait_s=3600, stop_requested=stop_requested
    )
    starting = asyncio.create_task(service.start())
    try:
        await asyncio.sleep(0)  # start() is waiting for the store now
        assert not starting.done()
        with structlog.testing.capture_logs() as logs:
            stop_requested.set()
            await asyncio.wait_for(starting, 60)  # a guard against a hang: without the stop, an hour
        assert service.ready.is_set() and not service.caught_up
        assert "quota_store_not_read_at_start" not in [e["event"] for e in logs]  # it was not waited for
    finally:
        starting.cancel()
        await stop(service)
