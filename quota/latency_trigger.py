"""The latency trigger: a broker's threshold set from the Produce latency it protects, not guessed in bytes.

The seed's premise is that past some ingress a broker's I/O degrades and every request's latency rises.
Rather than have the operator guess that ingress, the trigger watches what degrades: the broker's Produce
round-trip p99 (quota/round_trips.py), evaluated once per period (a second). Per broker:

* **open** (no threshold): when the p99 passes the target (`produce_p99_ms`), the broker's current bytes-in
  rate becomes its threshold (never below the floor): it is *holding*, and the topics over their share on
  it are throttled (quota/broker_shield.py).
* **holding**, p99 still above the target and not falling since the last evaluation: the threshold falls
  by ``DECREASE``, at most once per ``settle_ms`` (the p99 window's span, so each step is judged on what
  it did; a falling p99 means the last step is working: a queue takes time to drain); never below the
  floor.
* **holding**, p99 below the release level (`release_p99_ms`, under the target: the hysteresis): the
  threshold rises by ``INCREASE`` per ``settle_ms``, but only by ``CREEP`` once within ``NEAR`` of the
  threshold at which the p99 last passed the target (probe gently where the trouble was; a loop that had
  to go down to the floor forgets that level, since lowering did not help: the latency was not the
  ingress's doing). Once the broker's bytes-in rate is under ``RELEASE_MARGIN`` of the threshold (it
  holds nothing back any more) the broker is open again.
* between the release level and the target, nothing changes.

A multiplicative decrease with a gentler increase (TCP's answer to the same problem) finds the ingress at
which the broker's latency sits at the target and stays near it. The constants were chosen on the
simulated broker of tests/shield_sim.py, and docs/quotas.md gives its reaction time and overshoot.
Sans-IO and clock-free: the caller passes the p99, the rate and ``now_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sluice.quota.errors import QuotaConfigError, require_bound

# Holding and still above the target: the threshold times this, once per settle time.
DECREASE = 0.8
# Below the release level: the threshold times this once per settle time, or CREEP once within NEAR of
# where the p99 last passed the target.
INCREASE = 1.1
CREEP = 1.01
NEAR = 0.95
# Released once the bytes-in rate is under this fraction of the threshold (it holds nothing back).
RELEASE_MARGIN = 0.8


@dataclass(frozen=True, slots=True)
class LatencyTargets:
    """`trigger: latency`: hold a broker when its Produce p99 passes `produce_p99_ms`; raise its threshold
    again below `release_p99_ms`; never hold it below `floor_bytes_per_s`."""

    produce_p99_ms: float
    release_p99_ms: float
    floor_bytes_per_s: float

    def __post_init__(self) -> None:
        require_bound("produce_p99_ms", self.produce_p99_ms)
        require_bound("release_p99_ms", self.release_p99_ms)
        require_bound("floor_bytes_per_s", self.floor_bytes_per_s)
        if self.release_p99_ms >= self.produce_p99_ms:
            raise QuotaConfigError(
                "release_p99_ms", self.release_p99_ms, f"below produce_p99_ms ({self.produce_p99_ms:g})"
            )


class TriggerState(StrEnum):
    OPEN = "open"
    HOLDING = "holding"


class TriggerStep(StrEnum):
    """What an evaluation did."""

    ENGAGED = "engaged"
    LOWERED = "lowered"
    RAISED = "raised"
    RELEASED = "released"


@dataclass(frozen=True, slots=True)
class TriggerChange:
    step: TriggerStep
    threshold: float | None  # the threshold now (None: open)
    p99_ms: float | None
    bytes_in_per_s: float


class LatencyTrigger:
    """One broker's control loop. ``threshold`` is None while open."""

    __slots__ = (
        "_changed_ms",
        "_last_over",
        "_last_step",
        "_previous_p99",
        "_settle_ms",
        "_targets",
        "state",
        "threshold",
    )

    def __init__(self, targets: LatencyTargets, settle_ms: int) -> None:
        self._targets = targets
        self._settle_ms = settle_ms
        self.state = TriggerState.OPEN
        self.threshold: float | None = None
        self._changed_ms = 0
        self._last_step: TriggerStep | None = None
        self._previous_p99: float | None = None  # at the previous evaluation
        # The threshold at which the p99 last passed the target: raised towards it quickly, past it slowly.
        self._last_over: float | None = None

    @property
    def targets(self) -> LatencyTargets:
        return self._targets

    def retarget(self, targets: LatencyTargets) -> None:
        """New targets (a reload): a threshold in force stays, raised to a new floor if below it."""
        self._targets = targets
        if self.threshold is not None:
            self.threshold = max(self.threshold, targets.floor_bytes_per_s)

    def evaluate(self, p99_ms: float | None, bytes_in_per_s: float, now_ms: int) -> TriggerChange | None:
        """One evaluation (call once per period); what changed, or None. `p99_ms` None: no Produce was
        answered in the p99 window (nothing to measure, so nothing is too slow; the broker shield does not
        evaluate a window of one or two, too few to judge either way)."""
        targets = self._targets
        over = p99_ms is not None and p99_ms > targets.produce_p99_ms
        previous, self._previous_p99 = self._previous_p99, p99_ms
        if self.state is TriggerState.OPEN:
            if not over:
                return None
            self.state = TriggerState.HOLDING
            return self._set(TriggerStep.ENGAGED, bytes_in_per_s, p99_ms, bytes_in_per_s, now_ms)
        threshold = self.threshold
        assert threshold is not None
        settled = now_ms - self._changed_ms >= self._settle_ms
        if over:
            assert p99_ms is not None
            falling = previous is not None and p99_ms < previous
            if not settled or falling or threshold <= targets.floor_bytes_per_s:
                # Too soon to judge the last step, or it is working (a queue takes time to drain).
                return None
            if self._last_step is not TriggerStep.LOWERED:
                self._last_over = threshold
            change = self._set(TriggerStep.LOWERED, threshold * DECREASE, p99_ms, bytes_in_per_s, now_ms)
            if self.threshold == targets.floor_bytes_per_s:
                # Down to the floor and still slow: the latency is not this ingress's doing (a slow disk,
                # another tenant), so where it went over says nothing of what the broker can take.
                self._last_over = None
            return change
        if p99_ms is not None and p99_ms >= targets.release_p99_ms:
            return None
        if bytes_in_per_s < threshold * RELEASE_MARGIN:
            self.state = TriggerState.OPEN
            self.threshold = self._last_over = self._last_step = None
            self._changed_ms = now_ms
            return TriggerChange(TriggerStep.RELEASED, None, p99_ms, bytes_in_per_s)
        if not settled:
            return None
        last_over = self._last_over
        near = last_over is not None and threshold * INCREASE >= last_over * NEAR
        step = CREEP if near else INCREASE
        return self._set(TriggerStep.RAISED, threshold * step, p99_ms, bytes_in_per_s, now_ms)

    def _set(
        self, step: TriggerStep, threshold: float, p99_ms: float | None, bytes_in: float, now_ms: int
    ) -> TriggerChange:
        self.threshold = max(threshold, self._targets.floor_bytes_per_s)
        self._changed_ms = now_ms
        self._last_step = step
        return TriggerChange(step, self.threshold, p99_ms, bytes_in)
