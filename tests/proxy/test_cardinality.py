"""Cardinality (issue 14 item 3): requests Kafka does not charge create no quota sensors; the entities
tracked and exported are capped by quota.max_entities (overflow counted, logged); a scrape hands the event
loop back while it reads sensors and renders its text on another thread."""

from __future__ import annotations

import asyncio
import threading

from proxy_process import ProxyProcess
from rawclient import RawClient
from throttle_harness import metric_value

from sluice.protocol.headers import encode_request
from sluice.proxy.observability import metrics_http
from sluice.proxy.observability.quota_metrics import SCRAPE_CHUNK, QuotaCollector, ThrottleStats
from sluice.quota import ANONYMOUS, DEFAULT, QuotaConfig, QuotaEntity, QuotaKey, QuotaManagers

API_VERSIONS, METADATA = 18, 3
MAX_ENTITIES = 300


def pipelined(port: int, api_key: int, version: int, body: bytes, client_ids: list[str]) -> None:
    """One request per client-id, all written at once on one connection; every answer read back."""
    with RawClient("127.0.0.1", port) as client:
        data = b"".join(
            encode_request(api_key, version, i, client_id, body) for i, client_id in enumerate(client_ids)
        )
        client.sock.sendall(data)
        for _ in client_ids:
            client.receive_frame()


def test_client_id_flood_creates_no_sensor_for_api_versions_and_a_capped_number_otherwise(cluster) -> None:
    quota = {
        "max_entities": MAX_ENTITIES,
        "entities": [{"client_id": "<default>", "request_percentage": 50}],
    }
    with ProxyProcess(cluster.bootstrap, extra_config={"quota": quota}) as proxy:
        # ApiVersions is what a client sends before it may log in: Kafka does not charge it there.
        pipelined(proxy.port, API_VERSIONS, 0, b"", [f"flood-{i}" for i in range(5_000)])
        text = proxy.metrics_text()
        assert metric_value(text, "sluice_quota_entities", type="Request") == 0
        assert metric_value(text, "sluice_request_time") == 0

        # Metadata is charged: 2,000 client-ids, but at most MAX_ENTITIES sensors plus one overflow sensor.
        empty_topics_v1 = b"\x00\x00\x00\x00"
        pipelined(proxy.port, METADATA, 1, empty_topics_v1, [f"meta-{i}" for i in range(2_000)])
        text = proxy.metrics_text()
        assert metric_value(text, "sluice_quota_entities", type="Request") == MAX_ENTITIES + 1
        assert (
            metric_value(text, "sluice_quota_entities_overflow_total", type="Request") == 2_000 - MAX_ENTITIES
        )
        event = proxy.wait_for_event("quota_entities_overflow", quota="request_percentage")
        assert event["max_entities"] == MAX_ENTITIES
        # What is exported is bounded too: one series per tracked sensor.
        assert text.count("\nsluice_request_time{") == MAX_ENTITIES + 1
        assert len(text) < 200_000
        assert proxy.process.poll() is None


def _managers_with(sensors: int) -> QuotaManagers:
    managers = QuotaManagers(QuotaConfig(max_entities=sensors))
    managers.set_quota(QuotaEntity(client_id=DEFAULT), QuotaKey.PRODUCER_BYTE_RATE, 1e6)
    for i in range(sensors):
        managers.produce.record_and_get_throttle_ms(ANONYMOUS, f"c{i}", 10, 0)
    return managers


async def test_a_scrape_hands_the_loop_back_while_reading_sensors() -> None:
    sensors = 4_000
    collector = QuotaCollector(_managers_with(sensors), ThrottleStats(), lambda: 1000)
    turns = 0
    stop = False

    async def other_work() -> None:  # stands in for the clients the loop serves meanwhile
        nonlocal turns
        while not stop:
            turns += 1
            await asyncio.sleep(0)  # one turn of the loop: the turns are what is counted

    worker = asyncio.create_task(other_work())
    await asyncio.sleep(0)  # one turn: the worker is running
    families = await collector.collect_async()
    stop = True
    await worker
    assert turns >= sensors // SCRAPE_CHUNK - 1
    by_name = {family.name: family for family in families}
    assert len(by_name["sluice_byte_rate"].samples) == sensors


async def test_a_scrape_renders_off_the_event_loop(monkeypatch) -> None:
    threads: list[int] = []
    render = metrics_http._render

    def recording(families):
        threads.append(threading.get_ident())
        return render(families)

    monkeypatch.setattr(metrics_http, "_render", recording)
    collector = QuotaCollector(_managers_with(10), ThrottleStats(), lambda: 1000)
    body = await metrics_http.scrape([collector])
    assert b'sluice_byte_rate{client_id="c0",type="Produce",user=""}' in body
    assert threads and threads[0] != threading.get_ident()
