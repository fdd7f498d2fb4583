"""The Produce round-trip window (quota/round_trips.py): a fixed histogram over sampled sub-windows."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.quota.round_trips import EDGES, EXACT_MS, MAX_MS, RoundTripWindow, bucket_of


def test_buckets_are_exact_to_a_millisecond_then_at_most_a_sixteenth_wide() -> None:
    assert EDGES[:EXACT_MS] == tuple(range(1, EXACT_MS + 1))
    for lower, upper in zip(EDGES[EXACT_MS - 1 :], EDGES[EXACT_MS:], strict=False):
        assert upper - lower <= max(1, round(lower / 16))
    assert EDGES[-1] >= MAX_MS


@given(st.integers(min_value=-5, max_value=2 * MAX_MS))
def test_a_round_trip_lands_in_the_bucket_whose_edges_hold_it(ms: int) -> None:
    bucket = bucket_of(ms)
    if ms <= 1:
        assert bucket == 0
    elif ms > EDGES[-1]:
        assert bucket == len(EDGES) - 1
    else:
        assert EDGES[bucket - 1] < ms <= EDGES[bucket]


def test_the_p99_of_known_round_trips() -> None:
    window = RoundTripWindow(samples=3, window_ms=1000)
    values = list(range(1, 1001))  # 1..1000 ms
    random.Random(1).shuffle(values)
    for i, ms in enumerate(values):
        window.record(ms, i)  # within the first second
    assert window.count(999) == 1000
    p99 = window.percentile(0.99, 999)
    assert p99 is not None and 990 <= p99 <= 990 * (1 + 1 / 16) + 1
    assert window.percentile(0.5, 999) == pytest.approx(500, rel=1 / 16)


def test_old_sub_windows_leave_the_percentile() -> None:
    window = RoundTripWindow(samples=3, window_ms=1000)
    for t in range(0, 1000, 10):
        window.record(500, t)  # slow in the first second
    for t in range(1000, 3000, 10):
        window.record(5, t)
    assert window.percentile(0.99, 2999) == EDGES[bucket_of(500)]  # still in the window
    assert window.percentile(0.99, 3000) == 5  # its sub-window is older than three seconds now
    assert window.percentile(0.99, 10_000) is None  # nothing recent
    window.record(7, 10_000)
    assert window.count(10_000) == 1 and window.percentile(0.99, 10_000) == 7


def test_at_least_reads_the_percentile_below_the_slowest_few_of_a_small_window() -> None:
    window = RoundTripWindow(samples=3, window_ms=1000)
    for t in range(0, 3000, 200):  # 15 round trips: a broker answering five Produce requests a second
        window.record(500 if t == 1000 else 5, t)
    assert window.percentile(0.99, 2999) == EDGES[bucket_of(500)]  # the p99 of 15 is the slowest
    assert window.percentile(0.99, 2999, at_least=3) == 5  # one slow round trip is not three
    window.record(500, 2000)
    window.record(500, 2100)
    assert window.percentile(0.99, 2999, at_least=3) == EDGES[bucket_of(500)]  # three are
    assert window.percentile(0.99, 2999, at_least=18) is None  # 17 round trips: too few to read
    with pytest.raises(ValueError, match="at_least"):
        window.percentile(0.99, 2999, at_least=0)


@given(
    st.lists(st.integers(min_value=0, max_value=5000), min_size=1, max_size=600),
    st.integers(min_value=1, max_value=6),
)
def test_at_least_leaves_that_many_at_or_above_the_reading_and_is_the_plain_percentile_in_a_large_window(
    round_trips: list[int], at_least: int
) -> None:
    window = RoundTripWindow(samples=1, window_ms=1000)
    for ms in round_trips:
        window.record(ms, 0)
    plain = window.percentile(0.99, 0)
    reading = window.percentile(0.99, 0, at_least)
    if len(round_trips) < at_least:
        assert reading is None
        return
    assert plain is not None and reading is not None and reading <= plain
    assert sum(EDGES[bucket_of(ms)] >= reading for ms in round_trips) >= at_least
    # and no lower than that: the plain percentile, or the bucket of the at_least-th slowest if lower
    slowest = sorted((bucket_of(ms) for ms in round_trips), reverse=True)
    assert reading == min(plain, EDGES[slowest[at_least - 1]])
    if len(round_trips) * (1 - 0.99) >= at_least - 1:
        assert reading == plain
