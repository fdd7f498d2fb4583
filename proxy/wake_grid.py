"""The background's wake-ups on one grid of the wall clock.

What wakes an idle proxy is its own background work: the quota store follower's long polls (about two a
second), the usage publisher's interval, the periodic services' ticks. Each wake-up of an idle process
costs more than most of that work: ~0.2-0.5 ms of CPU on this project's virtual machines, the wake-up
itself and the caches the idle core lost meanwhile (docs/benchmarks.md, section 2b). So each of them times
its wake-ups to the multiples of its period on the wall clock (as the usage publisher's intervals always
were, so that a fleet's instances coincide): whatever falls due at the same instant runs in one wake-up,
and what comes a millisecond after it finds the caches warm. The periods are multiples of one another (half
a second, a second, two), so their instants meet.
"""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def next_boundary(now_ms: int, period_ms: int) -> int:
    """The first multiple of `period_ms` on the wall clock after `now_ms`."""
    return (now_ms // period_ms + 1) * period_ms


def ms_to_boundary(now_ms: int, period_ms: int, at_least_ms: int = 1) -> int:
    """How long from `now_ms` to the first multiple of `period_ms` at least `at_least_ms` away: a wait that
    ends on the grid, never shorter than `at_least_ms` (a timer that fired a little early by the wall clock,
    or a poll answered just before an instant, does not come again at once)."""
    return next_boundary(now_ms + at_least_ms - 1, period_ms) - now_ms
