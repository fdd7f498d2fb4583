"""The per-second demand a replay feeds to the quota engine, and where it may safely skip ahead.

Demand: a usage row covering n whole seconds (its interval) asks for its bytes evenly over those seconds,
the remainder one byte at a time from the first second, so the seconds add up to the row exactly.

Safe seconds: with every second's demand on a sensor at most `safe_bound(Q, N, W)`, neither sensor can
throttle (see `replay.py` for the argument); the replay uses these arrays to skip long safe stretches
without changing a single result.
"""

from __future__ import annotations

import numpy as np

# Bytes a quota's float arithmetic could add to a rate near the bound; far below one byte per second.
_FLOAT_MARGIN = 1e-9


def spread_per_second(
    start_s: int, length_s: int, first_s: np.ndarray, seconds: int, sizes: np.ndarray
) -> np.ndarray:
    """Bytes wanted in each second of [start_s, start_s + length_s) from rows that each cover `seconds`
    seconds from `first_s` (epoch seconds) and hold `sizes` bytes."""
    out = np.zeros(length_s, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    keep = sizes > 0
    if not keep.any():
        return out
    first = np.asarray(first_s, dtype=np.int64)[keep] - start_s
    sizes = sizes[keep]
    seconds = max(1, int(seconds))
    base, extra = np.divmod(sizes, seconds)
    steps = np.arange(seconds, dtype=np.int64)
    values = base[:, None] + (steps[None, :] < extra[:, None])
    np.add.at(out, (first[:, None] + steps[None, :]).ravel(), values.ravel())
    return out


def safe_bound(bound: float, num_samples: int, size_s: int) -> float:
    """The largest per-second demand that can never be throttled by a window or token-bucket sensor.

    Window: the rate divides at least (N-1) windows, and a span of w seconds holds at most w+1 arrivals,
    so the rate is at most demand x (1 + 1 / ((N-1) x size_s)). A token bucket refills Q per second,
    more than it loses at this demand. With N < 2 the window can be tiny: nothing is safe.
    """
    if num_samples < 2:
        return -1.0
    spans = (num_samples - 1) * size_s
    return bound * spans / (spans + 1) * (1 - _FLOAT_MARGIN)


def run_lengths(flags: np.ndarray) -> np.ndarray:
    """For each index, how many consecutive True values start there (0 where False)."""
    n = len(flags)
    out = np.zeros(n, dtype=np.int64)
    if n == 0:
        return out
    false_at = np.flatnonzero(~flags)
    # The first False at or after each index (n when none).
    nxt = np.full(n, n, dtype=np.int64)
    if len(false_at):
        positions = np.searchsorted(false_at, np.arange(n), side="left")
        found = positions < len(false_at)
        nxt[found] = false_at[positions[found]]
    out = nxt - np.arange(n)
    out[~flags] = 0
    return out


def latest_start_at_or_before(ok: np.ndarray) -> np.ndarray:
    """For each index x, the largest i <= x with ok[i] (-1 when none)."""
    idx = np.where(ok, np.arange(len(ok)), -1)
    return np.maximum.accumulate(idx) if len(idx) else idx


def next_busy(flags: np.ndarray) -> np.ndarray:
    """For each index, the first index at or after it where flags is True (len when none)."""
    n = len(flags)
    busy = np.flatnonzero(flags)
    positions = np.searchsorted(busy, np.arange(n), side="left")
    out = np.full(n, n, dtype=np.int64)
    found = positions < len(busy)
    out[found] = busy[positions[found]]
    return out
