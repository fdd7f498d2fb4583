"""The sampled-window rate (spec §1.2-§1.4): golden vectors V1-V4 and the bookkeeping rules behind them, on
both twins of SampledRate (the `rate_type` fixture: quota/window.py's and quota/_compiled.c's)."""

from __future__ import annotations

import pytest

from sluice.quota.errors import QuotaConfigError
from sluice.quota.window import WindowRate


# V1: RateTest.testRateWithNoPriorAvailableSamples. Record 50 at t = 0, measure at W_s * 1000 - 1.
@pytest.mark.parametrize(
    ("num_samples", "window_s", "expected_window_ms", "expected_rate"),
    [
        (1, 1, 999, 50.05005005),
        (1, 11, 10_999, 4.545867806),
        (11, 1, 10_999, 4.545867806),
        (11, 11, 120_999, 0.413226556),
    ],
)
@pytest.mark.parametrize("legacy", [False, True])
def test_v1_rate_with_no_prior_samples(
    rate_type: type[WindowRate],
    num_samples: int,
    window_s: int,
    expected_window_ms: int,
    expected_rate: float,
    legacy: bool,
) -> None:
    rate = rate_type(num_samples, window_s * 1000, legacy=legacy)
    rate.record(50, 0)
    now = window_s * 1000 - 1
    assert rate.window_size_ms(now) == expected_window_ms
    assert rate.measure(now) == pytest.approx(expected_rate, abs=5e-10)


def _v2_rate(rate_type: type[WindowRate], legacy: bool) -> tuple[WindowRate, list[int]]:
    rate = rate_type(2, 1000, legacy=legacy)
    for t in [0, *range(99, 1000, 100)]:
        rate.record(1, t)
    return rate, [1100, *range(1199, 2100, 100)]


# V2: RateTest.testRateIsConsistentAfterTheFirstWindow (>= 3.8) and the derived legacy snap-back.
@pytest.mark.parametrize(
    ("legacy", "expected"),
    [
        (False, {1100: (10.9091, 1100), 1599: (10.6316, 1599), 1999: (10.5053, 1999), 2099: (10.4812, 2099)}),
        (True, {1100: (10.9091, 1100), 1599: (10.6316, 1599), 1999: (10.5053, 1999), 2099: (5.5028, 1999)}),
    ],
)
def test_v2_steady_rate_and_legacy_snap_back(
    rate_type: type[WindowRate], legacy: bool, expected: dict[int, tuple[float, int]]
) -> None:
    rate, second_batch = _v2_rate(rate_type, legacy)
    seen = {}
    for t in second_batch:
        rate.record(1, t)
        if not legacy:
            # Kafka's assertion for >= 3.8: 10 <= rate <= 11 after every event of the second batch.
            assert 10 <= rate.measure(t) <= 11
        if t in expected:
            seen[t] = (round(rate.measure(t), 4), rate.window_size_ms(t))
    assert seen == expected


def _complete_sample(rate: WindowRate, t: int) -> int:
    # SampledStatTest.completeSample: events at the start and the end of a window, clock 1 ms after.
    rate.record(1, t)
    rate.record(1, t + 999)
    return t + 1000


# V3: SampledStatTest (N = 2, W = 1 s), counting samples that still hold events.
def test_v3_sample_is_purged_if_it_does_not_overlap_the_window(rate_type: type[WindowRate]) -> None:
    rate = rate_type(2, 1000)
    t = _complete_sample(rate, 0) + 2500
    assert rate.live_samples(t) == 0


def test_v3_sample_is_kept_if_it_overlaps_the_window(rate_type: type[WindowRate]) -> None:
    rate = rate_type(2, 1000)
    t = _complete_sample(rate, 0) + 1500
    assert rate.live_samples(t) == 1


@pytest.mark.parametrize(("legacy", "expected"), [(False, 3), (True, 2)])
def test_v3_the_ring_keeps_n_plus_one_samples_since_3_8(
    rate_type: type[WindowRate], legacy: bool, expected: int
) -> None:
    rate = rate_type(2, 1000, legacy=legacy)
    t = _complete_sample(rate, 0) + 100
    t = _complete_sample(rate, t) + 100
    rate.record(1, t)
    assert t == 2200
    assert rate.live_samples(t) == expected


# V4: MetricsTest.testRateWindowing. N = 3, W = 30 s.
def test_v4_rate_windowing(rate_type: type[WindowRate]) -> None:
    rate = rate_type(3, 30_000)
    count = rate_type(3, 30_000)  # WindowedCount is a WindowedSum of ones
    for t in (0, 30_000):
        rate.record(100, t)
        count.record(1, t)
    assert rate.window_size_ms(75_000) == 75_000
    assert rate.measure(75_000) == pytest.approx(200 / 75, rel=1e-12)
    assert count.measure(75_000) == pytest.approx(2 / 75, rel=1e-12)
    assert rate.measure(165_000) == 0


def test_a_brand_new_rate_divides_by_n_minus_one_windows(rate_type: type[WindowRate]) -> None:
    rate = rate_type(11, 1000)
    rate.record(10_000, 0)
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == 1000


def test_window_is_at_least_one_ms(rate_type: type[WindowRate]) -> None:
    # N = 1 measured exactly at a sample start: 0 ms elapsed, floored to 1 ms (commit f17928e).
    rate = rate_type(1, 1000)
    rate.record(50, 0)
    assert rate.window_size_ms(0) == 1
    assert rate.measure(0) == 50_000


def test_measuring_an_empty_rate_creates_the_sample_a_later_record_lands_in(
    rate_type: type[WindowRate],
) -> None:
    # Kafka's oldest() adds a sample at `now` when there is none; a record 400 ms later joins it.
    rate = rate_type(2, 1000)
    assert rate.window_size_ms(1000) == 1000
    rate.record(10, 1400)
    assert rate.window_size_ms(1400) == 1400  # measured from 1000, not from 1400


def test_samples_reset_by_a_purge_keep_the_purge_time_as_their_start(rate_type: type[WindowRate]) -> None:
    rate = rate_type(2, 1000)
    rate.record(10, 0)
    assert rate.measure(5000) == 0  # purged: the sample restarts at 5000
    rate.record(10, 5500)  # lands in that sample (500 ms < W)
    assert rate.window_size_ms(5500) == 1500
    fresh = rate_type(2, 1000)
    fresh.record(10, 5500)
    assert fresh.window_size_ms(5500) == 1000


def test_idle_gaps_create_no_samples(rate_type: type[WindowRate]) -> None:
    rate = rate_type(11, 1000)
    rate.record(1, 0)
    rate.record(1, 5000)
    assert rate.live_samples(5000) == 2


def test_a_clock_going_backwards_uses_java_truncating_division(rate_type: type[WindowRate]) -> None:
    rate = rate_type(11, 1000)
    rate.record(9500, 10_000)
    # elapsed -500 ms: Java's -500 / 1000 == 0, so 10 whole windows are added, not 11.
    assert rate.window_size_ms(9500) == 9500
    assert rate.measure(9500) == 1000


def test_a_record_at_an_earlier_time_moves_the_expiry_earlier(rate_type: type[WindowRate]) -> None:
    # The sample's last event goes back from 10,000 to 9,900, so it expires at 9,900 + N x W.
    rate = rate_type(11, 1000)
    rate.record(5, 10_000)
    rate.record(5, 9_900)
    assert rate.total(9_900 + 10_999) == 10
    assert rate.total(9_900 + 11_000) == 0


def test_negative_values_take_back_what_was_recorded(rate_type: type[WindowRate]) -> None:
    rate = rate_type(11, 1000)
    rate.record(15_000, 100)
    rate.record(-15_000, 100)
    assert rate.total(100) == 0


def test_clear_forgets_everything(rate_type: type[WindowRate]) -> None:
    rate = rate_type(11, 1000)
    rate.record(15_000, 100)
    rate.clear()
    assert rate.total(200) == 0
    assert rate.window_size_ms(200) == 10_000


@pytest.mark.parametrize(("num_samples", "window_ms"), [(0, 1000), (11, 0), (True, 1000), (2.5, 1000)])
def test_invalid_configuration_is_one_typed_error(
    rate_type: type[WindowRate], num_samples: object, window_ms: object
) -> None:
    with pytest.raises(QuotaConfigError):
        rate_type(num_samples, window_ms)  # type: ignore[arg-type]
