"""How the fleet tests measure an admitted rate: over whole burst periods when a window lets traffic in
bursts (where a slope over a few bursts depends on where they fall), else the slope."""

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


def test_the_slope_of_a_few_bursts_depends_on_where_they_fall() -> None:
    """Why admitted_rate exists: the slope over the same traffic strays by phase."""
    rates = [
        slope(_staircase(12, 900_000, 30_000, 60, phase), START_MS, START_MS + 60_000) for phase in range(12)
    ]
    true_rate = (900_000 + 11 * 30_000) / 12
    assert max(abs(rate / true_rate - 1) for rate in rates) > 0.015  # 2 % here; 5 % on real traffic


def test_steady_traffic_is_measured_by_its_slope() -> None:
    series = {START_MS + (t + 1) * 1000: 100_000 + (t % 3) * 1_000 for t in range(60)}
    rate = admitted_rate(series, START_MS, START_MS + 60_000)
    assert rate == slope(series, START_MS, START_MS + 60_000)
    assert rate == pytest.approx(101_000, rel=0.01)
