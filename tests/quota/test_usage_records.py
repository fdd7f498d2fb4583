"""The usage-record codec: what the proxy writes reads back exactly; other schemas are refused."""

from __future__ import annotations

import json

import pytest

from sluice.quota.usage_records import (
    SCHEMA,
    VERSION,
    UsageBatch,
    UsageRecordError,
    UsageRow,
    decode_batch,
    encode_batch,
    split_rows,
)

ROWS = (
    UsageRow(
        "ANONYMOUS",
        "pump",
        produce_bytes=100_352,
        requests={"Produce": 7, "Metadata": 1},
        throttle_time_ms={"Produce": 412},
        throttle_count={"Produce": 3},
        cpu_time_ns=91_000,
        quotas={"producer_byte_rate": 100_000},
    ),
    UsageRow("ANONYMOUS", "pump", topic="orders", produce_bytes=99_840),
    UsageRow("alice", None, fetch_bytes=5, partition_mutations=3),
)
BATCH = UsageBatch("sluice-a:9092/4711", 1_795_996_800_000, 1000, ROWS)


def test_a_batch_reads_back_as_written() -> None:
    assert decode_batch(encode_batch(BATCH)) == BATCH


def test_zero_fields_are_left_out_on_the_wire() -> None:
    document = json.loads(encode_batch(BATCH))
    assert document["schema"] == SCHEMA and document["version"] == VERSION
    assert document["rows"][1] == {
        "user": "ANONYMOUS",
        "client_id": "pump",
        "topic": "orders",
        "produce_bytes": 99_840,
    }


def test_a_newer_version_is_refused_by_name() -> None:
    document = json.loads(encode_batch(BATCH))
    document["version"] = VERSION + 1
    with pytest.raises(UsageRecordError, match=f"version {VERSION + 1} was written by a newer Sluice"):
        decode_batch(json.dumps(document).encode())


@pytest.mark.parametrize(
    "data",
    [b"\xff", b"[]", b'{"schema":"other","version":1}', b'{"schema":"sluice.usage","version":0}'],
)
def test_what_is_not_a_usage_record_is_refused(data: bytes) -> None:
    with pytest.raises(UsageRecordError):
        decode_batch(data)


def test_a_negative_counter_is_refused_not_misread() -> None:
    document = json.loads(encode_batch(BATCH))
    document["rows"][0]["produce_bytes"] = -1
    with pytest.raises(UsageRecordError, match="row 0: produce_bytes"):
        decode_batch(json.dumps(document).encode())


def test_a_large_batch_splits_into_messages_under_the_limit_with_every_row_once() -> None:
    rows = tuple(UsageRow("u", f"client-{i}", produce_bytes=i + 1) for i in range(1000))
    batch = UsageBatch("i", 0, 1000, rows)
    messages = list(split_rows(batch, 8_000))
    assert len(messages) > 1 and all(len(m) <= 8_000 for m in messages)
    read = [row for m in messages for row in decode_batch(m).rows]
    assert read == list(rows)


def test_version_2_topic_rows_name_their_broker() -> None:
    row = UsageRow("ANONYMOUS", "pump", topic="orders", produce_bytes=10, broker=3)
    batch = UsageBatch("i", 0, 1000, (row,))
    document = json.loads(encode_batch(batch))
    assert document["version"] == 2 and document["rows"][0]["broker"] == 3
    assert decode_batch(encode_batch(batch)).rows == (row,)


def test_a_version_1_batch_still_reads_with_no_broker() -> None:
    document = {
        "schema": SCHEMA,
        "version": 1,
        "instance": "old",
        "interval_start_ms": 0,
        "interval_ms": 1000,
        "rows": [{"user": "u", "client_id": "c", "topic": "t", "produce_bytes": 5}],
    }
    (row,) = decode_batch(json.dumps(document).encode()).rows
    assert row.topic == "t" and row.broker is None


@pytest.mark.parametrize("broker", [-1, "1", 1.5, True])
def test_a_broker_that_is_no_node_id_is_refused(broker: object) -> None:
    document = json.loads(encode_batch(BATCH))
    document["rows"][1]["broker"] = broker
    with pytest.raises(UsageRecordError, match="row 1: broker"):
        decode_batch(json.dumps(document).encode())
