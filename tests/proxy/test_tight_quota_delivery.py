"""Tight quotas and librdkafka (docs/quotas.md): requests held by a throttle outlive the client's timeout.

A confluent-kafka producer sends 500 keyed 1 kB records flat out through Sluice under a 20 kB/s quota,
with request and socket timeouts (1 s) shorter than the throttles its 64 kB requests earn (about 3 s).
The batches are then read straight from the brokers and replayed with a Kafka broker's duplicate rule
(tests/batch_log.py: librdkafka's mock cluster only checks sequences for transactional producers).

With a broker's per-connection mute (`quota.mute_scope: connection`) the pipelined requests wait behind
the mute and time out.
* with enable.idempotence=true a broker keeps every record exactly once: every key once, none missing
  (librdkafka closes the connection of a request that timed out, `socket.max.fails=1`, and what the proxy
  held for it goes);
* without it, and with a client that keeps its connection after a timeout (`socket.max.fails=0`), the
  batches sent again queue behind their first copies on the same connection and both reach the broker
  once the mute ends: records appear twice, as they would behind a broker's muted channel.

With the entity gate (`entity`, the default) the three connections share one gate, so requests wait
longer; a request still waiting when its client's timeout passes is answered REQUEST_TIMED_OUT and never
forwarded, so the quota goes to requests somebody waits for. Every record arrives, within the same time.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import NamedTuple

import pytest
from batch_log import as_a_broker_keeps, read_batches
from confluent_kafka import Producer
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess

pytestmark = pytest.mark.slow

TOPIC = "tight"
PARTITIONS = 6
RECORDS = 500
QUOTA = 20_000  # bytes/s: a 64 kB request earns a ~3 s throttle
TIMEOUT_MS = 1000


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=3, topics={TOPIC: PARTITIONS}) as running:
        yield running


class Run(NamedTuple):
    client_timeouts: int  # requests librdkafka timed out
    gate_timeouts: int  # requests the entity gate answered REQUEST_TIMED_OUT


def produce_through_a_tight_quota(
    cluster: MockCluster, client_id: str, idempotent: bool, scope: str, keep_connection: bool = False
) -> Run:
    """Send RECORDS keyed records through Sluice; every one must be delivered within 60 s.

    keep_connection: librdkafka's socket.max.fails=0, the connection stays open when a request times out
    (by default, 1, librdkafka closes it). Copies then pile up behind the mute faster than the quota drains
    them, each charged in turn (docs/quotas.md), so records are given 20 s and may time out undelivered.
    """
    quota = {
        "mute_scope": scope,
        "entities": [{"client_id": client_id, "producer_byte_rate": QUOTA}],
    }
    timeouts: dict[str, int] = {}

    def on_stats(text: str) -> None:
        for broker in json.loads(text)["brokers"].values():
            timeouts[broker["name"]] = broker.get("req_timeouts", 0)

    with ProxyProcess(cluster.bootstrap, extra_config={"quota": quota}) as proxy:
        producer = Producer(
            {
                "bootstrap.servers": proxy.bootstrap,
                "client.id": client_id,
                "enable.idempotence": idempotent,
                "batch.size": 65536,
                "linger.ms": 5,
                "request.timeout.ms": TIMEOUT_MS,
                "socket.timeout.ms": TIMEOUT_MS,
                "statistics.interval.ms": 500,
                "stats_cb": on_stats,
                "socket.max.fails": 0 if keep_connection else 1,
                "message.timeout.ms": 20_000 if keep_connection else 300_000,
            }
        )
        failed: list[str] = []

        def on_delivery(error: object, _message: object) -> None:
            if error is not None:
                failed.append(str(error))

        for i in range(RECORDS):
            producer.produce(TOPIC, b"x" * 1000, key=f"{client_id}-{i:04d}".encode(), on_delivery=on_delivery)
            producer.poll(0)
        assert producer.flush(60) == 0
        producer.poll(0.6)  # one more statistics report after the last delivery
        if keep_connection:
            assert all("timed out" in error.lower() for error in failed), failed[:3]
        else:
            assert failed == [], failed[:3]
        gate_timeouts = metric_value(proxy.metrics_text(), "sluice_gate_timed_out_requests_total")
    return Run(sum(timeouts.values()), int(gate_timeouts))


def metric_value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


def keys_a_broker_keeps(cluster: MockCluster, client_id: str) -> tuple[Counter[bytes], int, int]:
    """The keys a broker would hold, with the batches it would answer as duplicates or out of order."""
    kept: Counter[bytes] = Counter()
    duplicates = out_of_order = 0
    for partition in range(PARTITIONS):
        # With replication 1, partition p is led by broker p % 3 + 1.
        host, port = cluster.addresses[partition % 3]
        batches = [
            b for b in read_batches(host, port, TOPIC, partition) if b.keys[0].startswith(client_id.encode())
        ]
        view = as_a_broker_keeps(batches)
        kept.update(view.kept)
        duplicates += view.duplicate_batches
        out_of_order += view.out_of_order_batches
    return kept, duplicates, out_of_order


def test_an_idempotent_producer_gets_every_record_exactly_once(cluster: MockCluster) -> None:
    run = produce_through_a_tight_quota(cluster, "idempotent", idempotent=True, scope="connection")
    assert run.client_timeouts > 0, "no request outlived its timeout: the test did not reach its case"
    kept, _duplicates, out_of_order = keys_a_broker_keeps(cluster, "idempotent")
    # Held requests whose client gave up on them may reach the broker beside their retries (the sequence
    # numbers make them one), or not: an idempotent librdkafka producer closes a connection whose request
    # timed out, and the proxy then drops what it held for that connection at once
    # (proxy/data_path/peer_watch.py; it used to forward it when the mute ended).
    assert out_of_order == 0
    assert set(kept) == {f"idempotent-{i:04d}".encode() for i in range(RECORDS)}, "records missing"
    assert [key for key, count in kept.items() if count > 1] == []


def test_without_idempotence_the_same_run_writes_records_twice(cluster: MockCluster) -> None:
    # A duplicate needs a copy that reaches the broker after its client gave up on it. With the connection
    # kept open the client's second copy queues behind the first in the muted connection, and both are
    # forwarded when the mute ends. (With librdkafka's default, socket.max.fails=1, the client closes the
    # connection and the proxy drops what it held for it: then only a copy forwarded in the instant before
    # the close is written twice, which a run may or may not show.)
    run = produce_through_a_tight_quota(
        cluster, "plain", idempotent=False, scope="connection", keep_connection=True
    )
    assert run.client_timeouts > 0, "no request outlived its timeout: the test did not reach its case"
    kept, _, _ = keys_a_broker_keeps(cluster, "plain")
    assert set(kept) <= {f"plain-{i:04d}".encode() for i in range(RECORDS)}
    written_twice = sum(count - 1 for count in kept.values())
    print(
        f"{run.client_timeouts} timeouts, {len(kept)} of {RECORDS} records kept, {written_twice} extra copies"
    )
    assert written_twice > 0, "no record written twice: the warning is moot"


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_at_the_entity_gate_requests_past_their_timeout_are_answered_and_every_record_arrives(
    cluster: MockCluster, idempotent: bool
) -> None:
    client_id = f"gate-{'idempotent' if idempotent else 'plain'}"
    run = produce_through_a_tight_quota(cluster, client_id, idempotent=idempotent, scope="entity")
    assert run.gate_timeouts > 0, "no request waited past its timeout: the test did not reach its case"
    kept, _duplicates, out_of_order = keys_a_broker_keeps(cluster, client_id)
    assert out_of_order == 0  # no request past its timeout reached the broker ahead of its re-sent copy
    assert set(kept) == {f"{client_id}-{i:04d}".encode() for i in range(RECORDS)}, "records missing"
    if idempotent:
        assert [key for key, count in kept.items() if count > 1] == []
