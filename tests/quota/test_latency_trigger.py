"""The latency trigger's control loop (quota/latency_trigger.py), one evaluation at a time."""

from __future__ import annotations

import pytest

from sluice.quota.errors import QuotaConfigError
from sluice.quota.latency_trigger import (
    CREEP,
    DECREASE,
    INCREASE,
    LatencyTargets,
    LatencyTrigger,
    TriggerState,
    TriggerStep,
)

TARGETS = LatencyTargets(produce_p99_ms=50, release_p99_ms=40, floor_bytes_per_s=100)
SETTLE = 3000


def test_it_engages_at_the_current_ingress_when_the_p99_passes_the_target() -> None:
    trigger = LatencyTrigger(TARGETS, SETTLE)
    assert trigger.evaluate(50, 1000, 0) is None  # at the target is not past it
    assert trigger.evaluate(None, 1000, 1000) is None
    change = trigger.evaluate(51, 1000, 2000)
    assert change is not None and change.step is TriggerStep.ENGAGED
    assert trigger.state is TriggerState.HOLDING and trigger.threshold == 1000


def test_never_below_the_floor() -> None:
    trigger = LatencyTrigger(TARGETS, SETTLE)
    trigger.evaluate(80, 10, 0)
    assert trigger.threshold == 100
    for now in range(SETTLE, 60_000, 1000):
        trigger.evaluate(80 + now, 100, now)  # ever slower
        assert trigger.threshold is not None and trigger.threshold >= 100


def test_still_too_slow_it_lowers_once_per_settle_time_unless_the_p99_is_falling() -> None:
    trigger = LatencyTrigger(TARGETS, SETTLE)
    trigger.evaluate(100, 10_000, 0)
    assert trigger.evaluate(120, 10_000, 1000) is None  # too soon to judge
    change = trigger.evaluate(120, 10_000, SETTLE)
    assert change is not None and change.step is TriggerStep.LOWERED
    assert trigger.threshold == 10_000 * DECREASE
    assert trigger.evaluate(90, 10_000, 2 * SETTLE) is None  # falling: the last step is working
    change = trigger.evaluate(95, 10_000, 2 * SETTLE + 1000)  # no longer falling
    assert change is not None and trigger.threshold == pytest.approx(10_000 * DECREASE**2)


def test_hysteresis_between_the_release_level_and_the_target_nothing_moves() -> None:
    trigger = LatencyTrigger(TARGETS, SETTLE)
    trigger.evaluate(100, 10_000, 0)
    for now in range(SETTLE, 30_000, 1000):
        assert trigger.evaluate(45, 10_000, now) is None
    assert trigger.threshold == 10_000


def test_under_the_release_level_it_rises_and_opens_once_it_holds_nothing_back() -> None:
    trigger = LatencyTrigger(TARGETS, SETTLE)
    trigger.evaluate(100, 10_000, 0)
    change = trigger.evaluate(10, 10_000, SETTLE)
    assert change is not None and change.step is TriggerStep.RAISED
    assert trigger.threshold == pytest.approx(10_000 * INCREASE)
    change = trigger.evaluate(10, 7000, 2 * SETTLE)  # demand fell below 80 % of the threshold
    assert change is not None and change.step is TriggerStep.RELEASED
    assert trigger.state is TriggerState.OPEN and trigger.threshold is None


def test_it_creeps_past_the_level_where_the_p99_last_went_over() -> None:
    trigger = LatencyTrigger(TARGETS, SETTLE)
    trigger.evaluate(100, 10_000, 0)
    trigger.evaluate(100, 10_000, SETTLE)  # lowered from 10,000: that is where it went over
    now = 2 * SETTLE
    steps = []
    while trigger.threshold is not None and trigger.threshold < 10_000:
        before = trigger.threshold
        trigger.evaluate(10, 1e9, now)
        steps.append(trigger.threshold / before)
        now += SETTLE
    assert steps[0] == pytest.approx(INCREASE)
    assert steps[-1] == pytest.approx(CREEP)


def test_targets_are_checked() -> None:
    with pytest.raises(QuotaConfigError):
        LatencyTargets(50, 50, 100)
    with pytest.raises(QuotaConfigError):
        LatencyTargets(50, 40, 0)
