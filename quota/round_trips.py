"""A broker's Produce round trips over a sampled window, for a percentile (the p99 the latency trigger reads).

The proxy records one round trip per Produce (forwarded -> answered) on the hot path, so recording is a
table look-up and an increment into a fixed histogram: no list that grows with the traffic, no sort.

Buckets: one per millisecond up to ``EXACT_MS``, then each 1/16 wider than the one before, up to
``MAX_MS`` (a longer round trip lands in the last bucket). A percentile is read as its bucket's upper
edge, so it is overstated by at most one bucket: 1 ms below ``EXACT_MS``, 6.25 % above.

The window is ``samples`` sub-windows of ``window_ms`` each, as a sampled-window rate: the percentile is
over the sub-windows that started within the last ``samples x window_ms`` ms, and a sub-window is reset
when its slot comes round again. Sans-IO and clock-free: ``now_ms`` is an argument.
"""

from __future__ import annotations

from bisect import bisect_left

from sluice.quota.errors import require_positive_int

EXACT_MS = 16
MAX_MS = 120_000
_GROWTH = 1 + 1 / 16
# Round trips below this are looked up in a table; longer ones (rare: seconds) by bisection.
_TABLE_MS = 4096


def _edges() -> tuple[int, ...]:
    edges = list(range(1, EXACT_MS + 1))
    while edges[-1] < MAX_MS:
        edges.append(max(edges[-1] + 1, round(edges[-1] * _GROWTH)))
    return tuple(edges)


# Bucket i holds round trips r with EDGES[i-1] < r <= EDGES[i] (bucket 0: r <= 1 ms).
EDGES = _edges()
_LAST = len(EDGES) - 1
_BUCKET_OF = bytes(bisect_left(EDGES, ms) for ms in range(_TABLE_MS))
assert len(EDGES) <= 256  # the table holds bucket numbers as bytes


def bucket_of(round_trip_ms: int) -> int:
    """The bucket a round trip of ``round_trip_ms`` falls in (negative ones in the first)."""
    if round_trip_ms < _TABLE_MS:
        return _BUCKET_OF[round_trip_ms] if round_trip_ms > 0 else 0
    return min(bisect_left(EDGES, round_trip_ms), _LAST)


class RoundTripWindow:
    """Round trips in ms over the last ``samples`` x ``window_ms``; ``percentile`` reads the histogram."""

    __slots__ = ("_counts", "_samples", "_starts", "_window_ms")

    def __init__(self, samples: int = 3, window_ms: int = 1000) -> None:
        self._samples = require_positive_int("samples", samples)
        self._window_ms = require_positive_int("window_ms", window_ms)
        self._counts = [[0] * len(EDGES) for _ in range(samples)]
        # The start of the sub-window each slot holds now; -1: never used.
        self._starts = [-1] * samples

    @property
    def span_ms(self) -> int:
        return self._samples * self._window_ms

    def record(self, round_trip_ms: int, now_ms: int) -> None:
        start = now_ms - now_ms % self._window_ms
        slot = (now_ms // self._window_ms) % self._samples
        if self._starts[slot] != start:
            self._starts[slot] = start
            self._counts[slot] = [0] * len(EDGES)
        self._counts[slot][bucket_of(round_trip_ms)] += 1

    def _live(self, now_ms: int) -> list[list[int]]:
        oldest = now_ms - now_ms % self._window_ms - (self._samples - 1) * self._window_ms
        return [
            counts
            for start, counts in zip(self._starts, self._counts, strict=True)
            if oldest <= start <= now_ms
        ]

    def count(self, now_ms: int) -> int:
        """Round trips recorded in the window."""
        return sum(sum(counts) for counts in self._live(now_ms))

    def percentile(self, fraction: float, now_ms: int, at_least: int = 1) -> int | None:
        """The ``fraction`` (0.99 for the p99) percentile in ms, as its bucket's upper edge, read low enough
        that at least ``at_least`` round trips lie at or above it; None when the window holds fewer.

        `at_least` matters only while the window holds fewer than ``(at_least - 1) / (1 - fraction)``
        round trips (200 for the p99 with 3): then the plain percentile is one of the slowest few (with
        under 100, the p99 is the slowest), and a reading above a bucket means that many round trips lay
        above it."""
        require_positive_int("at_least", at_least)
        live = self._live(now_ms)
        total = sum(sum(counts) for counts in live)
        if total < at_least:
            return None
        # The smallest bucket at or below which at least `fraction` of the round trips lie, and at most all
        # but `at_least - 1` of them.
        wanted = min(fraction * total, total - at_least + 1)
        seen = 0
        for bucket in range(len(EDGES)):
            seen += sum(counts[bucket] for counts in live)
            if seen >= wanted:
                return EDGES[bucket]
        return EDGES[_LAST]
