"""Usage records: what one Sluice process admitted per quota entity (and per topic) in one interval.

The proxy publishes them to the usage topic once per interval; other instances charge them to their own
sensors (one quota for a fleet), and the capacity-planning pipeline reads them. This module is the one
codec both sides use, so the schema (``docs/usage-records.md``) has a single implementation.

A batch is one JSON document (UTF-8, compact), one Kafka message per instance per interval (more when a
batch would pass the message size limit: ``split_rows``). Fields that are zero or empty are left out on
the wire and read back as zero, so an idle counter costs nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

SCHEMA = "sluice.usage"
# 2: topic rows name the broker their bytes went to (`broker`); a version-1 reader refuses them by name.
VERSION = 2
# Kafka's quota types, as its throttle-time metrics name them.
QUOTA_TYPES = ("Produce", "Fetch", "Request", "ControllerMutation")

_INT_FIELDS = ("produce_bytes", "fetch_bytes", "partition_mutations", "cpu_time_ns")
_MAP_FIELDS = ("requests", "throttle_time_ms", "throttle_count", "quotas")


class UsageRecordError(ValueError):
    """A usage batch that cannot be read as this schema: never guessed at, always refused with why."""


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One entity's usage in one interval (``topic`` None), or that entity's traffic to one topic (through one
    broker: ``broker`` is its node id, None where the proxy could not tell or the record is version 1)."""

    user: str
    client_id: str | None
    topic: str | None = None
    produce_bytes: int = 0
    fetch_bytes: int = 0
    # API name (Kafka's, e.g. "Produce") -> requests forwarded or answered; entity rows only.
    requests: Mapping[str, int] = field(default_factory=dict)
    # Quota type (QUOTA_TYPES) -> throttle milliseconds given, and how many responses carried one.
    throttle_time_ms: Mapping[str, int] = field(default_factory=dict)
    throttle_count: Mapping[str, int] = field(default_factory=dict)
    partition_mutations: int = 0
    # The proxy's own CPU time charged to request_percentage, nanoseconds.
    cpu_time_ns: int = 0
    # Quota key (e.g. "producer_byte_rate") -> the bound in force at the interval's end; entity rows only.
    quotas: Mapping[str, float] = field(default_factory=dict)
    # Topic rows only (version 2): the broker node the bytes went to (produce) or came from (fetch).
    broker: int | None = None


@dataclass(frozen=True, slots=True)
class UsageBatch:
    instance: str
    # Wall-clock start of the interval, milliseconds since the Unix epoch, and its length.
    interval_start_ms: int
    interval_ms: int
    rows: tuple[UsageRow, ...]


def _row_to_json(row: UsageRow) -> dict[str, object]:
    out: dict[str, object] = {"user": row.user, "client_id": row.client_id}
    if row.topic is not None:
        out["topic"] = row.topic
    if row.broker is not None:
        out["broker"] = row.broker
    for name in _INT_FIELDS:
        value = getattr(row, name)
        if value:
            out[name] = value
    for name in _MAP_FIELDS:
        value = getattr(row, name)
        if value:
            out[name] = dict(value)
    return out


def encode_batch(batch: UsageBatch) -> bytes:
    document = {
        "schema": SCHEMA,
        "version": VERSION,
        "instance": batch.instance,
        "interval_start_ms": batch.interval_start_ms,
        "interval_ms": batch.interval_ms,
        "rows": [_row_to_json(row) for row in batch.rows],
    }
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def split_rows(batch: UsageBatch, max_bytes: int) -> Iterator[bytes]:
    """The batch as one or more encoded messages, each at most `max_bytes` unless a single row is larger."""
    encoded = encode_batch(batch)
    if len(encoded) <= max_bytes or len(batch.rows) <= 1:
        yield encoded
        return
    half = len(batch.rows) // 2
    for rows in (batch.rows[:half], batch.rows[half:]):
        yield from split_rows(
            UsageBatch(batch.instance, batch.interval_start_ms, batch.interval_ms, rows), max_bytes
        )


def _int(document: Mapping[str, object], name: str, where: str) -> int:
    value = document.get(name, 0)
    if type(value) is not int or value < 0:
        raise UsageRecordError(f"{where}: {name} must be a non-negative integer, got {value!r}")
    return value


def _mapping(document: Mapping[str, object], name: str, where: str) -> Mapping[str, int]:
    value = document.get(name, {})
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and type(v) in (int, float) and v >= 0 for k, v in value.items()
    ):
        raise UsageRecordError(f"{where}: {name} must map names to non-negative numbers, got {value!r}")
    return value


def _optional_str(document: Mapping[str, object], name: str, where: str) -> str | None:
    value = document.get(name)
    if value is not None and not isinstance(value, str):
        raise UsageRecordError(f"{where}: {name} must be a string or null, got {value!r}")
    return value


def _broker(document: Mapping[str, object], where: str) -> int | None:
    value = document.get("broker")
    if value is not None and (type(value) is not int or value < 0):
        raise UsageRecordError(f"{where}: broker must be a node id (a non-negative integer), got {value!r}")
    return value


def _row_from_json(document: object, where: str) -> UsageRow:
    if not isinstance(document, dict):
        raise UsageRecordError(f"{where}: a row must be an object")
    user = document.get("user")
    if not isinstance(user, str):
        raise UsageRecordError(f"{where}: user must be a string, got {user!r}")
    return UsageRow(
        user=user,
        client_id=_optional_str(document, "client_id", where),
        topic=_optional_str(document, "topic", where),
        produce_bytes=_int(document, "produce_bytes", where),
        fetch_bytes=_int(document, "fetch_bytes", where),
        requests=_mapping(document, "requests", where),
        throttle_time_ms=_mapping(document, "throttle_time_ms", where),
        throttle_count=_mapping(document, "throttle_count", where),
        partition_mutations=_int(document, "partition_mutations", where),
        cpu_time_ns=_int(document, "cpu_time_ns", where),
        quotas=_mapping(document, "quotas", where),
        broker=_broker(document, where),
    )


def decode_batch(data: bytes) -> UsageBatch:
    """Read one message of the usage topic. A newer or unknown schema is refused, never misread."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageRecordError(f"not a usage record: {exc}") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise UsageRecordError(f"not a usage record: schema is not {SCHEMA!r}")
    version = document.get("version")
    if type(version) is not int or version < 1:
        raise UsageRecordError(f"usage record version must be a positive integer, got {version!r}")
    if version > VERSION:
        raise UsageRecordError(
            f"usage record version {version} was written by a newer Sluice; this reader knows up to {VERSION}"
        )
    instance = document.get("instance")
    if not isinstance(instance, str) or not instance:
        raise UsageRecordError(f"instance must be a non-empty string, got {instance!r}")
    rows = document.get("rows")
    if not isinstance(rows, list):
        raise UsageRecordError("rows must be a list")
    return UsageBatch(
        instance=instance,
        interval_start_ms=_int(document, "interval_start_ms", "batch"),
        interval_ms=_int(document, "interval_ms", "batch"),
        rows=tuple(_row_from_json(row, f"row {i}") for i, row in enumerate(rows)),
    )
