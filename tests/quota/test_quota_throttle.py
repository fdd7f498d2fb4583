"""Throttle arithmetic: Java rounding and int casts, QuotaUtils (spec §1.7, V5) and bucket throttles (V8)."""

from __future__ import annotations

import math

import pytest

from sluice.quota.throttle import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    UNLIMITED,
    bounded_throttle_time,
    java_round,
    saturating_int32,
    throttle_time,
    to_int32,
    token_bucket_throttle_time,
)
from sluice.quota.window import SampledRate


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (0.5, 1),  # ties go up
        (1.5, 2),
        (2.5, 3),  # Python's round() would give 2
        (-0.5, 0),  # ties towards +infinity, not away from zero
        (-2.5, -2),
        (-2.5000000000000004, -3),
        (0.49999999999999994, 0),  # floor(x + 0.5) in doubles would give 1; Java 7+ gives 0
        (2.4999999999999996, 2),
        (1e300, LONG_MAX),
        (-1e300, LONG_MIN),
        (math.inf, LONG_MAX),
        (-math.inf, LONG_MIN),
        (math.nan, 0),
        (4503599627370497.0, 4503599627370497),  # 2**52 + 1: already whole
    ],
)
def test_java_round_matches_math_round(x: float, expected: int) -> None:
    assert java_round(x) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0),
        (INT_MAX, INT_MAX),
        (INT_MAX + 1, INT_MIN),
        ((1 << 32) + 5, 5),
        (-1, -1),
        (LONG_MAX, -1),
        (3_000_000_000, 3_000_000_000 - (1 << 32)),
    ],
)
def test_to_int32_wraps_like_a_java_cast(value: int, expected: int) -> None:
    assert to_int32(value) == expected


@pytest.mark.parametrize(
    ("x", "expected"),
    [(1.9, 1), (-1.9, -1), (1e12, INT_MAX), (-1e12, INT_MIN), (math.nan, 0), (UNLIMITED * 10, INT_MAX)],
)
def test_saturating_int32_is_a_java_double_to_int_cast(x: float, expected: int) -> None:
    assert saturating_int32(x) == expected


def _fresh_window_ms(num_samples: int) -> int:
    # QuotaUtilsTest uses a fresh Rate with W = 1 s: its window is the (N - 1) s minimum.
    return SampledRate(num_samples, 1000).window_size_ms(0)


# V5: QuotaUtilsTest.
@pytest.mark.parametrize(
    ("observed", "quota", "num_samples", "expected"),
    [(100, 50, 3, 2000), (16.5, 16.5, 10, 0), (16.5, 16.5, 11, 0)],
)
def test_v5_throttle_time(observed: float, quota: float, num_samples: int, expected: int) -> None:
    assert throttle_time(observed, quota, _fresh_window_ms(num_samples)) == expected


def test_v5_throttle_time_is_not_clamped_below_the_quota() -> None:
    assert throttle_time(16.5, 20.4, _fresh_window_ms(10)) < 0


@pytest.mark.parametrize(
    ("observed", "quota", "num_samples", "max_ms", "expected"),
    [(55, 50, 2, 500, 100), (100, 50, 10, 500, 500), (18.2, 18.2, 10, 500, 0)],
)
def test_v5_bounded_throttle_time(
    observed: float, quota: float, num_samples: int, max_ms: int, expected: int
) -> None:
    assert bounded_throttle_time(observed, quota, _fresh_window_ms(num_samples), max_ms) == expected


def test_v5_bound_hides_the_unbounded_throttle() -> None:
    assert throttle_time(100, 50, _fresh_window_ms(10)) == 9000


# V8: ControllerMutationQuotaManagerTest.testThrottleTime, Q = 10.
@pytest.mark.parametrize(("tokens", "expected"), [(0, 0), (-5, 500), (-10, 1000)])
def test_v8_token_bucket_throttle(tokens: float, expected: int) -> None:
    assert token_bucket_throttle_time(tokens, 10) == expected
