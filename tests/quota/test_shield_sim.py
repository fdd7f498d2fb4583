"""The latency trigger against a simulated broker whose latency rises with its load (tests/shield_sim.py),
run by run: it engages, brings the p99 back to its target, holds the broker near its capacity, never
throttles a topic under its share, and lets go once the demand or the slowness has gone."""

from __future__ import annotations

import pytest
from shield_sim import Producer, simulate_shield

from sluice.quota.latency_trigger import LatencyTargets

C = 10_000_000
TARGETS = LatencyTargets(produce_p99_ms=50, release_p99_ms=40, floor_bytes_per_s=0.2 * C)
STEP_MS, FALL_MS = 30_000, 150_000


def _step(times: float, shielded: bool = True, seed: int = 0):
    hot = Producer("hot", ((0, 0.5 * C), (STEP_MS, times * C), (FALL_MS, 0.4 * C)))
    cold = Producer("cold", ((0, 0.1 * C),))
    return simulate_shield([hot, cold], capacity=C, targets=TARGETS, shielded=shielded, seed=seed)


@pytest.mark.parametrize("times", [1.5, 3.0])
def test_an_overloaded_broker_is_held_near_its_capacity_at_its_latency_target(times: float) -> None:
    run = _step(times, seed=7)
    engaged = run.first_event("broker_latency_engaged", STEP_MS)
    assert engaged is not None and engaged - STEP_MS <= 2000
    back = run.p99_back_under(TARGETS.produce_p99_ms, STEP_MS)
    assert back is not None and back - STEP_MS <= 20_000
    held = run.rate(90_000, FALL_MS)
    assert 0.75 * C <= held <= C
    p99 = run.p99_over(90_000, FALL_MS)
    assert p99 is not None and p99 <= 2 * TARGETS.produce_p99_ms
    assert run.throttled.get("cold", 0) == 0  # under its share: never held
    released = run.first_event("broker_latency_released", FALL_MS)
    assert released is not None and released - FALL_MS <= 10_000


def test_without_the_shield_the_same_demand_drowns_the_broker() -> None:
    run = _step(1.5, shielded=False)
    assert run.rate(90_000, FALL_MS) > 1.2 * C
    p99 = run.p99_over(90_000, FALL_MS)
    assert p99 is not None and p99 > 100 * TARGETS.produce_p99_ms


def test_a_broker_slow_whatever_its_load_is_held_at_the_floor_and_released_when_it_recovers() -> None:
    demand = (Producer("hot", ((0, 0.5 * C),)), Producer("cold", ((0, 0.1 * C),)))
    run = simulate_shield(
        list(demand), capacity=C, targets=TARGETS, injected=((30_000, 100.0), (90_000, 0.0)), seed=3
    )
    assert run.first_event("broker_latency_engaged") is not None
    assert run.rate(60_000, 90_000) == pytest.approx(TARGETS.floor_bytes_per_s, rel=0.05)
    released = run.first_event("broker_latency_released", 90_000)
    assert released is not None and released - 90_000 <= 60_000
    assert run.rate(180_000, 240_000) == pytest.approx(0.6 * C, rel=0.05)  # all of its demand again
