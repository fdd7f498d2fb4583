"""Which records of the usage topic a read covers, cut into offset ranges Spark reads in parallel.

The driver asks the cluster for each partition's offsets once (`list_offset_bounds`), then
`plan_ranges` cuts every partition's [start, end) into slices of at most `max_records` records, and more
when fewer than `min_partitions` slices would result (the same two knobs, and names, as Spark's JVM Kafka
source: `maxRecordsPerPartition`, `minPartitions`). Every offset belongs to exactly one slice, so reading
each slice once reads every record once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass


class OffsetSpecError(ValueError):
    """An offsets option that cannot be understood; the message quotes the option."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets [start, end) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def parse_offsets(spec: str | None, default: str, option: str) -> str | dict[int, int]:
    """`earliest`, `latest`, or JSON `{"0": 42, "1": -2}` (Spark's shape: -2 earliest, -1 latest).

    Spark's JVM source nests the map under the topic name (`{"topic": {"0": 42}}`); both are accepted.
    """
    text = (spec or default).strip()
    if text in ("earliest", "latest"):
        return text
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        expected = 'expected earliest, latest or JSON such as {"0": 42}'
        raise OffsetSpecError(f"{option}={text!r}: {expected}") from None
    if isinstance(value, dict) and len(value) == 1 and isinstance(next(iter(value.values())), dict):
        value = next(iter(value.values()))
    if not isinstance(value, dict):
        raise OffsetSpecError(f"{option}={text!r}: expected a JSON object of partition -> offset")
    try:
        return {int(partition): int(offset) for partition, offset in value.items()}
    except (TypeError, ValueError):
        raise OffsetSpecError(f"{option}={text!r}: partitions and offsets must be integers") from None


def resolve_offset(spec: str | dict[int, int], partition: int, low: int, high: int, option: str) -> int:
    """The concrete offset `spec` means for `partition` whose log holds [low, high)."""
    if spec == "earliest":
        return low
    if spec == "latest":
        return high
    assert isinstance(spec, dict)
    offset = spec.get(partition, -2 if option.startswith("starting") else -1)
    if offset == -2:
        return low
    if offset == -1:
        return high
    if offset < 0:
        raise OffsetSpecError(f"{option}: offset {offset} for partition {partition} is negative")
    return min(max(offset, low), high)


def plan_ranges(
    bounds: Mapping[int, tuple[int, int]], topic: str, max_records: int, min_partitions: int = 1
) -> list[OffsetRange]:
    """Cut each partition's [start, end) into slices; empty partitions give no slice.

    A partition gets ceil(size / max_records) slices, or its share of `min_partitions` (by size) if
    that is more. Slices of one partition differ in size by at most one record.
    """
    if max_records < 1:
        raise OffsetSpecError(f"maxRecordsPerPartition must be at least 1, got {max_records}")
    sizes = {p: max(0, end - start) for p, (start, end) in bounds.items()}
    total = sum(sizes.values())
    ranges: list[OffsetRange] = []
    for partition in sorted(bounds):
        start = bounds[partition][0]
        size = sizes[partition]
        if size == 0:
            continue
        pieces = math.ceil(size / max_records)
        if total and min_partitions > 1:
            pieces = max(pieces, round(size / total * min_partitions))
        pieces = max(1, min(pieces, size))
        base, extra = divmod(size, pieces)
        cursor = start
        for index in range(pieces):
            length = base + (1 if index < extra else 0)
            ranges.append(OffsetRange(topic, partition, cursor, cursor + length))
            cursor += length
    return ranges
