"""How long the proxy's own client waits between attempts: Kafka's exponential backoff with jitter.

Kafka's clients (KIP-580): retry.backoff.ms = 100, doubling per failed attempt up to retry.backoff.max.ms
= 1000, each wait jittered by ±20 %. Pure arithmetic: the random source is injected, so tests are exact.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    initial_s: float = 0.1
    max_s: float = 1.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def backoff(self, rand: Callable[[], float] = random.random) -> Backoff:
        return Backoff(self, rand)


class Backoff:
    """The waits of one call's retries: `next()` gives the next wait in seconds."""

    __slots__ = ("_attempts", "_policy", "_rand")

    def __init__(self, policy: RetryPolicy, rand: Callable[[], float]) -> None:
        self._policy = policy
        self._rand = rand
        self._attempts = 0

    def next(self) -> float:
        policy = self._policy
        base = min(policy.max_s, policy.initial_s * policy.multiplier**self._attempts)
        self._attempts += 1
        # rand() in [0, 1) maps to a factor in [1 - jitter, 1 + jitter).
        factor = 1 - policy.jitter + 2 * policy.jitter * self._rand()
        return min(policy.max_s * (1 + policy.jitter), base * factor)

    @property
    def attempts(self) -> int:
        return self._attempts
