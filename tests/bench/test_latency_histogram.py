"""The latency histogram's percentiles stay within its relative error on known distributions."""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from latency_histogram import LogLinearHistogram


def _exact(values: list[int], percent: float) -> int:
    """Nearest-rank percentile of the raw values."""
    ordered = sorted(values)
    rank = max(1, math.ceil(round(percent * len(ordered) / 100, 9)))
    return ordered[rank - 1]


def _within(estimate: int, exact: int, error: float) -> bool:
    return exact <= estimate <= exact * (1 + error) + 1e-9


def test_small_values_are_exact() -> None:
    h = LogLinearHistogram()
    h.record_all(range(1, 1001))
    assert h.percentile(50) == 500
    assert h.percentile(99) == 990
    assert h.percentile(99.9) == 999
    assert h.percentile(100) == 1000
    assert (h.min, h.max, h.count) == (1, 1000, 1000)
    assert h.mean == pytest.approx(500.5)


def test_uniform_microseconds_to_seconds_within_a_thousandth() -> None:
    rng = random.Random(7)
    values = [rng.randrange(1_000, 1_000_000_000) for _ in range(50_000)]
    h = LogLinearHistogram()
    h.record_all(values)
    assert h.relative_error < 0.001
    for percent in (1, 25, 50, 90, 99, 99.9, 99.99, 100):
        assert _within(h.percentile(percent), _exact(values, percent), h.relative_error), percent


def test_exponential_latencies_with_a_long_tail() -> None:
    rng = random.Random(11)
    # A 200 µs mean service time with 1 % of requests 100x slower: the tail is what p99.9 must see.
    values = [int(rng.expovariate(1 / 200_000)) for _ in range(99_000)]
    values += [int(rng.expovariate(1 / 20_000_000)) for _ in range(1_000)]
    h = LogLinearHistogram()
    h.record_all(values)
    for percent in (50, 99, 99.9):
        assert _within(h.percentile(percent), _exact(values, percent), h.relative_error), percent
    assert h.percentile(99.9) > 10 * h.percentile(50)


def test_bucket_bounds_hold_at_every_power_of_two() -> None:
    h = LogLinearHistogram(sub_bits=4)  # 8 buckets per power of two: 12.5 % wide, easy to check by hand
    for exponent in range(3, 40):
        for value in ((1 << exponent) - 1, 1 << exponent, (1 << exponent) + 1):
            index = h._index(value)
            top = h._highest_equivalent(index)
            assert value <= top <= value * (1 + h.relative_error), value
            assert h._index(top) == index
            assert h._index(top + 1) == index + 1


def test_merge_equals_recording_everything_in_one() -> None:
    rng = random.Random(3)
    a_values = [rng.randrange(10**9) for _ in range(5000)]
    b_values = [rng.randrange(10**4) for _ in range(5000)]
    a, b, both = LogLinearHistogram(), LogLinearHistogram(), LogLinearHistogram()
    a.record_all(a_values)
    b.record_all(b_values)
    both.record_all(a_values + b_values)
    a.merge(b)
    for percent in (0, 10, 50, 90, 99.9, 100):
        assert a.percentile(percent) == both.percentile(percent)
    assert (a.count, a.min, a.max, a.total) == (both.count, both.min, both.max, both.total)


def test_empty_and_invalid() -> None:
    h = LogLinearHistogram()
    assert h.percentile(99) == 0
    with pytest.raises(ValueError):
        h.record(-1)
    with pytest.raises(ValueError):
        h.percentile(101)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=10**12), min_size=1, max_size=300),
    st.floats(min_value=0, max_value=100),
)
def test_any_percentile_within_the_relative_error(values: list[int], percent: float) -> None:
    h = LogLinearHistogram()
    h.record_all(values)
    assert _within(h.percentile(percent), _exact(values, percent), h.relative_error)
