"""Offset planning: every offset in exactly one slice, slices no larger than asked."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sluice.pipeline.kafka_offsets import OffsetSpecError, parse_offsets, plan_ranges, resolve_offset

bounds_strategy = st.dictionaries(
    st.integers(0, 20),
    st.tuples(st.integers(0, 10_000), st.integers(0, 3_000)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=8,
)


@given(bounds_strategy, st.integers(1, 500), st.integers(1, 64))
# The largest plan the strategy can draw (8 full partitions in one-record slices: 24,000 ranges) took 452 ms
# on a loaded machine and failed Hypothesis's default 200 ms deadline; kept so every run covers it.
@example({p: (7_000, 10_000) for p in range(0, 16, 2)}, 1, 64)
def test_every_offset_is_in_exactly_one_slice(bounds, max_records, min_partitions) -> None:
    ranges = plan_ranges(bounds, "t", max_records, min_partitions)
    seen: dict[int, list[int]] = {}
    for r in ranges:
        assert 0 < r.size <= max_records
        seen.setdefault(r.partition, []).extend(range(r.start, r.end))
    for partition, (start, end) in bounds.items():
        assert sorted(seen.get(partition, [])) == list(range(start, end))
    total = sum(end - start for start, end in bounds.values())
    if total >= min_partitions and len(bounds) == 1:
        assert len(ranges) >= min_partitions


def test_offsets_options_in_spark_kafka_shapes() -> None:
    assert parse_offsets(None, "earliest", "startingOffsets") == "earliest"
    assert parse_offsets('{"0": 5, "1": -2}', "earliest", "startingOffsets") == {0: 5, 1: -2}
    assert parse_offsets('{"usage": {"0": 5}}', "latest", "endingOffsets") == {0: 5}
    assert resolve_offset({0: -2}, 0, 3, 9, "startingOffsets") == 3
    assert resolve_offset({1: 4}, 0, 3, 9, "endingOffsets") == 9  # absent partition: latest
    assert resolve_offset({0: 100}, 0, 3, 9, "endingOffsets") == 9  # clamped to the log
    with pytest.raises(OffsetSpecError, match="startingOffsets='yesterday'"):
        parse_offsets("yesterday", "earliest", "startingOffsets")
