"""Throttle-time arithmetic exactly as Kafka does it (spec §1.6, §1.7): Java rounding and Java int casts.

Kafka computes throttles in doubles, rounds them with ``Math.round`` (nearest, ties towards +inf) into a
``long``, and the managers then narrow that long to an ``int`` with a two's-complement wrap (``.toInt`` in
Scala, ``(int)`` in Java). Python's ``round`` rounds ties to even and Python ints never wrap, so both are
reproduced here explicitly.
"""

from __future__ import annotations

import math

LONG_MAX = (1 << 63) - 1
LONG_MIN = -(1 << 63)
INT_MAX = (1 << 31) - 1
INT_MIN = -(1 << 31)

# Kafka's "unlimited" bound: Long.MAX_VALUE widened to a double (9.223372036854776E18).
UNLIMITED = float(LONG_MAX)
# Kafka's "no cap": Double.MAX_VALUE.
DOUBLE_MAX = 1.7976931348623157e308

_TWO_63 = 9.223372036854775808e18


def java_round(x: float) -> int:
    """Java's ``Math.round(double)``: the long nearest to ``x``, ties towards positive infinity.

    Mathematically ``floor(x + 0.5)``, evaluated exactly: adding 0.5 in floating point first would turn
    0.49999999999999994 into 1, which Java (7 and later) does not do. NaN gives 0; values beyond the long
    range saturate, as in Java.
    """
    if x != x:  # NaN
        return 0
    if x >= _TWO_63:
        return LONG_MAX
    if x < -_TWO_63:
        return LONG_MIN
    low = math.floor(x)
    # x - floor(x) is exact for every double, so the tie test is exact too.
    return low + 1 if x - low >= 0.5 else low


def window_throttle_ms(total: float, window_ms: int, bound: float) -> int:
    """A sampled-window sensor's throttle (spec §1.7): 0 while the rate ``total`` over ``window_ms`` is
    within ``bound`` (equal to it is within), else ``round((O - T) / T x window_ms)``, unbounded."""
    observed = total / (window_ms / 1000.0)
    if observed <= bound:
        return 0
    return java_round((observed - bound) / bound * window_ms)


def to_int32(value: int) -> int:
    """Narrow a long to an int the way Java's ``(int)`` cast does: keep the low 32 bits, two's complement.

    Kafka applies this to unbounded byte-rate throttles; a throttle beyond 2**31 - 1 ms (24.8 days) wraps
    to a negative number, which the broker then treats as "no throttle". Kafka does not clamp, nor do we.
    """
    return ((value + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def saturating_int32(x: float) -> int:
    """Java's ``(int)`` cast of a double: truncate towards zero, NaN to 0, saturate at the int range.

    Used for the fetch size cap, ``toInt`` of ``getMaxValueInQuotaWindow`` (spec §2.7).
    """
    if x != x:
        return 0
    if x >= INT_MAX:
        return INT_MAX
    if x <= INT_MIN:
        return INT_MIN
    return int(x)


def throttle_time(observed: float, bound: float, window_ms: int) -> int:
    """``QuotaUtils.throttleTime``: ``round((O - T) / T * W)`` in ms, the delay X with O*W/(W+X) = T.

    Not clamped: an observed rate under the bound gives a negative number (spec V5).
    """
    return java_round((observed - bound) / bound * window_ms)


def bounded_throttle_time(observed: float, bound: float, window_ms: int, max_throttle_ms: int) -> int:
    """``QuotaUtils.boundedThrottleTime``: :func:`throttle_time` capped at ``max_throttle_ms``."""
    return min(throttle_time(observed, bound, window_ms), max_throttle_ms)


def token_bucket_throttle_time(tokens: float, rate: float) -> int:
    """The time to refill a token bucket from ``tokens`` back to zero: ``round(-tokens / Q * 1000)`` ms.

    ``ControllerMutationQuotaManager.throttleTimeMs``; with ``tokens`` >= 0 the result is <= 0.
    """
    return java_round(-tokens / rate * 1000)
