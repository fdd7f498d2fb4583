"""Record batches of the proxy's own client: what goes in comes out, from any offset, and a cut or corrupt
answer is handled as Kafka's clients handle it."""

from __future__ import annotations

import struct

import pytest

from sluice.protocol.errors import ProtocolError
from sluice.protocol.record_batches import Record, decode_records, encode_record_batch

NOW = 1_700_000_000_000


def with_base_offset(batch: bytes, base: int) -> bytes:
    # The broker sets the base offset when it appends the batch; outside the CRC'd part.
    return struct.pack(">q", base) + batch[8:]


def test_records_round_trip_with_keys_values_headers_and_timestamps() -> None:
    records = [
        Record(b"k", b"v", (("a", b"1"), ("b", None))),
        Record(None, None),
        Record(b"\x00" * 3, b"\xff" * 1000, (), timestamp_ms=NOW - 5),
    ]
    decoded = decode_records(with_base_offset(encode_record_batch(records, NOW), 40), 40)
    assert decoded.next_offset == 43
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in decoded.records] == [
        (40, b"k", b"v", (("a", b"1"), ("b", None)), NOW),
        (41, None, None, (), NOW),
        (42, b"\x00" * 3, b"\xff" * 1000, (), NOW - 5),
    ]


def test_records_before_the_offset_asked_for_are_dropped() -> None:
    batch = with_base_offset(encode_record_batch([Record(b"%d" % i, b"") for i in range(5)], NOW), 10)
    decoded = decode_records(batch, 13)
    assert [r.offset for r in decoded.records] == [13, 14] and decoded.next_offset == 15


def test_a_batch_cut_at_max_bytes_ends_the_answer_without_error() -> None:
    first = with_base_offset(encode_record_batch([Record(b"a", b"1")], NOW), 0)
    second = with_base_offset(encode_record_batch([Record(b"b", b"2")], NOW), 1)
    decoded = decode_records(first + second[:-7], 0)
    assert [r.key for r in decoded.records] == [b"a"] and decoded.next_offset == 1
    assert decode_records(b"", 5) == ([], 5) and decode_records(None, 5) == ([], 5)


def test_a_corrupt_batch_is_a_protocol_error() -> None:
    batch = bytearray(encode_record_batch([Record(b"a", b"payload")], NOW))
    batch[-3] ^= 0xFF  # inside the CRC'd records
    with pytest.raises(ProtocolError) as caught:
        decode_records(bytes(batch), 0)
    assert caught.value.reason == "bad_record_batch" and b"payload" not in str(caught.value).encode()


def test_an_empty_batch_or_a_str_value_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_record_batch([], NOW)
    with pytest.raises(ValueError, match="record 0"):
        encode_record_batch([Record(b"k", "text")], NOW)  # type: ignore[arg-type]


def test_a_gzip_batch_round_trips_and_is_smaller() -> None:
    from sluice.protocol.record_batches import GZIP

    records = [Record(b"edge-a", b'{"client_id":"service-%04d","produce_bytes":170}' % i) for i in range(200)]
    plain = encode_record_batch(records, NOW)
    packed = encode_record_batch(records, NOW, compression=GZIP)
    assert len(packed) < len(plain) / 5
    decoded = decode_records(with_base_offset(packed, 7), 7)
    assert [(r.key, r.value) for r in decoded.records] == [(r.key, r.value) for r in records]
    assert decoded.next_offset == 207
