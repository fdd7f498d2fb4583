"""Usage records end to end: every byte a client sent through the proxy is in the records of the interval
it was admitted in, read back from the usage topic with a real Kafka client and decoded with the
documented schema; and Kafka refusing the usage topic never holds client traffic back."""

from __future__ import annotations

import time

import pytest
from fleet_harness import read_usage
from kafka.protocol.producer import ProduceRequest
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from rawclient import RawClient
from records import one_batch_produce, produced_records
from throttle_harness import FlatOutProducer, metric_value
from waiting import wait_until

from sluice.quota.usage_records import SCHEMA, VERSION

pytestmark = pytest.mark.slow  # end to end: real processes, real clients

TOPIC = "metered"
CLIENTS = ("alpha", "beta", "gamma")
SECONDS = 8


def produce_request(sizes: list[int]) -> tuple[ProduceRequest, int]:
    """A Produce request with one record of each size; also the record batch's length in bytes."""
    keys = [b"k%d" % i for i in range(len(sizes))]
    request = one_batch_produce(TOPIC, [b"v" * size for size in sizes], keys=keys)
    return request, len(produced_records(request))


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def test_every_byte_is_in_the_records_of_the_interval_it_was_admitted_in() -> None:
    with MockCluster(brokers=3, topics={TOPIC: 1}) as cluster:
        config = {"usage": {"enabled": True, "interval_ms": 1000}}
        with ProxyProcess(cluster.bootstrap, config, log_level="warning") as proxy:
            # (sent at, answered at, client-id, request bytes, record batch bytes), wall-clock ms
            sends: list[tuple[int, int, str, int, int]] = []
            # Partition 0 of a single-replica topic lives on broker 1: talk to the proxy's listener for it.
            with RawClient("127.0.0.1", proxy.broker_port(1)) as client:
                for second in range(SECONDS):
                    now = _wall_ms()
                    # A quarter into the next wall-clock second: well inside one publish interval (the
                    # moment on the clock is the event).
                    time.sleep(((now // 1000 + 1) * 1000 + 250 - now) / 1000)
                    for n, client_id in enumerate(CLIENTS):
                        client.client_id = client_id
                        request, records_len = produce_request([100 * (second + 1) + 37 * n] * (n + 1))
                        _, frame = client.encode(request, 3)
                        sent_at = _wall_ms()
                        client.sock.sendall(frame)
                        client.receive_frame()
                        sends.append((sent_at, _wall_ms(), client_id, len(frame) - 4, records_len))
            produced_total = metric_value(proxy.metrics_text(), "sluice_request_bytes_total", api="Produce")
        batches = read_usage(cluster.bootstrap)  # confluent-kafka, decoded with decode_batch
    intervals = sorted({(b.interval_start_ms, b.interval_start_ms + b.interval_ms) for b in batches})
    expected: dict[tuple[int, str], list[int]] = {}
    for sent_at, answered_at, client_id, size, records_len in sends:
        # Admitted between sending and the answer, which never straddle an interval's end here.
        (interval,) = [(a, b) for a, b in intervals if a <= sent_at < b]
        assert answered_at < interval[1]
        entry = expected.setdefault((interval[0], client_id), [0, 0, 0])
        entry[0] += size
        entry[1] += records_len
        entry[2] += 1
    recorded: dict[tuple[int, str], list[int]] = {}
    for b in batches:
        for row in b.rows:
            entry = recorded.setdefault((b.interval_start_ms, row.client_id), [0, 0, 0])
            if row.topic is None:
                entry[0] += row.produce_bytes
                entry[2] += row.requests.get("Produce", 0)
            else:
                assert row.topic == TOPIC
                assert row.broker == 1  # the node whose listener took it
                entry[1] += row.produce_bytes
    # Per interval and client-id: the request bytes, the record bytes of the topic, the requests.
    assert recorded == expected
    assert sum(entry[0] for entry in recorded.values()) == produced_total  # nothing else went through


def test_the_records_a_real_consumer_reads_follow_the_documented_schema() -> None:
    import json

    from confluent_kafka import Consumer

    with MockCluster(brokers=3, topics={TOPIC: 3}) as cluster:
        config = {"usage": {"enabled": True, "interval_ms": 500, "topic": "usage-v1"}}
        with ProxyProcess(cluster.bootstrap, config, log_level="warning") as proxy:
            producer = FlatOutProducer(proxy.bootstrap, TOPIC, "pump", partitions=3, pause_s=0.01)
            producer.start()
            wait_until(
                lambda: metric_value(proxy.metrics_text(), "sluice_usage_messages_sent_total") >= 5,
                "five usage messages on the topic",
            )
            producer.stop()
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": "schema-check",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe(["usage-v1"])
        messages = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(messages) < 5:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                messages.append(message)
        consumer.close()
    assert len(messages) >= 5
    for message in messages:
        document = json.loads(message.value())
        assert document["schema"] == SCHEMA and document["version"] == VERSION
        assert message.key() == document["instance"].encode()
        assert set(document) == {"schema", "version", "instance", "interval_start_ms", "interval_ms", "rows"}
        for row in document["rows"]:
            assert {"user", "client_id"} <= set(row)
            assert set(row) <= {
                "user",
                "client_id",
                "topic",
                "broker",
                "produce_bytes",
                "fetch_bytes",
                "requests",
                "throttle_time_ms",
                "throttle_count",
                "partition_mutations",
                "cpu_time_ns",
                "quotas",
            }
    assert any(row.get("client_id") == "pump" for m in messages for row in json.loads(m.value())["rows"])
    # The topic's three partitions live on brokers 1, 2 and 3 (the mock's placement): a topic row each.
    brokers = {row.get("broker") for m in messages for row in json.loads(m.value())["rows"] if "topic" in row}
    assert brokers == {1, 2, 3}


def test_kafka_unreachable_for_the_usage_topic_never_holds_traffic_back() -> None:
    """The usage topic's only partition lives on a broker that goes down; the client's topic does not.
    Client traffic keeps its rate (a token-bucket quota keeps it steady), the drops are counted."""
    with MockCluster(brokers=3, topics={TOPIC: 2, "_sluice_usage": 1}) as cluster:
        cluster.set_leader(TOPIC, 0, 1)
        cluster.set_leader(TOPIC, 1, 2)
        cluster.set_leader("_sluice_usage", 0, 3)
        config = {
            "quota": {
                "sensor": "token_bucket",
                # N = 2: a first burst of 2 x 200 kB, spent at once, then the steady rate
                "window": {"samples": 2, "size_seconds": 1},
                "entities": [{"client_id": "pump", "producer_byte_rate": 200_000}],
            },
            "usage": {"enabled": True, "interval_ms": 500, "buffer_batches": 4},
            "client": {"request_timeout_s": 2},
        }
        with ProxyProcess(cluster.bootstrap, config, log_level="warning") as proxy:
            producer = FlatOutProducer(
                proxy.bootstrap, TOPIC, "pump", partitions=2, **{"queue.buffering.max.kbytes": 256}
            )
            producer.start()
            time.sleep(4)  # past the initial allowance (2 x 200 kB), into the steady rate
            wait_until(
                lambda: metric_value(proxy.metrics_text(), "sluice_usage_messages_sent_total") > 0,
                "usage records reaching the topic while it is up",
            )
            before = metric_value(proxy.metrics_text(), "sluice_request_bytes_total", api="Produce")
            t0 = time.monotonic()
            cluster.broker_down(3)
            time.sleep(12)  # the span measured: records pile up past the buffer and are dropped meanwhile
            text = proxy.metrics_text()
            during = metric_value(text, "sluice_request_bytes_total", api="Produce")
            rate = (during - before) / (time.monotonic() - t0)
            dropped = metric_value(text, "sluice_usage_batches_dropped_total")
            buffered = metric_value(text, "sluice_usage_buffered_messages")
            producer.stop_now()
    print(f"rate while the usage topic is unreachable: {rate:.0f} B/s; dropped {dropped:.0f}")
    assert rate == pytest.approx(200_000, rel=0.1)
    assert dropped > 0 and buffered <= 4
    assert not [error for error in producer.errors if "Purged" not in error]


def test_throttles_and_the_quota_in_force_are_in_the_records() -> None:
    with MockCluster(brokers=3, topics={TOPIC: 3}) as cluster:
        config = {
            "quota": {
                "window": {"samples": 2, "size_seconds": 1},
                "entities": [{"client_id": "pump", "producer_byte_rate": 20_000}],
            },
            "usage": {"enabled": True, "interval_ms": 500},
        }
        with ProxyProcess(cluster.bootstrap, config, log_level="info") as proxy:
            producer = FlatOutProducer(
                proxy.bootstrap, TOPIC, "pump", partitions=3, **{"queue.buffering.max.kbytes": 256}
            )
            producer.start()
            started = proxy.wait_for_event("throttle_started", client_id="pump", timeout_s=60)
            producer.stop_now()
        batches = read_usage(cluster.bootstrap)
    rows = [row for b in batches for row in b.rows if row.client_id == "pump" and row.topic is None]
    assert sum(row.throttle_count.get("Produce", 0) for row in rows) > 0
    assert sum(row.throttle_time_ms.get("Produce", 0) for row in rows) > 0
    assert all(dict(row.quotas) == {"producer_byte_rate": 20_000} for row in rows)
    assert started["quota_type"] == "Produce" and started["throttle_ms"] > 0
