"""Read a partition's record batches straight from a broker, and apply a Kafka broker's duplicate rule.

librdkafka's mock cluster checks producer sequence numbers only for transactional producers, so it appends
a batch an idempotent producer sends twice; a Kafka broker would answer DUPLICATE_SEQUENCE_NUMBER and keep
one. `as_a_broker_keeps` replays the log with the broker's rule (ProducerStateManager: a batch whose
producer id, epoch and first and last sequence match one of that producer's last five batches on the
partition is a duplicate; any other batch must start at the previous batch's last sequence + 1), so a test
can say what a real broker would hold.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.record import MemoryRecords
from rawclient import RawClient

NO_PRODUCER_ID = -1
CACHED_BATCHES = 5  # Kafka keeps the metadata of a producer's last five batches per partition


@dataclass(frozen=True)
class Batch:
    base_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    keys: tuple[bytes, ...]

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + len(self.keys) - 1


def read_batches(host: str, port: int, topic: str, partition: int) -> list[Batch]:
    """Every batch of the partition, in log order, fetched from its leader."""
    batches: list[Batch] = []
    offset = 0
    with RawClient(host, port, client_id="batch-log") as client:
        while True:
            wanted = FetchRequest.FetchTopic.FetchPartition(
                partition=partition, fetch_offset=offset, partition_max_bytes=8 << 20
            )
            request = FetchRequest[11](
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=8 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[FetchRequest.FetchTopic(topic=topic, partitions=[wanted])],
                forgotten_topics_data=[],
            )
            answer = client.call(request, 11, FetchResponse)
            records = answer.responses[0].partitions[0].records
            if not records:
                return batches
            log = MemoryRecords(records)
            while log.has_next():
                batch = log.next_batch()
                keys = tuple(record.key for record in batch)
                batches.append(
                    Batch(
                        batch.base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence, keys
                    )
                )
                offset = batch.base_offset + len(keys)


@dataclass
class BrokerView:
    kept: list[bytes]  # the keys a broker would hold, in log order
    duplicate_batches: int  # batches a broker would have answered with DUPLICATE_SEQUENCE_NUMBER
    out_of_order_batches: int  # batches a broker would have refused with OUT_OF_ORDER_SEQUENCE_NUMBER


def as_a_broker_keeps(batches: Iterable[Batch]) -> BrokerView:
    view = BrokerView([], 0, 0)
    cached: dict[int, list[Batch]] = {}
    for batch in batches:
        if batch.producer_id == NO_PRODUCER_ID:  # not idempotent: a broker appends whatever comes
            view.kept.extend(batch.keys)
            continue
        recent = cached.setdefault(batch.producer_id, [])
        same = (batch.producer_epoch, batch.base_sequence, batch.last_sequence)
        if any((b.producer_epoch, b.base_sequence, b.last_sequence) == same for b in recent):
            view.duplicate_batches += 1
            continue
        last = recent[-1] if recent else None
        if last is None or batch.producer_epoch != last.producer_epoch:
            in_order = batch.base_sequence == 0  # a new producer or epoch starts at sequence 0
        else:
            in_order = batch.base_sequence == last.last_sequence + 1
        if not in_order:
            view.out_of_order_batches += 1
            continue
        view.kept.extend(batch.keys)
        recent.append(batch)
        del recent[:-CACHED_BATCHES]
    return view
