"""The usage records as one Spark table: a row per UsageRow, carrying its batch's fields.

Every input (the usage topic, JSON lines of the topic's messages, Parquet written by `sluice usage export`
or `sluice pipeline synth`) ends up in this one layout, and every job reads only this layout. Messages are
decoded by `sluice.quota.usage_records.decode_batch`, the codec the proxy writes with, never by a second
parser here.

`schema_version` is the usage-record version the row's layout follows (`usage_records.VERSION` when it
was flattened). A Parquet table whose rows carry a newer version is refused by `check_schema_version`;
one written before a column existed (`broker`, version 2) reads with that column null.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping

from sluice.quota.usage_records import VERSION, UsageBatch, UsageRecordError, decode_batch

# Column name -> Spark SQL type. The order is the tuple order of `batch_rows`.
USAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("schema_version", "int"),
    ("instance", "string"),
    ("interval_start", "timestamp"),
    ("interval_start_ms", "bigint"),
    ("interval_ms", "bigint"),
    ("user", "string"),
    ("client_id", "string"),
    ("topic", "string"),
    # A topic row's broker node id (version 2); null for entity rows, version-1 rows and unknown brokers.
    ("broker", "int"),
    ("produce_bytes", "bigint"),
    ("fetch_bytes", "bigint"),
    ("requests", "map<string,bigint>"),
    ("throttle_time_ms", "map<string,bigint>"),
    ("throttle_count", "map<string,bigint>"),
    ("partition_mutations", "bigint"),
    ("cpu_time_ns", "bigint"),
    ("quotas", "map<string,double>"),
    # Where a record read from Kafka came from; null for files and generated data.
    ("kafka_partition", "int"),
    ("kafka_offset", "bigint"),
)
USAGE_DDL = ", ".join(f"`{name}` {kind}" for name, kind in USAGE_COLUMNS)
COLUMN_NAMES = tuple(name for name, _ in USAGE_COLUMNS)
# Columns added by a later version: a table written before them reads with them null.
LATER_COLUMNS = frozenset({"broker"})

_UTC = datetime.UTC


class UsageTableError(ValueError):
    """Input that is not a usage table this version can read; the message names the input and why."""


def interval_start(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=_UTC)


def _counts(values: Mapping[str, float], name: str) -> dict[str, int]:
    """A count or millisecond map as integers; a fraction would be a different unit, so it is refused."""
    out: dict[str, int] = {}
    for key, value in values.items():
        if value != int(value):
            raise UsageRecordError(f"{name}[{key!r}] must be a whole number, got {value!r}")
        out[key] = int(value)
    return out


def batch_rows(
    batch: UsageBatch, kafka_partition: int | None = None, kafka_offset: int | None = None
) -> Iterator[tuple[object, ...]]:
    """One tuple per row of `batch`, in USAGE_COLUMNS order."""
    start = interval_start(batch.interval_start_ms)
    for row in batch.rows:
        yield (
            VERSION,
            batch.instance,
            start,
            batch.interval_start_ms,
            batch.interval_ms,
            row.user,
            row.client_id,
            row.topic,
            row.broker,
            row.produce_bytes,
            row.fetch_bytes,
            _counts(row.requests, "requests"),
            _counts(row.throttle_time_ms, "throttle_time_ms"),
            _counts(row.throttle_count, "throttle_count"),
            row.partition_mutations,
            row.cpu_time_ns,
            {key: float(value) for key, value in row.quotas.items()},
            kafka_partition,
            kafka_offset,
        )


def message_rows(value: bytes | None, where: str, **kafka: int | None) -> Iterator[tuple[object, ...]]:
    """Decode one message of the usage topic (or one JSON line) into rows; refuse it naming `where`."""
    if value is None:
        raise UsageRecordError(f"{where}: empty message (a tombstone), not a usage record")
    try:
        batch = decode_batch(value)
        rows = list(batch_rows(batch, **kafka))
    except UsageRecordError as exc:
        raise UsageRecordError(f"{where}: {exc}") from None
    return iter(rows)


def check_columns(names: list[str] | tuple[str, ...], source: str) -> None:
    """Refuse a table that lacks a column of the usage layout (a table of something else)."""
    missing = [name for name in COLUMN_NAMES if name not in names and name not in LATER_COLUMNS]
    if missing:
        raise UsageTableError(
            f"{source} is not a Sluice usage table: missing column(s) {', '.join(missing)}. "
            "Write one with `sluice usage export` or `sluice pipeline synth`."
        )


def check_schema_version(newest: int | None, source: str) -> None:
    """Refuse rows of a layout newer than this reader, with the codec's wording."""
    if newest is not None and newest > VERSION:
        raise UsageTableError(
            f"{source}: usage record version {newest} was written by a newer Sluice; "
            f"this reader knows up to {VERSION}"
        )
    if newest is not None and newest < 1:
        raise UsageTableError(f"{source}: schema_version must be a positive integer, got {newest}")
