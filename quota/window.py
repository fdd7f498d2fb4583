"""Kafka's sampled-window rate (``Rate`` over a ``WindowedSum``), spec §1.2-§1.4.

A ring of samples, each covering up to one window W; the rate is the sum of the live samples divided by
the elapsed window, which is at least N-1 whole windows (the "minimum window") and never below 1 ms.

Two behaviours:

* Kafka >= 3.8 (the default): a sample expires N*W after its *last* event and the ring has N+1 slots, so
  a sample that still holds events from inside the monitored window is kept.
* Kafka <= 3.7 (``legacy=True``): a sample expires N*W after it *started* and the ring has N slots. The
  whole sample drops out at once and the window snaps back, which gives the book's comb-shaped traffic.

The samples live in parallel lists indexed by ring slot rather than in one object per sample: the hot
path (record, then measure) touches a handful of list slots and two cached numbers, and only walks the
ring when a sample can actually have expired.

This class is the reference: quota/_compiled.c is its compiled twin (quota/compiled.py hands it out), which
the sensors run where the install has it; :class:`WindowRate` is what both offer.
"""

from __future__ import annotations

from typing import Protocol

from sluice.quota.errors import require_positive_int
from sluice.quota.throttle import window_throttle_ms

_NEVER = 1 << 62


class WindowRate(Protocol):
    """What :class:`SampledRate` and its compiled twin (quota/_compiled.c) offer, method for method."""

    @property
    def num_samples(self) -> int: ...
    @property
    def window_ms(self) -> int: ...
    @property
    def legacy(self) -> bool: ...
    def record(self, value: float, now_ms: int, /) -> None: ...
    def total(self, now_ms: int, /) -> float: ...
    def window_size_ms(self, now_ms: int, /) -> int: ...
    def measure(self, now_ms: int, /) -> float: ...
    def live_samples(self, now_ms: int, /) -> int: ...
    def clear(self) -> None: ...
    def record_and_throttle(self, value: float, now_ms: int, bound: float, /) -> int: ...


class SampledRate:
    """The rate of a quantity over ``num_samples`` windows of ``window_ms``, in units per second.

    ``record(value, now_ms)`` adds to the current sample; ``measure(now_ms)`` purges expired samples and
    returns the rate; ``window_size_ms(now_ms)`` is the elapsed window the rate divides by (also what the
    throttle formula multiplies by). All times are integer milliseconds from any fixed origin.
    """

    __slots__ = (
        "_counts",
        "_cur",
        "_expire_age_ms",
        "_lasts",
        "_legacy",
        "_min_full_windows",
        "_next_purge_ms",
        "_num_samples",
        "_oldest_start_ms",
        "_purge_key",
        "_slots",
        "_starts",
        "_total",
        "_values",
        "_window_ms",
    )

    def __init__(self, num_samples: int = 11, window_ms: int = 1000, *, legacy: bool = False) -> None:
        self._num_samples = require_positive_int("num_samples", num_samples)
        self._window_ms = require_positive_int("window_ms", window_ms)
        self._legacy = bool(legacy)
        self._slots = num_samples if legacy else num_samples + 1
        self._expire_age_ms = num_samples * window_ms
        self._min_full_windows = num_samples - 1
        self._starts: list[int] = []
        # Time of the last event of each sample (>= 3.8). A legacy sample has a single timestamp, its start.
        self._lasts: list[int] = []
        self._values: list[float] = []
        self._counts: list[int] = []
        # The list whose timestamps decide expiry: last events (>= 3.8) or starts (<= 3.7).
        self._purge_key = self._starts if legacy else self._lasts
        self._cur = 0
        self._total: float = 0
        self._oldest_start_ms = 0
        # No sample can expire before this instant; a conservative (early) value only costs a ring walk.
        self._next_purge_ms = _NEVER

    @property
    def num_samples(self) -> int:
        return self._num_samples

    @property
    def window_ms(self) -> int:
        return self._window_ms

    @property
    def legacy(self) -> bool:
        return self._legacy

    def record(self, value: float, now_ms: int) -> None:
        """Add ``value`` at ``now_ms``: into the current sample, or a new one if the current one is complete.

        Recording never purges; expiry is decided when the rate is read, as in Kafka.
        """
        starts = self._starts
        if not starts:
            self._append(now_ms)
            cur = 0
        else:
            cur = self._cur
            if now_ms - starts[cur] >= self._window_ms:
                cur = self._advance(now_ms)
        self._values[cur] += value
        self._counts[cur] += 1
        self._lasts[cur] = now_ms
        self._total += value
        if not self._legacy:
            expiry = now_ms + self._expire_age_ms
            if expiry < self._next_purge_ms:  # only when the clock went backwards
                self._next_purge_ms = expiry

    def total(self, now_ms: int) -> float:
        """The window sum at ``now_ms`` (``WindowedSum.measure``): the values of all unexpired samples."""
        if now_ms >= self._next_purge_ms:
            self._purge(now_ms)
        return self._total

    def window_size_ms(self, now_ms: int) -> int:
        """``Rate.windowSize``: ms from the oldest sample's start, at least N-1 whole windows, at least 1."""
        if now_ms >= self._next_purge_ms:
            self._purge(now_ms)
        if not self._starts:
            # Kafka's oldest() creates an empty sample at now when there is none; keep that side effect,
            # because a record shortly afterwards lands in that sample and inherits its start.
            self._append(now_ms)
        elapsed = now_ms - self._oldest_start_ms
        window = self._window_ms
        # Java long division truncates towards zero; only differs from // when the clock went backwards.
        full = elapsed // window if elapsed >= 0 else -(-elapsed // window)
        if full < self._min_full_windows:
            elapsed += (self._min_full_windows - full) * window
        return elapsed if elapsed > 1 else 1

    def measure(self, now_ms: int) -> float:
        """The rate at ``now_ms`` in units per second: window sum / (window size in s)."""
        total = self.total(now_ms)
        return total / (self.window_size_ms(now_ms) / 1000.0)

    def record_and_throttle(self, value: float, now_ms: int, bound: float) -> int:
        """Record, then check: the throttle in ms a sensor with upper ``bound`` returns, 0 if within it.

        A window sensor's record with its check (spec §1.5; the throttle of §1.7), in one call because the
        compiled twin saves most of a sensor's cost by making it one.
        """
        self.record(value, now_ms)
        return window_throttle_ms(self.total(now_ms), self.window_size_ms(now_ms), bound)

    def live_samples(self, now_ms: int) -> int:
        """How many samples hold at least one event after purging at ``now_ms`` (for tests and debugging)."""
        if now_ms >= self._next_purge_ms:
            self._purge(now_ms)
        return sum(1 for count in self._counts if count > 0)

    def clear(self) -> None:
        """Forget every sample, as if newly created."""
        self._starts.clear()
        self._lasts.clear()
        self._values.clear()
        self._counts.clear()
        self._cur = 0
        self._total = 0
        self._oldest_start_ms = 0
        self._next_purge_ms = _NEVER

    def _append(self, now_ms: int) -> None:
        self._starts.append(now_ms)
        self._lasts.append(now_ms)
        self._values.append(0)
        self._counts.append(0)
        self._refresh()

    def _advance(self, now_ms: int) -> int:
        cur = (self._cur + 1) % self._slots
        self._cur = cur
        if cur == len(self._starts):
            self._append(now_ms)
        else:
            self._starts[cur] = now_ms
            self._lasts[cur] = now_ms
            self._values[cur] = 0
            self._counts[cur] = 0
            self._total = self._ordered_sum()
            self._refresh()
        return cur

    def _purge(self, now_ms: int) -> None:
        expire_age = self._expire_age_ms
        key = self._purge_key
        purged = False
        for i, stamp in enumerate(key):
            if now_ms - stamp >= expire_age:
                self._starts[i] = now_ms
                self._lasts[i] = now_ms
                self._values[i] = 0
                self._counts[i] = 0
                purged = True
        if purged:
            self._total = self._ordered_sum()
        self._refresh()

    def _refresh(self) -> None:
        self._oldest_start_ms = min(self._starts)
        self._next_purge_ms = min(self._purge_key) + self._expire_age_ms

    def _ordered_sum(self) -> float:
        # Slot order, left to right, as Kafka's combine() adds its doubles.
        total: float = 0
        for value in self._values:
            total += value
        return total

    def __repr__(self) -> str:
        kind = "legacy" if self._legacy else "3.8"
        return f"SampledRate(N={self._num_samples}, W={self._window_ms}ms, {kind}, total={self._total!r})"
