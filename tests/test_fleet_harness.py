"""How the fleet tests measure an admitted rate: over whole burst periods when a window lets traffic in
bursts (where a slope over a few bursts depends on where they fall), however much a burst spreads."""

from __future__ import annotations

import pytest
from fleet_harness import admitted_rate, slope

START_MS = 1_000_000


def _staircase(period_s: int, burst: int, quiet: int, seconds: int, phase_s: int) -> dict[int, int]:
    """Bytes per 1 s interval (keyed by interval end): a burst every `period_s` seconds, quiet between."""
    return {
        START_MS + (t + 1) * 1000: burst if (t - phase_s) % period_s == 0 else quiet for t in range(seconds)
    }


@pytest.mark.parametrize("phase_s", range(12))
def test_whole_periods_give_the_true_rate_wherever_the_bursts_fall(phase_s: int) -> None:
    series = _staircase(12, burst=900_000, quiet=30_000, seconds=60, phase_s=phase_s)
    true_rate = (900_000 + 11 * 30_000) / 12
    assert admitted_rate(series, START_MS, START_MS + 60_000) == pytest.approx(true_rate)


def _ramps(period_s: int, ramp: list[int], quiet: int, seconds: int, phase_s: int) -> dict[int, int]:
    """Like _staircase, but each burst spreads over len(ramp) seconds, as on a loaded machine."""
    return {
        START_MS + (t + 1) * 1000: ramp[(t - phase_s) % period_s]
        if (t - phase_s) % period_s < len(ramp)
        else quiet
        for t in range(seconds)
    }


# A burst as a real run spread it, rising and fading over seven seconds, at most 4.5x the quietest ones.
SPREAD = [110_000, 170_000, 200_000, 160_000, 110_000, 80_000, 70_000]


@pytest.mark.parametrize("phase_s", range(12))
def test_whole_periods_are_found_when_each_burst_spreads_over_seconds(phase_s: int) -> None:
    """A burst no second of which is three times the median second (a real run: 0.947 Q by its whole
    periods, where the slope said 0.935)."""
    series = _ramps(12, SPREAD, quiet=45_000, seconds=60, phase_s=phase_s)
    true_rate = (sum(SPREAD) + 5 * 45_000) / 12
    assert admitted_rate(series, START_MS, START_MS + 60_000) == pytest.approx(true_rate)


def test_periods_of_different_lengths_are_measured_whole() -> None:
    """Bursts 11, 13, 12 and 14 s apart: the span runs from the first burst's start to the last's."""
    starts = [3, 14, 27, 39, 53]
    series = {START_MS + (t + 1) * 1000: 800_000 if t in starts else 20_000 for t in range(60)}
    between = range(starts[0], starts[-1])
    true_rate = sum(series[START_MS + (t + 1) * 1000] for t in between) / len(between)
    assert admitted_rate(series, START_MS, START_MS + 60_000) == pytest.approx(true_rate)


def test_the_slope_of_a_few_bursts_depends_on_where_they_fall() -> None:
    """Why admitted_rate exists: the slope over the same traffic strays by phase."""
    rates = [
        slope(_staircase(12, 900_000, 30_000, 60, phase), START_MS, START_MS + 60_000) for phase in range(12)
    ]
    true_rate = (900_000 + 11 * 30_000) / 12
    assert max(abs(rate / true_rate - 1) for rate in rates) > 0.015  # 2 % here; 5 % on real traffic


def test_steady_traffic_is_measured_over_most_of_the_span() -> None:
    series = {START_MS + (t + 1) * 1000: 100_000 + (t % 3) * 1_000 for t in range(60)}
    assert admitted_rate(series, START_MS, START_MS + 60_000) == pytest.approx(101_000, rel=0.001)


def test_traffic_without_two_dips_half_a_span_apart_is_measured_by_its_slope() -> None:
    """One burst only, in the middle: no span of whole periods covers half the time."""
    series = {START_MS + (t + 1) * 1000: 900_000 if t == 30 else 30_000 for t in range(60)}
    assert admitted_rate(series, START_MS, START_MS + 60_000) == slope(series, START_MS, START_MS + 60_000)
