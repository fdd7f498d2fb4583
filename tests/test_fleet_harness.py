"""How the fleet tests measure an admitted rate: over whole burst periods when a window lets traffic in
bursts (where a slope over a few bursts depends on where they fall), however much a burst spreads."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from fleet_harness import admitted_rate, slope

START_MS = 1_000_000
STAIRCASE_RATE = (900_000 + 11 * 30_000) / 12  # one 900 kB second and eleven of 30 kB, every 12 s


def _series(per_second: Iterable[int]) -> dict[int, int]:
    """Bytes per 1 s interval from START_MS on, keyed by interval end as the usage records are."""
    return {START_MS + (t + 1) * 1000: admitted for t, admitted in enumerate(per_second)}


def _periodic(period_s: int, burst: list[int], quiet: int, phase_s: int, seconds: int = 60) -> dict[int, int]:
    """A burst spread over len(burst) seconds every `period_s` seconds from `phase_s` on, quiet between."""
    into = ((t - phase_s) % period_s for t in range(seconds))
    return _series(burst[i] if i < len(burst) else quiet for i in into)


def _bursts_at(starts: list[int], burst: int, quiet: int, seconds: int = 60) -> dict[int, int]:
    return _series(burst if t in starts else quiet for t in range(seconds))


@pytest.mark.parametrize("phase_s", range(12))
def test_whole_periods_give_the_true_rate_wherever_the_bursts_fall(phase_s: int) -> None:
    series = _periodic(12, [900_000], quiet=30_000, phase_s=phase_s)
    assert admitted_rate(series, START_MS, START_MS + 60_000) == pytest.approx(STAIRCASE_RATE)


# A burst as a real run spread it, rising and fading over seven seconds, at most 4.5x the quietest ones.
SPREAD = [110_000, 170_000, 200_000, 160_000, 110_000, 80_000, 70_000]


@pytest.mark.parametrize("phase_s", range(12))
def test_whole_periods_are_found_when_each_burst_spreads_over_seconds(phase_s: int) -> None:
    """A burst no second of which is three times the median second (a real run: 0.947 Q by its whole
    periods, where the slope said 0.935)."""
    series = _periodic(12, SPREAD, quiet=45_000, phase_s=phase_s)
    true_rate = (sum(SPREAD) + 5 * 45_000) / 12
    assert admitted_rate(series, START_MS, START_MS + 60_000) == pytest.approx(true_rate)


def test_periods_of_different_lengths_are_measured_whole() -> None:
    """Bursts 11, 13, 12 and 14 s apart: the span runs from the first burst's start to the last's."""
    starts = [5, 16, 29, 41, 55]
    series = _bursts_at(starts, 800_000, 20_000)
    between = starts[-1] - starts[0]
    true_rate = ((len(starts) - 1) * 800_000 + (between - len(starts) + 1) * 20_000) / between
    assert admitted_rate(series, START_MS, START_MS + 60_000) == pytest.approx(true_rate)


def test_the_slope_of_a_few_bursts_depends_on_where_they_fall() -> None:
    """Why admitted_rate exists: the slope over the same traffic strays by phase."""
    rates = [
        slope(_periodic(12, [900_000], 30_000, phase), START_MS, START_MS + 60_000) for phase in range(12)
    ]
    assert max(abs(rate / STAIRCASE_RATE - 1) for rate in rates) > 0.015  # 2 % here; 5 % on real traffic


def test_a_span_starting_in_settling_traffic_begins_at_the_first_burst() -> None:
    """A real run's 42 s (KB per second): bursts begin at 12, 24 and 36 s; the lesser dip at 5 s, in
    traffic still settling, is no period's start."""
    kilobytes = [222, 303, 0, 202, 0, 192, 80, 90, 30, 30, 0, 30, 363, 80, 202, 10, 171, 30, 141, 30, 90]
    kilobytes += [30, 30, 20, 323, 101, 121, 111, 80, 141, 40, 90, 101, 40, 20, 20, 232, 192, 101, 101]
    kilobytes += [111, 121]
    series = _series(kb * 1000 for kb in kilobytes)
    whole_periods = sum(kilobytes[12:36]) * 1000 / 24
    assert admitted_rate(series, START_MS, START_MS + 42_000) == pytest.approx(whole_periods)


def test_steady_traffic_is_measured_at_its_mean_rate() -> None:
    series = _series(100_000 + (t % 3) * 1_000 for t in range(60))
    assert admitted_rate(series, START_MS, START_MS + 60_000) == pytest.approx(101_000, rel=0.001)


@pytest.mark.parametrize("bursts_at", [[30], [24, 36]])
def test_without_whole_periods_over_half_the_span_the_slope_is_taken(bursts_at: list[int]) -> None:
    """One burst, or two only 12 s apart in 60 s: no span of whole periods covers half the time."""
    series = _bursts_at(bursts_at, 900_000, 30_000)
    assert admitted_rate(series, START_MS, START_MS + 60_000) == slope(series, START_MS, START_MS + 60_000)


def test_a_short_period_of_traffic_still_settling_is_left_out() -> None:
    """A real run's survivors of a death, from 13 s after it (kB per second): bursts 5 and 7 s apart,
    then every 12 s. The 7 s period admitted 0.7 Q; a span from its start held three bursts in 31 s
    (0.92 Q) where the whole 42 s held 0.994 Q. The span runs over the steady periods."""
    kilobytes = [10, 20, 293, 111, 142, 51, 81, 243, 30, 101, 30, 40, 10, 40, 233, 172, 131, 61, 121, 172]
    kilobytes += [81, 30, 71, 30, 40, 51, 212, 222, 61, 101, 162, 111, 71, 20, 71, 51, 10, 71, 222, 202]
    kilobytes += [101, 91]
    series = _series(kb * 1000 for kb in kilobytes)
    steady_periods = sum(kilobytes[14:38]) * 1000 / 24
    assert admitted_rate(series, START_MS, START_MS + 42_000) == pytest.approx(steady_periods)
