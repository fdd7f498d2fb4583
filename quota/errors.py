"""The quota engine's exceptions: one for bad input, two that mirror Kafka's quota exceptions."""

from __future__ import annotations


class QuotaConfigError(ValueError):
    """A quota setting or argument the engine cannot work with (a non-positive bound, N < 1, ...).

    The only error the engine raises for bad input; the message names the argument, the value and what
    was expected.
    """

    def __init__(self, name: str, value: object, expected: str) -> None:
        super().__init__(f"{name}={value!r}: expected {expected}")
        self.name = name
        self.value = value
        self.expected = expected


class QuotaViolation(Exception):
    """A quota check found the measured value over its bound (Kafka's ``QuotaViolationException``).

    ``value`` is what the check measured: the rate in units per second for a sampled window, the
    (negative) token count for a token bucket. ``throttle_ms`` is the unbounded throttle Kafka derives
    from it at the same instant (spec §1.7 for windows, §1.6 for buckets), before any int32 wrap.
    """

    def __init__(self, value: float, bound: float, throttle_ms: int) -> None:
        super().__init__(f"quota violated: measured {value!r} > bound {bound!r}, throttle {throttle_ms} ms")
        self.value = value
        self.bound = bound
        self.throttle_ms = throttle_ms


class ThrottlingQuotaExceeded(Exception):
    """A strict controller-mutation quota refused a charge (error 89, THROTTLING_QUOTA_EXCEEDED).

    ``throttle_ms`` is the int32 throttle Kafka puts in the exception; ``message`` is Kafka's default text.
    """

    error_code = 89
    message = "The throttling quota has been exceeded."

    def __init__(self, throttle_ms: int) -> None:
        super().__init__(self.message)
        self.throttle_ms = throttle_ms


def require_positive_int(name: str, value: object) -> int:
    """``value`` if it is an int >= 1 (bools are not ints here), else :class:`QuotaConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise QuotaConfigError(name, value, "an integer >= 1")
    return value


def require_bound(name: str, value: object) -> float:
    """``value`` as a float if it is a number > 0 (not NaN, not a bool), else :class:`QuotaConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise QuotaConfigError(name, value, "a number > 0")
    return float(value)
