"""A log-linear latency histogram with bounded relative error, in the manner of HdrHistogram.

Values are non-negative integers (the benches record nanoseconds). Values below `2 ** sub_bits` get a
bucket each; above, every power-of-two range is split into `2 ** (sub_bits - 1)` equal buckets, so a
bucket is never wider than `1 / 2 ** (sub_bits - 1)` of the values in it: with the default sub_bits = 11
that is 1/1024 < 0.1 %, three significant decimal digits, whatever the magnitude (a 1 µs and a 10 s
latency are both resolved to 0.1 %). Memory is a flat list of counts, about 2 ** (sub_bits - 1) per
power of two up to the largest value recorded.

Why our own rather than the `hdrhistogram` package: the benches need record, percentile and merge, about
sixty lines whose error bound the tests check on known distributions; no extra dependency (that package
builds a C extension) for a bench-only need.

A percentile is answered as HdrHistogram does, with the highest value equivalent to the bucket holding
the sample of that rank (nearest rank), so a reported p99 is never below the true one by more than the
bucket width, and never above it by more than the relative error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


class LogLinearHistogram:
    __slots__ = ("_counts", "_half", "_sub_bits", "count", "max", "min", "total")

    def __init__(self, sub_bits: int = 11) -> None:
        if sub_bits < 2:
            raise ValueError("sub_bits must be at least 2")
        self._sub_bits = sub_bits
        self._half = 1 << (sub_bits - 1)
        self._counts: list[int] = [0] * (1 << sub_bits)
        self.count = 0
        self.total = 0
        self.min = -1
        self.max = -1

    @property
    def relative_error(self) -> float:
        """The widest bucket, as a fraction of the smallest value in it."""
        return 1 / self._half

    def _index(self, value: int) -> int:
        shift = value.bit_length() - self._sub_bits
        if shift <= 0:
            return value
        # value >> shift is in [half, 2 * half): the bucket within this power of two.
        return (shift + 1) * self._half + (value >> shift) - self._half

    def _highest_equivalent(self, index: int) -> int:
        if index < (1 << self._sub_bits):
            return index
        shift, within = divmod(index - (1 << self._sub_bits), self._half)
        shift += 1
        return ((self._half + within + 1) << shift) - 1

    def record(self, value: int, times: int = 1) -> None:
        if value < 0:
            raise ValueError(f"negative value {value}")
        index = self._index(value)
        counts = self._counts
        if index >= len(counts):
            counts.extend([0] * (index + 1 - len(counts)))
        counts[index] += times
        self.count += times
        self.total += value * times
        if value > self.max:
            self.max = value
        if self.min < 0 or value < self.min:
            self.min = value

    def record_all(self, values: Iterable[int]) -> None:
        for value in values:
            self.record(value)

    def merge(self, other: LogLinearHistogram) -> None:
        if other._sub_bits != self._sub_bits:
            raise ValueError("histograms of different precision")
        if len(other._counts) > len(self._counts):
            self._counts.extend([0] * (len(other._counts) - len(self._counts)))
        for i, n in enumerate(other._counts):
            if n:
                self._counts[i] += n
        self.count += other.count
        self.total += other.total
        self.max = max(self.max, other.max)
        if other.min >= 0 and (self.min < 0 or other.min < self.min):
            self.min = other.min

    def percentile(self, percent: float) -> int:
        """The value at `percent` (0-100, e.g. 99.9), by nearest rank; 0 when nothing was recorded."""
        if not 0 <= percent <= 100:
            raise ValueError(f"percent {percent} outside 0-100")
        if self.count == 0:
            return 0
        # Rounded first, so 99.9 % of 1000 is rank 999 and not 1000 by a float's last bit.
        rank = max(1, math.ceil(round(percent * self.count / 100, 9)))
        seen = 0
        for index, n in enumerate(self._counts):
            seen += n
            if seen >= rank:
                # Never report beyond what was actually recorded (the top bucket may be wider than max).
                return min(self._highest_equivalent(index), self.max)
        return self.max

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0
