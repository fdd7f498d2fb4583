"""Kafka's TokenBucket (spec §1.6): golden vectors V6 and V7 and the quota-change rules."""

from __future__ import annotations

import pytest

from sluice.quota.errors import QuotaConfigError
from sluice.quota.throttle import LONG_MAX
from sluice.quota.token_bucket import TokenBucket


def _v6_bucket() -> TokenBucket:
    # Q = 5, N = 10, W = 2 s: B = 100 (TokenBucketTest's comment "Burst = 20" is wrong; it asserts 100).
    return TokenBucket(5, num_samples=10, window_ms=2000)


def test_v6_record() -> None:
    bucket = _v6_bucket()
    assert bucket.burst == 100
    assert bucket.measure(0) == 100  # starts full
    bucket.record(60, 0)
    assert bucket.measure(0) == 40
    bucket.record(5, 2000)
    assert bucket.measure(2000) == 45  # 40 + 10 - 5
    bucket.record(60, 4000)
    assert bucket.measure(4000) == -5  # 45 + 10 - 60


def test_v7_unrecord() -> None:
    bucket = _v6_bucket()
    bucket.record(-60, 0)
    assert bucket.measure(0) == 100  # capped at B
    bucket.record(60, 2000)
    assert bucket.measure(2000) == 40
    bucket.record(-60, 4000)
    assert bucket.measure(4000) == 100  # 50 + 60, capped


def test_starts_full_whatever_the_clock_origin() -> None:
    for origin in (0, 17, 1_700_000_000_000):
        bucket = TokenBucket(10, 11, 1000)
        assert bucket.measure(origin) == 110


def test_refill_is_rate_times_elapsed_seconds() -> None:
    bucket = TokenBucket(10, 11, 1000)
    bucket.record(110, 0)
    assert bucket.measure(250) == 2.5


def test_a_quota_change_keeps_the_tokens_and_applies_the_new_burst_at_the_next_refill() -> None:
    bucket = TokenBucket(10, 11, 1000)
    bucket.record(50, 0)  # 60 left
    bucket.rate = 2  # B = 22
    assert bucket.burst == 22
    assert bucket.measure(0) == 22  # min(22, 60)
    bucket.record(30, 0)
    bucket.rate = 100  # B = 1100
    assert bucket.measure(1000) == 92  # -8 + 100 x 1 s


def test_clock_going_backwards_removes_tokens_as_in_kafka() -> None:
    bucket = TokenBucket(10, 11, 1000)
    bucket.measure(10_000)
    assert bucket.measure(9_000) == 100


def test_without_a_quota_it_measures_long_max_and_records_nothing() -> None:
    bucket = TokenBucket(None)
    bucket.record(1e9, 0)
    assert bucket.measure(0) == float(LONG_MAX)
    bucket.rate = 1
    assert bucket.measure(0) == 11  # the ignored record left no debt


def test_clear_makes_it_full_again() -> None:
    bucket = TokenBucket(10, 11, 1000)
    bucket.record(1000, 0)
    bucket.clear()
    assert bucket.measure(5) == 110


@pytest.mark.parametrize("rate", [0, -1, float("nan"), "10", True])
def test_invalid_rate_is_one_typed_error(rate: object) -> None:
    with pytest.raises(QuotaConfigError):
        TokenBucket(rate)  # type: ignore[arg-type]
