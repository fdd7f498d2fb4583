"""Deterministic record sets and an order-independent digest, for byte-for-byte read-back checks."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence

from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder


def make_records(count: int, size: int = 200, seed: int = 7) -> list[tuple[bytes, bytes]]:
    rng = random.Random(seed)
    return [(f"key-{i}".encode(), rng.randbytes(size)) for i in range(count)]


def digest(records: Iterable[tuple[bytes | None, bytes | None]]) -> str:
    """SHA-256 over the sorted (key, value) pairs: equal iff the same multiset of records."""
    h = hashlib.sha256()
    for key, value in sorted((k or b"", v or b"") for k, v in records):
        h.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
    return h.hexdigest()


def one_batch_produce(
    topic: str,
    values: Sequence[bytes],
    keys: Sequence[bytes | None] | None = None,
    partition: int = 0,
    acks: int = 1,
) -> ProduceRequest:
    """A kafka-python ProduceRequest carrying `values` (keyed by `keys`, else unkeyed) as one record batch,
    for raw probes; encode it at the version the test pins. `produced_records` gives the batch back."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 22)
    for value, key in zip(values, keys if keys is not None else [None] * len(values), strict=True):
        builder.append(0, key, value, [])
    builder.close()
    records = bytes(builder.buffer())
    data = ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records)
    request = ProduceRequest(
        acks=acks,
        timeout_ms=10000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[data])],
    )
    request.transactional_id = None
    return request


def produced_records(request: ProduceRequest) -> bytes:
    """The record batch of a request made by `one_batch_produce`."""
    return request.topic_data[0].partition_data[0].records
