"""The demo's usage records, saved: the usage topic as JSON lines, one message per line as published.

`sluice demo --usage-out PATH` turns usage records on in the main Sluice and, once its clients have
stopped and the proxies have drained (the last interval is published on the way out), reads the usage
topic from the test broker before it goes away. `sluice pipeline demo --input PATH` (what `make
demo-pipeline` runs) then reports on them: the pipeline on the demo's own traffic.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from sluice.quota.usage_records import decode_batch

if TYPE_CHECKING:  # confluent-kafka is imported when the demo runs
    from confluent_kafka import Consumer

USAGE_TOPIC = "_sluice_usage"
_READ_TIMEOUT_S = 15.0


class SavedUsage(NamedTuple):
    messages: int
    rows: int
    produce_bytes: dict[str, int]  # per client-id, summed over its entity rows


def save_usage_topic(bootstrap: str, path: Path, topic: str = USAGE_TOPIC) -> SavedUsage:
    """Every message of `topic` now on the brokers, written to `path` (one JSON document per line)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "sluice-demo-usage", "enable.auto.commit": False}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        values = _read_until(consumer, ends)
    finally:
        consumer.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    produce_bytes: dict[str, int] = {}
    with path.open("wb") as out:
        for value in values:
            out.write(value.rstrip(b"\n") + b"\n")
            for row in decode_batch(value).rows:  # the documented codec, as the pipeline reads them
                rows += 1
                if row.topic is None:  # the entity's own row (its topic rows break the same bytes down)
                    client = row.client_id or ""
                    produce_bytes[client] = produce_bytes.get(client, 0) + row.produce_bytes
    return SavedUsage(len(values), rows, produce_bytes)


def _read_until(consumer: Consumer, ends: dict[int, int]) -> list[bytes]:
    values: list[bytes] = []
    positions = {p: 0 for p in ends}
    deadline = time.monotonic() + _READ_TIMEOUT_S
    while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        value, partition, offset = message.value(), message.partition(), message.offset()
        if value is None or partition is None or offset is None:  # not a record
            continue
        values.append(value)
        positions[partition] = offset + 1
    return values
