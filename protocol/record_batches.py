"""Record batches for the proxy's own Kafka client: build one (magic 2) to produce, read what a Fetch got.

Sans-IO over kafka-python's record codecs (`kafka.record`): `encode_record_batch` builds one v2 batch
(uncompressed, or gzip: the standard library's, which every Kafka client reads), `decode_records` walks
the record set of a fetched partition. A fetch answer may end inside a batch (the broker cuts at
`max_bytes`); that tail is not an error, the caller fetches from the next offset again. Control batches
(transaction markers) are skipped; their offsets still advance the position.

Every malformed input is a ProtocolError('bad_record_batch'); no detail quotes record content.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from kafka.errors import CorruptRecordError
from kafka.record.abc import ABCRecordBatch
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from sluice.protocol.errors import ProtocolError

_MAGIC_V2 = 2
_NO_COMPRESSION = 0
GZIP = 1  # Kafka's compression type id for gzip
_NO_PRODUCER = -1
_CODEC_ERRORS = (
    CorruptRecordError,
    AssertionError,
    IndexError,
    struct.error,
    ValueError,
    TypeError,
    KeyError,
)
_UNBOUNDED = 2**31 - 1

Header = tuple[str, bytes | None]


class Record(NamedTuple):
    """One record to produce. `timestamp_ms` None: the batch's `now_ms`."""

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp_ms: int | None = None


class FetchedRecord(NamedTuple):
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


class DecodedRecords(NamedTuple):
    records: list[FetchedRecord]
    next_offset: int  # one past the last offset seen in a whole batch (control batches included)


class ProducerState(NamedTuple):
    """An idempotent producer's id, epoch and the first sequence number of the batch."""

    producer_id: int
    producer_epoch: int
    base_sequence: int


def encode_record_batch(
    records: Sequence[Record],
    now_ms: int,
    producer: ProducerState | None = None,
    compression: int = _NO_COMPRESSION,
) -> bytes:
    """One magic-2 record batch holding `records` in order (offset deltas 0..n-1), uncompressed or (with
    `compression=GZIP`) gzip-compressed.

    Raises ValueError for an empty batch or a key, value or header that is not bytes.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    pid, epoch, sequence = producer if producer is not None else (_NO_PRODUCER, -1, -1)
    builder = DefaultRecordBatchBuilder(
        magic=_MAGIC_V2,
        compression_type=compression if compression == GZIP else _NO_COMPRESSION,
        is_transactional=False,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=_UNBOUNDED,
    )
    for delta, record in enumerate(records):
        timestamp = now_ms if record.timestamp_ms is None else record.timestamp_ms
        try:
            builder.append(delta, timestamp, record.key, record.value, list(record.headers))
        except (TypeError, AttributeError) as exc:
            raise ValueError(f"record {delta}: key, value and header values must be bytes or None") from exc
    return bytes(builder.build())


def decode_records(data: bytes | memoryview | None, start_offset: int) -> DecodedRecords:
    """The records at or after `start_offset` in a fetched record set (a broker may return a batch that
    begins before the offset asked for: its earlier records are dropped here)."""
    if not data:
        return DecodedRecords([], start_offset)
    out: list[FetchedRecord] = []
    next_offset = start_offset
    try:
        for batch in _batches(data):
            next_offset = max(next_offset, _batch_next_offset(batch))
            if getattr(batch, "is_control_batch", False):
                continue
            out.extend(_batch_records(batch, start_offset))
    except _CODEC_ERRORS as exc:
        raise ProtocolError("bad_record_batch", type(exc).__name__) from None
    return DecodedRecords(out, next_offset)


def _batches(data: bytes | memoryview) -> Iterator[ABCRecordBatch]:
    records = MemoryRecords(bytes(data))
    while records.has_next():
        batch = records.next_batch()
        if batch is None:  # a tail cut at max_bytes: fetched again from the next offset
            return
        if hasattr(batch, "validate_crc") and not batch.validate_crc():
            raise CorruptRecordError("record batch CRC mismatch")
        yield batch


def _batch_next_offset(batch: ABCRecordBatch) -> int:
    next_offset = getattr(batch, "next_offset", None)
    if next_offset is not None:
        return int(next_offset)
    # A legacy (magic 0/1) wrapper: its last inner offset, found by walking it.
    last = -1
    for record in batch:
        last = record.offset
    return last + 1


def _batch_records(batch: ABCRecordBatch, start_offset: int) -> list[FetchedRecord]:
    out = []
    for record in batch:
        if record.offset < start_offset:
            continue
        headers = tuple((name, value) for name, value in getattr(record, "headers", ()) or ())
        out.append(
            FetchedRecord(
                record.offset,
                record.timestamp if record.timestamp is not None else -1,
                _as_bytes(record.key),
                _as_bytes(record.value),
                headers,
            )
        )
    return out


def _as_bytes(value: bytes | bytearray | memoryview | None) -> bytes | None:
    return None if value is None else bytes(value)
