"""Kafka's ``TokenBucket`` stat (KIP-599), spec §1.6.

Tokens refill at the quota rate Q per second up to a burst B = N x (W / 1000) x Q; a record spends tokens
and may drive the bucket below zero; a negative record gives tokens back, still capped at B. The bucket is
in violation while it holds fewer than zero tokens, and the throttle is the time to refill to zero.
"""

from __future__ import annotations

from sluice.quota.errors import require_bound, require_positive_int
from sluice.quota.throttle import LONG_MAX


def _check_rate(rate: float | None) -> float | None:
    return None if rate is None else require_bound("rate", rate)


class TokenBucket:
    """A token bucket refilled at ``rate`` tokens per second, holding at most ``burst`` tokens.

    Kafka's bucket starts with 0 tokens and a last update at the epoch, so its first refill on any real
    clock fills it to B. Sluice's clock may start near zero, so the bucket remembers that it was never
    refilled and fills itself at its first use instead: a new bucket starts full either way.

    ``rate`` is the quota bound; set it to change the quota live: the tokens carry over and the new burst
    applies from the next refill, as when Kafka swaps a metric's config. ``rate=None`` means no quota:
    ``measure`` returns Long.MAX_VALUE and ``record`` does nothing, as Kafka's bucket without a quota.
    """

    __slots__ = ("_burst", "_last_update_ms", "_num_samples", "_rate", "_tokens", "_window_s")

    def __init__(self, rate: float | None, num_samples: int = 11, window_ms: int = 1000) -> None:
        self._num_samples = require_positive_int("num_samples", num_samples)
        # convert(timeWindowMs, SECONDS) in Kafka: a double.
        self._window_s = require_positive_int("window_ms", window_ms) / 1000.0
        self._rate = _check_rate(rate)
        self._burst = self._burst_for(self._rate)
        self._tokens = 0.0
        self._last_update_ms: int | None = None

    @property
    def rate(self) -> float | None:
        return self._rate

    @rate.setter
    def rate(self, rate: float | None) -> None:
        self._rate = _check_rate(rate)
        self._burst = self._burst_for(self._rate)

    @property
    def burst(self) -> float:
        """B = N x W(s) x Q, in token units (0 without a quota)."""
        return self._burst

    def measure(self, now_ms: int) -> float:
        """The tokens in the bucket at ``now_ms``, after refilling."""
        rate = self._rate
        if rate is None:
            return float(LONG_MAX)
        self._refill(rate, now_ms)
        return self._tokens

    def record(self, value: float, now_ms: int) -> None:
        """Spend ``value`` tokens at ``now_ms`` (refill first). Negative values give tokens back."""
        rate = self._rate
        if rate is None:
            return
        self._refill(rate, now_ms)
        tokens = self._tokens - value
        burst = self._burst
        self._tokens = tokens if tokens < burst else burst

    def clear(self) -> None:
        """Forget the history: the bucket is full again at its next use."""
        self._tokens = 0.0
        self._last_update_ms = None

    def _refill(self, rate: float, now_ms: int) -> None:
        last = self._last_update_ms
        burst = self._burst
        if last is None:
            self._tokens = burst
        else:
            # min(B, tokens + Q * elapsed_s). A clock going backwards removes tokens, as in Kafka.
            tokens = self._tokens + rate * ((now_ms - last) / 1000.0)
            self._tokens = tokens if tokens < burst else burst
        self._last_update_ms = now_ms

    def _burst_for(self, rate: float | None) -> float:
        if rate is None:
            return 0.0
        return self._num_samples * self._window_s * rate

    def __repr__(self) -> str:
        return f"TokenBucket(rate={self._rate!r}, burst={self._burst!r}, tokens={self._tokens!r})"
