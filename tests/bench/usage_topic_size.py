"""How many bytes per second the usage topic takes with 1,000 active entities.

The real proxy in front of the test broker, usage records on (1 s interval), a client-id quota on every
client (so each row carries its bound). One raw connection sends, every second, one Produce to one topic
for each of 1,000 client-ids (pipelined), so each interval holds 1,000 entity rows and 1,000 topic rows.
What the proxy wrote is read from its own counter (`sluice_usage_bytes_sent_total`, the JSON message values)
and from the topic with a real client; what the broker stores per interval is that message's record batch
as the publisher builds it (gzip, the default `usage.compression`).

Run: ``.venv/bin/python tests/bench/usage_topic_size.py [entities] [seconds]`` (one JSON line).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from rawclient import RawClient
from throttle_harness import metric_value

from sluice.protocol.record_batches import GZIP, Record, encode_record_batch
from sluice.quota.usage_records import decode_batch

TOPIC = "many-clients"


def _frames(client: RawClient, entities: int) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(0, b"k", b"v" * 100, [])
    builder.close()
    partition = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=bytes(builder.buffer()))
    request = ProduceRequest(
        version=3,
        acks=1,
        timeout_ms=10000,
        topic_data=[ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[partition])],
    )
    request.transactional_id = None
    out = []
    for i in range(entities):
        client.client_id = f"service-{i:04d}"
        out.append(client.encode(request, 3)[1])
    return b"".join(out)


def measure(entities: int = 1000, seconds: int = 10) -> dict[str, float]:
    config = {
        "quota": {"entities": [{"client_id": "<default>", "producer_byte_rate": 10_000_000}]},
        "usage": {"enabled": True, "interval_ms": 1000, "max_entities": entities * 2},
    }
    with MockCluster(brokers=3, topics={TOPIC: 1}) as cluster:
        with (
            ProxyProcess(cluster.bootstrap, config, log_level="warning") as proxy,
            RawClient("127.0.0.1", proxy.broker_port(1)) as client,
        ):
            client.sock.settimeout(60)
            wire = _frames(client, entities)
            start_bytes = metric_value(proxy.metrics_text(), "sluice_usage_bytes_sent_total")
            t0 = time.monotonic()
            for _ in range(seconds):
                tick = time.monotonic()
                client.sock.sendall(wire)
                for _ in range(entities):
                    client.receive_frame()
                time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
            elapsed = time.monotonic() - t0
            time.sleep(1.5)  # the last full interval is published
            sent_bytes = metric_value(proxy.metrics_text(), "sluice_usage_bytes_sent_total") - start_bytes
        from confluent_kafka import Consumer

        consumer = Consumer(
            {"bootstrap.servers": cluster.bootstrap, "group.id": "size", "auto.offset.reset": "earliest"}
        )
        consumer.subscribe(["_sluice_usage"])
        sizes: list[tuple[int, int]] = []  # (rows, value + key bytes) per message
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            batch = decode_batch(message.value())
            # What the broker stores: the record batch, as the publisher's produce built it (gzip).
            stored = encode_record_batch([Record(message.key(), message.value())], 0, compression=GZIP)
            sizes.append((len(batch.rows), len(message.value()), len(stored)))
        consumer.close()
    full = [(json_bytes, stored) for rows, json_bytes, stored in sizes if rows >= 2 * entities * 0.99]
    json_per_interval = sum(j for j, _ in full) / len(full) if full else 0.0
    stored_per_interval = sum(s for _, s in full) / len(full) if full else 0.0
    return {
        "entities": entities,
        "seconds": round(elapsed, 1),
        "full_interval_messages": len(full),
        "json_bytes_per_interval": round(json_per_interval),
        "json_bytes_per_entity": round(json_per_interval / entities, 1) if entities else 0.0,
        "stored_gzip_bytes_per_interval": round(stored_per_interval),
        "usage_json_bytes_sent_per_s": round(sent_bytes / elapsed),
    }


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    print(json.dumps(measure(*args)))
